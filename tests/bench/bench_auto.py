"""Benchmark: which model `model: auto` picks on each shared trace, scored on the provisioned quantile.

Per trace: auto (quantile 0.8, level correction 4h, scored 5 minutes ahead) fitted on the 14 days before
the scored week of `bench_default.py`; prints the choice and every candidate's pinball loss, best first.

Run (a minute): ``.venv/bin/python tests/bench/bench_auto.py``
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from support.shared_traces import DAY, TRACE_SPECS, load  # noqa: E402
from forecaster.base import Series  # noqa: E402
from forecaster.models import make_for_policy  # noqa: E402
from scaler.replay.forecasts import quiet_prophet_import  # noqa: E402


def main() -> None:
    quiet_prophet_import()
    for name, rel, _qps, days in TRACE_SPECS:
        tr = load(name, rel, days)
        s = tr.series
        end = float(s.t[-1] + s.step) - 7 * DAY
        keep = (s.t >= end - 14 * DAY) & (s.t < end)
        hist = Series(s.t[keep], s.y[keep], s.step)
        t0 = time.perf_counter()
        f = make_for_policy("auto", seed=0, level_half_life=14400.0, quantile=0.8).fit(hist)
        print(f"{name:24} chose {f.chosen:15} in {time.perf_counter()-t0:5.1f} s; pinball q0.8 at 5 min: " +
              ", ".join(f"{k} {v:.4g}" for k, v in sorted(f.scores.items(), key=lambda kv: kv[1])), flush=True)


if __name__ == "__main__":
    main()
