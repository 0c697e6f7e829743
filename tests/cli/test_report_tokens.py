"""The interactive report of a trace with shape, in a real headless Chromium: the token mix over the span (with the
lengths the capacity model was measured on) and each policy's capacity used."""

from __future__ import annotations

import json

import numpy as np
from click.testing import CliRunner

from scaler.cli import main
from support.browser import chromium, console_errors, wait_for
from support.capacityfiles import azure_model_file
from support.paths import REPO

BUNDLED = REPO / "scaler" / "data" / "azure_llm_code" / "per_10s.csv"
ARGS = ["--span", "45m", "--history", "10m", "--step", "10s", "--cold-start", "60", "--refit", "15m", "--no-progress"]


def test_the_report_shows_the_token_mix_and_the_capacity_used(tmp_path):
    rep, out = tmp_path / "rep", tmp_path / "bt.json"
    r = CliRunner().invoke(main, ["backtest", str(BUNDLED), *ARGS, "--policies", "reactive,oracle", "--capacity-model",
                                  str(azure_model_file(tmp_path, (50.0, 80.0))), "--json", str(out), "--report", str(rep)],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    with chromium() as driver:
        driver.get((rep / "index.html").as_uri())
        wait_for(driver, "document.getElementById('chart-used') && document.getElementById('chart-used').data",
                 what="the capacity-used chart")
        names = driver.execute_script("return document.getElementById('chart-tokens').data.map(d => d.name);")
        assert names == ["prompt tokens/s", "generated tokens/s", "weighted tokens per request (w 0.02)"]
        # the weighted tokens per request of the span's intervals with requests: 36.7 .. 100.8 (the test of the
        # clamp note), drawn against the model's measured 50 and 80
        # (plotly keeps the arrays it was given encoded in .data; ._fullData holds them as numbers)
        per = driver.execute_script("return Array.from(document.getElementById('chart-tokens')._fullData[2].y)"
                                    ".filter(v => v === v);")
        ys = [v for v in per if v is not None]
        assert 36 < min(ys) < 40 and 100 < max(ys) < 101
        lines = driver.execute_script("return document.getElementById('chart-tokens').layout.shapes.map(s => s.y0);")
        assert sorted(lines) == [50, 80]
        used = driver.execute_script("return document.getElementById('chart-used')._fullData"
                                     ".map(d => [d.name, Math.max(...Array.from(d.y).filter(v => v === v))]);")
        # reactive misses (missed % > 0): somewhere its load is over its ready capacity, over 100 %
        assert [n for n, _ in used] == ["reactive", "oracle"]
        assert dict(used)["reactive"] > 100 and doc["policies"]["reactive"]["underprovisioned_fraction"] > 0
        assert console_errors(driver) == []
    assert np.isfinite(doc["policies"]["oracle"]["replica_hours"])
