"""`forescale backtest --drift`: the server's drift response replayed on the predictive policy."""

from __future__ import annotations

import json

import numpy as np
from click.testing import CliRunner

from scaler.cli import main


def write(path, shift: float) -> None:
    """4 days of a daily cycle at 1 min; from the start of day 4 the level is multiplied by ``shift``."""
    t0 = 1_700_006_400
    t = t0 + 60 * np.arange(4 * 1440)
    qps = 50 + 40 * np.sin(2 * np.pi * ((t % 86400) / 3600 - 9) / 24)
    qps = np.where(t >= t0 + 3 * 86400, shift * qps, qps)
    path.write_text("timestamp,qps\n" + "".join(f"{int(a)},{b:.3f}\n" for a, b in zip(t, qps)))


def run(tmp_path, shift: float) -> dict:
    trace = tmp_path / f"t{shift}.csv"
    write(trace, shift)
    out = tmp_path / f"r{shift}.json"
    r = CliRunner().invoke(main, ["backtest", str(trace), "--policies", "predictive", "--model", "seasonal_naive",
                                  "--history", "2d", "--span", "1d", "--drift",
                                  "--json", str(out), "--no-progress"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "drift response (predictive" in r.output
    return json.loads(out.read_text())


def test_drift_replay_is_the_tables_predictive_policy_and_stays_quiet(tmp_path):
    same = run(tmp_path, 1.0)
    d = same["drift"]
    # without a response, the replay is the table's predictive policy itself (same decisions, same HPA)
    assert d["missed_fraction_without"] == same["policies"]["predictive"]["underprovisioned_fraction"]
    assert d["replica_hours_without"] == same["policies"]["predictive"]["replica_hours"]
    assert d["alarms"] == 0 and d["fallback_poll_fraction"] == 0.0  # a seasonal forecast of an unchanged cycle
    # a 2.5x shift on day 4: the default levelCorrection (4h) carries the new level over the horizon within
    # minutes, so the provisioned quantile covers and the drift response has nothing to do (docs/self-watch.md)
    shifted = run(tmp_path, 2.5)
    assert shifted["drift"]["alarms"] == 0
    assert shifted["drift"]["missed_fraction_with"] == shifted["policies"]["predictive"]["underprovisioned_fraction"]
