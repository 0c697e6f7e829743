"""The tools that keep the tree as it is meant to be, run by the suite: ruff's lint (rule set in pyproject.toml's
``[tool.ruff.lint]``), ruff's formatter on the modules formatted so far (``FORMATTED``), and mypy on ``scaler/`` and
``forecaster/`` at the strictness ``[tool.mypy]`` states, every module of them (no module's errors ignored)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from support.paths import REPO

BIN = Path(sys.executable).parent
# formatted by `ruff format` (the Makefile's `format`): the modules this change wrote; the rest of the tree is
# formatted in one commit of its own once the branches in flight are merged, and then this becomes the whole tree
FORMATTED = (
    "scaler/params.py",
    "scaler/scaledobject.py",
    "scaler/specwrite.py",
    "scaler/replay/variant.py",
    "scaler/replay/execution.py",
    "scaler/replay/batches.py",
    "scaler/replay/settings.py",
    "scaler/replay/families/",
    "forecaster/models/plugins.py",
    "scaler/probe/exits.py",
    "examples/forescale-model-ewma/",
    "tests/test_lint.py",
    "tests/test_import_cycles.py",
)


def run(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), cwd=REPO, capture_output=True, text=True, timeout=timeout)


def test_ruff_lint_is_clean():
    proc = run(
        str(BIN / "ruff"),
        "check",
        "--no-cache",
        "--output-format",
        "concise",
        "scaler",
        "forecaster",
        "tests",
        "examples",
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_ruff_format_leaves_the_formatted_modules_as_they_are():
    proc = run(str(BIN / "ruff"), "format", "--no-cache", "--check", "--diff", *FORMATTED)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_mypy_is_clean(tmp_path):
    proc = run(str(BIN / "mypy"), "--cache-dir", str(tmp_path / "cache"), "--no-error-summary", timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_no_module_is_excused_from_mypy():
    """The backlog of modules whose errors mypy ignored (49 when the check came in) is empty and stays so: a module
    that does not type-check is fixed, not listed."""
    import tomllib

    mypy = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]
    excused = [o["module"] for o in mypy.get("overrides", []) if o.get("ignore_errors")]
    assert excused == [], excused
    assert not mypy.get("ignore_errors"), "mypy's errors ignored everywhere"


def test_the_checks_see_a_violation(tmp_path):
    """The same commands fail on a file with an unused import, a wrongly formatted line and a type error."""
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nx: int = 'a'\ny = [1,2]\n")
    assert run(str(BIN / "ruff"), "check", "--no-cache", "--isolated", "--select", "F", str(bad)).returncode == 1
    assert run(str(BIN / "ruff"), "format", "--no-cache", "--check", str(bad)).returncode == 1
    assert run(str(BIN / "mypy"), "--cache-dir", str(tmp_path / "c"), str(bad)).returncode == 1
