"""The documentation: a short README, a MkDocs site that builds with --strict (broken internal links and
anchors fail it), and a reference generated from the code that must be current."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import click

from scaler.cli import main
from scaler.cli.docref import render
from scaler.spec import KEYS
from support.paths import REPO

REFERENCE = REPO / "docs" / "reference.md"


def test_the_reference_is_what_the_generator_prints():
    # regenerate: python -m scaler.cli.docref > docs/reference.md   (or: make reference)
    assert REFERENCE.read_text() == render(), "docs/reference.md is stale: run `make reference`"


def test_the_reference_lists_every_flag_and_key_with_the_code_s_defaults():
    text = REFERENCE.read_text()
    assert "Sentinel" not in text and "UNSET" not in text and "<function" not in text
    meta = text.split("## Trigger metadata", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| `([A-Za-z]+)` \| ([^|]*) \|", meta, flags=re.M))
    assert set(rows) == {k.name for k in KEYS}
    for k in KEYS:
        if k.default not in (None, ""):
            assert rows[k.name].strip().strip("`") == k.default, k.name
    for name, cmd in main.commands.items():
        section = text.split(f"## `forescale {name}`", 1)[1].split("\n## ", 1)[0]
        for p in cmd.params:
            if isinstance(p, click.Option) and not p.hidden:
                opts = [o for o in p.opts + p.secondary_opts if o.startswith("--") and o != "--help"]
                assert all(f"`{o}`" in section for o in opts), (name, opts)


def test_the_reference_shows_a_repeatable_option_without_default_as_none():
    # `backtest --scenario` (multiple=True, no default) once showed click's `Sentinel.UNSET`
    section = REFERENCE.read_text().split("## `forescale backtest`", 1)[1].split("\n## ", 1)[0]
    row = next(line for line in section.splitlines() if line.startswith("| `--scenario` |"))
    assert row.split("|")[2].strip() == "—"


def test_readme_is_short_and_starts_with_the_quickstart():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) < 200
    sections = [line for line in text.splitlines() if line.startswith("## ")]
    assert sections[0] == "## Quickstart"
    quick = text.split("## Quickstart", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0].strip().splitlines()
    assert len(quick) <= 15 and quick[0].startswith("pip install .")
    for verb in ("forescale backtest", "forescale tune", "forescale check", "helm install"):
        assert any(line.startswith(verb) for line in quick), verb
    assert "make backtest" in text and "make test" in text
    assert "ImagePullBackOff" in text and "docker build" in text  # how to get images until a release exists
    for link in re.findall(r"\]\((?!https?://)([^)#]+)", text):
        assert (REPO / link).exists(), link
    for page in (REPO / "docs").glob("*.md"):
        assert "../shared" not in page.read_text() and "DESIGN.md" not in page.read_text(), page.name
    assert "../shared" not in text and "DESIGN.md" not in text


def _build(root) -> subprocess.CompletedProcess:
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(root / "site")], cwd=root,
                          capture_output=True, text=True, timeout=600, env=env)


def test_mkdocs_strict_build_passes_and_fails_on_a_broken_anchor(tmp_path):
    site = tmp_path / "ok"
    site.mkdir()
    shutil.copytree(REPO / "docs", site / "docs")
    shutil.copy(REPO / "mkdocs.yml", site / "mkdocs.yml")
    res = _build(site)
    assert res.returncode == 0, res.stderr[-3000:]
    assert (site / "site" / "reference" / "index.html").is_file()
    # the same site with one broken internal anchor fails: the link check is real
    with (site / "docs" / "limits.md").open("a") as f:
        f.write("\nSee [nothing](backtest.md#no-such-section).\n")
    res = _build(site)
    assert res.returncode != 0 and "no-such-section" in res.stderr
