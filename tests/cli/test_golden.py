"""Golden files: `forescale backtest --json` must not move unless a commit says why.

Both files were written by the CLI before the replay engine was restructured
(``tests/golden/``). A change that moves numbers on purpose regenerates them
in the same commit (the commands are below) and says why in its message.
Only timing fields and the machine-dependent path of the bundled trace are
ignored.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from scaler.cli import main
from support.paths import GOLDEN, REPO

SERVEGEN = "../shared/data/traces/servegen_m-small/per_10min.csv"  # as given on the command line, from the repo root


def _normalised(doc: dict) -> dict:
    doc = dict(doc)
    doc.pop("timing", None)
    trace = dict(doc["trace"])
    if trace["name"].startswith("worldcup98 (bundled"):
        trace["source"] = Path(trace["source"]).name  # the package's install path differs per machine
    doc["trace"] = trace
    return doc


def _run(tmp_path: Path, monkeypatch, args: list[str]) -> dict:
    monkeypatch.chdir(REPO)
    out = tmp_path / "out.json"
    res = CliRunner().invoke(main, ["backtest", "--no-progress", "--json", str(out), *args])
    assert res.exit_code == 0, res.output
    return json.loads(out.read_text())


def _compare(got: dict, golden_name: str) -> None:
    want = json.loads((GOLDEN / golden_name).read_text())
    assert _normalised(got) == _normalised(want)


@pytest.mark.slow
def test_backtest_default_matches_golden(tmp_path, monkeypatch):
    # regenerate: forescale backtest --no-progress --json tests/golden/backtest_default.json
    _compare(_run(tmp_path, monkeypatch, []), "backtest_default.json")


@pytest.mark.slow
def test_sweep_servegen_matches_golden(tmp_path, monkeypatch):
    # regenerate (from the repo root): forescale backtest --sweep --span 2d --qps-per-replica 100 --no-progress
    #   --json tests/golden/sweep_servegen.json ../shared/data/traces/servegen_m-small/per_10min.csv
    if not (REPO / SERVEGEN).is_file():
        pytest.fail(f"{SERVEGEN} not found next to the repository (the shared traces)", pytrace=False)
    _compare(_run(tmp_path, monkeypatch, ["--sweep", "--span", "2d", "--qps-per-replica", "100", SERVEGEN]),
             "sweep_servegen.json")
