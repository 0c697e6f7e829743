"""What a looser CmdStan stop, or fewer refits, would save and move: Prophet's historical forecasts over a tune's span.

Per setting, the ``prophet`` model's forecasts from every cutoff of the simulated span (``forecasts.run_model``,
the 2 h refits of ``tune``, each warm-started from the previous fit, as the replay makes them), and prints the
CPU seconds of CmdStan (its processes) and of Python, and how far each quantile curve (and the mean) moved from
the first setting's: max |difference| over every point of every curve / the span's peak rate. A setting is
JSON: ``{}`` (CmdStan's defaults), ``{"tol_rel_grad": 1e9}`` (any of CmdStan's L-BFGS arguments; set through
``forecaster.models.prophet_fit.STAN_STOP``), ``{"refit": 14400}`` (refit every 4 h instead: the curves in between
come from the older fit), ``{"cold": 1}`` (every fit from Prophet's own initial values, no warm start: the spread
that the start alone makes).

Run: ``PYTHONPATH=. .venv/bin/python tests/bench/bench_stan_stop.py TRACE.csv --span 2d
'{}' '{"tol_rel_grad": 1e9}' '{"refit": 14400}'``
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import time

import numpy as np


def main() -> None:
    from forecaster.models import prophet, prophet_fit
    from scaler.cli.options import Duration
    from scaler.cli.traces import load_csv
    from scaler.replay import engine, prepare
    from scaler.replay.forecasts import Packed, band, run_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("settings", nargs="+", help="JSON objects, the first is the reference")
    ap.add_argument("--span", default="2d")
    a = ap.parse_args()
    trace = load_csv(a.trace)
    s = engine.Settings(span_seconds=Duration().convert(a.span, None, None), refit_seconds=7200.0)
    su = prepare.setup(trace, s)
    series, step, lead = trace.series, trace.series.step, su.lead.seconds
    horizon = int(math.ceil((lead + s.world.extra_lead_seconds + step) / step)) + 1
    qs = (0.5, 0.8, 0.9, 0.95, 0.99)
    ref = None
    warm_fit = prophet.ProphetForecaster.fit
    for text in a.settings:
        opt = json.loads(text)
        refit = float(opt.pop("refit", s.refit_seconds))
        cold = bool(opt.pop("cold", False))
        prophet.ProphetForecaster.fit = (lambda self, series, warm_start=None: warm_fit(self, series)) if cold else warm_fit
        prophet_fit.STAN_STOP = opt
        kw = dict(horizon=horizon, score_points=max(1, int(math.ceil(lead / step - 1e-9))),
                  refit_every=max(1, int(round(refit / step))), history_seconds=s.history_seconds,
                  quantiles=tuple(sorted(set(band(s.quantile)) | set(qs))), q=s.quantile,
                  level_seconds=s.level_correction_seconds, seed=s.seed,
                  **engine.holiday_kw(s, series, horizon * step))
        ru0, c0, w0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.process_time(), time.perf_counter()
        mr = run_model(series, "prophet", su.start, su.end, **kw)
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        stan = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
        pk = Packed.from_curves("prophet", mr.curves)
        line = (f"{text:40s} {mr.fits:4d} fits  CmdStan CPU {stan:6.1f} s  Python CPU {time.process_time() - c0:5.1f} s"
                f"  wall {time.perf_counter() - w0:5.1f} s  pinball {mr.scores.get('pinball'):.5f}")
        if ref is None:
            ref = pk
        else:
            moved = {f"q{q:g}": np.nanmax(np.abs(pk.quantiles[q] - ref.quantiles[q])) / su.peak for q in (0.5, 0.8, 0.95)}
            moved["mean"] = np.nanmax(np.abs(pk.mean - ref.mean)) / su.peak
            line += "  moved (max |diff| / peak): " + ", ".join(f"{k} {100 * v:.2f} %" for k, v in moved.items())
        print(line, flush=True)


if __name__ == "__main__":
    main()
