"""Each package's docstring maps its folder: every module and sub-package of it is named there (as ``name`` or
``package.name``), so a module added without a line in its package's map fails here."""

from __future__ import annotations

import ast

import pytest

from support.paths import REPO

PACKAGES = sorted(p.parent for p in (REPO / "scaler").rglob("__init__.py") if "_proto" not in p.parts) + \
    sorted(p.parent for p in (REPO / "forecaster").rglob("__init__.py"))


@pytest.mark.parametrize("pkg", PACKAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_the_package_docstring_names_every_module(pkg):
    doc = ast.get_docstring(ast.parse((pkg / "__init__.py").read_text(encoding="utf-8"))) or ""
    dotted = ".".join(pkg.relative_to(REPO).parts)
    members = [p.stem for p in pkg.glob("*.py") if p.stem not in ("__init__", "__main__")]
    members += [p.name for p in pkg.iterdir() if p.is_dir() and (p / "__init__.py").exists()]
    missing = [m for m in sorted(members) if f"``{m}``" not in doc and f"``{dotted}.{m}``" not in doc]
    assert not missing, f"{dotted}'s docstring does not name {', '.join(missing)}"


def test_the_check_sees_the_packages():
    names = {p.relative_to(REPO).as_posix() for p in PACKAGES}
    assert {"scaler", "scaler/replay", "scaler/replay/families", "scaler/serve", "forecaster/models"} <= names
