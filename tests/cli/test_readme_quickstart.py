"""The README's quickstart, run verbatim on the bundled trace (issue 36 item 5): step 2's two lines, read out of
README.md (so the test breaks when the README changes them), give the same figures.

``traffic.csv`` is the bundled WorldCup98 trace written out (what the README's ``traffic.csv`` stands for); the
lines run as they are written (their comments cut), in a folder of their own. ``tune`` prints its ``expected`` line
and writes ``scaledobject.yaml``; ``backtest`` replays it in the world of its ``forescale.io/replay`` annotation and
prints its row. Tolerance: none at the printed precision: missed % (3 decimals), violation minutes, replica-hours
(1 decimal) and peak replicas are the same text; the oracle's replica-hours (the "x oracle" reference) are the same
in both. (The doubles themselves are compared exactly in test_replay_annotation.py and test_roundtrip.py.)
Runs tune and a 7-day backtest on the bundled trace: 40 s on an idle 2-core machine, ~3 min on a loaded one.
"""

from __future__ import annotations

import gzip
import re
import shlex

import pytest
from click.testing import CliRunner

from scaler.cli import main
from scaler.cli.traces import BUNDLED_TRACE
from support.paths import REPO


def quickstart() -> list[str]:
    """The quickstart's command lines, comments cut."""
    text = (REPO / "README.md").read_text()
    block = text.split("## Quickstart", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    return [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.startswith("forescale ")]


def test_the_quickstart_names_tune_then_the_replay_of_its_manifest():
    lines = quickstart()
    tune = next(line for line in lines if line.startswith("forescale tune traffic.csv"))
    replay = next(line for line in lines if "--scaledobject" in line)
    out = shlex.split(tune)[shlex.split(tune).index("-o") + 1]
    assert replay == f"forescale backtest traffic.csv --scaledobject {out}"  # the file tune writes is the one replayed


@pytest.mark.slow
def test_readme_quickstart_tune_then_backtest_reproduces_tunes_figures(tmp_path, monkeypatch):
    lines = quickstart()
    tune = next(line for line in lines if line.startswith("forescale tune traffic.csv"))
    replay = next(line for line in lines if "--scaledobject" in line)
    (tmp_path / "traffic.csv").write_bytes(gzip.decompress(BUNDLED_TRACE.read_bytes()))
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, shlex.split(tune)[1:], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    # expected  missed 0.434 % of requests, 451 violation minutes in 7.00 d, 585.9 replica-h = 1.015x oracle, peak 20
    want = re.search(r"^expected  missed ([\d.]+) % of requests, (\d+) violation minutes in [\d.]+ d, ([\d.]+) "
                     r"replica-h = [\d.]+x oracle, peak (\d+) replicas", res.output, re.M)
    oracle = re.search(r"^o oracle\s+[\d.]+\s+\d+\s+([\d.]+)", res.output, re.M)
    assert want and oracle, res.output
    res = CliRunner().invoke(main, shlex.split(replay)[1:], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "world     --span 7d --qps-per-replica 200 --cold-start 180" in res.output  # tune's world, read back
    row = re.search(r"^my-model\s+([\d.]+)\s+(\d+)\s+([\d.]+)\s+[\d.]+\s+\d+\s+(\d+)", res.output, re.M)
    oracle_row = re.search(r"^oracle\s+[\d.]+\s+\d+\s+([\d.]+)", res.output, re.M)
    assert row and oracle_row, res.output
    assert row.groups() == want.groups()  # missed %, violation minutes, replica-hours, peak: as tune printed them
    assert oracle_row.group(1) == oracle.group(1)  # the same oracle: the same "x oracle"
