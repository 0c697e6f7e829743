"""Rolling-origin backtests, darts style: producing historical forecasts is
separate from scoring them.

    fcs = historical_forecasts(make("prophet"), series, start=t0, horizon=5,
                               stride=10, refit_every=3, quantiles=(0.9,))
    fcs = level_corrected(series, fcs, half_life_seconds=1800)   # as the policy does
    score(series, fcs, q=0.9, season=1440)   # {"mase", "wape", "pinball", "coverage", "n"}

A *cutoff* c is the first forecast timestamp: the model sees only the points
with ``t < c`` (no peeking) and forecasts ``c, c + step, ..., c + (horizon-1)
* step``; so ``h`` steps ahead means ``t = c + (h - 1) * step`` and the last
observation used is at ``now = c - step``.

Level correction needs the curve's value at ``now``. In the server the curve
was precomputed at fit time and covers ``now``; a forecast made at the
cutoff starts one step later. ``include_now=True`` prepends the model's
forecast for ``now`` made one step earlier (for prophet: the fitted curve at
``now``), so that ``level_corrected`` applies ``forecaster.level`` exactly as
the policy does.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Iterator, Sequence, TypeVar

import numpy as np

from .base import Forecast, Forecaster, InsufficientHistory, Series
from .level import corrector, residual_rows
from .metrics import coverage, mase, pinball, wape

T = TypeVar("T")


def cutoffs(series: Series, *, start: float, horizon: int, stride: int = 1) -> np.ndarray:
    """Cutoff timestamps from ``start`` every ``stride`` steps, each with ``horizon`` points of actuals."""
    if horizon < 1 or stride < 1:
        raise ValueError(f"horizon and stride must be >= 1 step, got {horizon} and {stride}")
    if not len(series):
        return np.array([])
    step = series.step
    i0 = max(1, int(np.ceil((start - series.t[0]) / step - 1e-9)))
    i_last = len(series) - horizon  # the cutoff index whose window ends at the last point
    return series.t[np.arange(i0, i_last + 1, stride)] if i_last >= i0 else np.array([])


def historical_forecasts(forecaster: Forecaster, series: Series, *, start: float, horizon: int, stride: int = 1,
                         train_window: float | None = None, refit_every: int = 1,
                         quantiles: Sequence[float] = (), include_now: bool = False,
                         fit_from: float | None = None, fit_ahead: bool = False) -> list[tuple[float, Forecast]]:
    """Forecasts from rolling origins: a list of ``(cutoff, Forecast)``.

    ``start``: the first cutoff (epoch seconds; moved to the grid). ``horizon``:
    points per forecast. ``stride``: steps between cutoffs. ``train_window``:
    None = expanding (everything before the cutoff), else the last
    ``train_window`` seconds. ``refit_every``: refit at every k-th cutoff; in
    between, the last fitted model forecasts from the new cutoff with the
    newer observations (``Fitted.predict(origin=..., recent=...)``).
    Cutoffs where the model has too little history are skipped.
    A refit passes the previous fit as ``warm_start``. ``include_now``: each
    forecast gets one more point first, at ``now = cutoff - step`` (see the
    module docstring); ``score`` and ``level_corrected`` handle both forms.
    ``fit_from`` (before ``start``): the refits are counted from this cutoff instead, and the ones before
    ``start`` are made (each warm-starting the next) without forecasting from them. ``fit_ahead``: the fits are
    made in a thread of their own (``ahead``), ahead of the forecasts from the fits before: the same fits and
    forecasts, while a fit waits on its optimiser's process the forecasts of the one before are made. A fit whose
    class has ``predict_origins`` (``Fitted``) forecasts from all its cutoffs in one call, with the last cutoff's
    recent points (each origin sees those before it): the same forecasts. With ``fit_ahead``, a forecaster that has
    ``prepare`` (``ProphetForecaster``: the fit's work that needs no earlier fit) gets each refit's inputs made in
    one more thread while the refit before it runs (``fit(past, warm_start=..., prepared=...)``): the same fits.
    """
    if refit_every < 1:
        raise ValueError(f"refit_every must be >= 1, got {refit_every}")
    step = series.step
    first = start if fit_from is None else min(fit_from, start)
    first_forecast = start - 1e-6 * step  # cutoffs before this only fit

    def window(c: float) -> Series:
        past = series.until(c)
        return past.tail(train_window) if train_window is not None else past

    def fits():
        """(the fit in force, [(cutoff, its past)...]) for the cutoffs forecast from, one group a fit, refitting
        as described; a group is handed on before the next fit is made (``ahead`` forecasts from it meanwhile)."""
        fitted, group = None, []
        since_fit = 0
        cs = [float(c) for c in cutoffs(series, start=first, horizon=horizon, stride=stride)]
        prepare = getattr(forecaster, "prepare", None) if fit_ahead else None
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fit-inputs") if prepare else None
        pending: dict[int, tuple[Series, Future]] = {}  # a refit's cutoff index -> (its past, its inputs)
        try:
            for i, c in enumerate(cs):
                refit = fitted is None or since_fit >= refit_every
                past, made = pending.pop(i, None) or (None, None)
                if made is not None and not refit:  # made for a refit that came elsewhere (a fit failed)
                    made.cancel()
                if c < first_forecast and not refit:
                    since_fit += 1
                    continue
                if past is None:
                    past = window(c)
                if refit:
                    if group:
                        yield fitted, group
                        group = []
                    try:
                        if pool is None:
                            fitted = forecaster.fit(past, warm_start=fitted)
                        else:
                            nxt = i + refit_every  # the next refit if this one succeeds
                            if nxt < len(cs) and nxt not in pending:
                                pending[nxt] = (w := window(cs[nxt]), pool.submit(prepare, w))
                            ready = made.result() if made is not None else None
                            fitted = forecaster.fit(past, warm_start=fitted, prepared=ready)
                    except InsufficientHistory:
                        fitted = None
                        continue
                    since_fit = 0
                since_fit += 1
                if c >= first_forecast:
                    group.append((c, past))
            if group:
                yield fitted, group
        finally:
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)

    out: list[tuple[float, Forecast]] = []
    for fitted, group in (ahead(fits()) if fit_ahead else fits()):
        recents = [past.tail(max(c - step - fitted.last_t, 0.0) + 10 * step) for c, past in group]
        many = getattr(type(fitted), "predict_origins", None)  # the class's: a wrapper's __getattr__ must not answer
        if many is not None and not include_now and _nested(recents):
            cs = [c for c, _ in group]
            out.extend(zip(cs, many(fitted, horizon, quantiles, [c - step for c in cs], recents[-1])))
            continue
        for (c, past), recent in zip(group, recents):
            origin = c - step
            fc = fitted.predict(horizon, quantiles, origin=origin, recent=recent)
            if include_now:
                prev = fitted.predict(1, quantiles, origin=origin - step, recent=recent)
                fc = Forecast(np.concatenate((prev.t, fc.t)), np.concatenate((prev.mean, fc.mean)),
                              {q: np.concatenate((prev.quantiles[q], v)) for q, v in fc.quantiles.items()}, fc.model)
            out.append((c, fc))
    return out


def _nested(recents: list[Series]) -> bool:
    """Whether each window starts where the last one does (a refit's cutoffs, each seeing the points since the
    fit up to it): forecasting from each origin with the last window is then forecasting with its own."""
    first = [float(r.t[0]) for r in recents if len(r)]
    return len(first) == len(recents) and all(f == first[-1] for f in first)


def ahead(items: Iterator[T]) -> Iterator[T]:
    """``items``, computed in a thread of their own ahead of the caller (which works on the ones before
    meanwhile); an exception there is raised here; a caller that stops early stops it at its next item."""
    box: queue.Queue = queue.Queue()
    stop = threading.Event()
    end = object()

    def produce() -> None:
        try:
            for item in items:
                if stop.is_set():
                    return
                box.put((item, None))
        except BaseException as e:  # noqa: BLE001 (handed to the caller)
            box.put((end, e))
            return
        box.put((end, None))

    threading.Thread(target=produce, name="fits-ahead", daemon=True).start()
    try:
        while True:
            item, error = box.get()
            if item is end:
                if error is not None:
                    raise error
                return
            yield item
    finally:
        stop.set()


def level_corrected(series: Series, forecasts: list[tuple[float, Forecast]], half_life_seconds: float, *,
                    observed_points: int = 1) -> list[tuple[float, Forecast]]:
    """Each forecast level-corrected as the policy does at decision time.

    ``now`` is the last observation before the cutoff; ``observed`` the mean
    of the last ``observed_points`` finite points up to it (1 = the last one).
    ``level_correct`` on each forecast, computed for the forecasts of one
    length and set of quantiles at once (the row forms ``residual_rows`` and
    ``corrector`` it is made of: the same numbers, bit for bit).
    """
    if half_life_seconds <= 0:
        return list(forecasts)
    out = list(forecasts)
    groups: dict[tuple, list[tuple[int, float]]] = {}  # (length, quantiles) -> (position, observed)
    for j, (c, fc) in enumerate(forecasts):
        now = c - series.step
        i = _index(series, now)
        obs = np.nan
        if i is not None:
            w = series.y[max(0, i - observed_points + 1):i + 1]
            w = w[np.isfinite(w)]
            if w.size:
                obs = float(w.mean())
        if np.isfinite(obs) and len(fc):
            groups.setdefault((len(fc), tuple(fc.quantiles)), []).append((j, obs))
    for (_, qs), members in groups.items():
        pos = [j for j, _ in members]
        fcs = [forecasts[j][1] for j in pos]
        t = np.vstack([f.t for f in fcs])
        mean = np.vstack([f.mean for f in fcs])
        nows = np.array([forecasts[j][0] - series.step for j in pos], dtype=float)
        r = residual_rows(t, mean, nows, np.array([o for _, o in members], dtype=float))
        fix = corrector(t, r, nows, half_life_seconds)
        new_mean = fix(mean)
        new_q = {q: fix(np.vstack([f.quantiles[q] for f in fcs])) for q in qs}
        for k, (j, f) in enumerate(zip(pos, fcs)):
            if r[k] != 0.0:  # level_correct leaves a curve with no residual as it is
                out[j] = (forecasts[j][0], Forecast(f.t, new_mean[k], {q: v[k] for q, v in new_q.items()}, f.model))
    return out


def score(series: Series, forecasts: list[tuple[float, Forecast]], q: float | None = None, season: int = 1, *,
          h: int | None = None) -> dict[str, float]:
    """Accuracy of the forecasts at ``h`` steps ahead of the cutoff (``t = cutoff + (h-1) * step``;
    default: each forecast's last point, the horizon).

    Scored at one horizon, not over the window: the policy provisions for
    ``t + lead``, and errors at different horizons are different
    distributions. ``mase`` is scaled by the seasonal-naive MAE (``season``
    steps) of the series before the first cutoff; ``wape`` a fraction;
    ``pinball`` and ``coverage`` (one-sided: fraction of actual <= the ``q``
    curve) are NaN when ``q`` is None. ``n`` is the number of scored points.
    """
    nan = float("nan")
    if not forecasts:
        return {"mase": nan, "wape": nan, "pinball": nan, "coverage": nan, "n": 0}
    actual, mean, upper = [], [], []
    for c, fc in forecasts:
        if h is None:
            k = len(fc) - 1
        else:
            k = int(np.searchsorted(fc.t, c + (h - 1) * series.step - 1e-6 * series.step))
            if k >= len(fc) or abs(fc.t[k] - (c + (h - 1) * series.step)) > 1e-6 * series.step:
                continue
        i = _index(series, float(fc.t[k]))
        actual.append(series.y[i] if i is not None else np.nan)
        mean.append(fc.mean[k])
        upper.append(fc.at_quantile(q)[k] if q is not None else np.nan)
    a, p, u = np.array(actual), np.array(mean), np.array(upper)
    first = forecasts[0][0]
    insample = series.until(first).y
    ok = np.isfinite(a) & np.isfinite(p)
    return {
        "mase": mase(a, p, insample, season),
        "wape": wape(a, p),
        "pinball": pinball(a, u, q) if q is not None else nan,
        "coverage": coverage(a, u) if q is not None else nan,
        "n": int(ok.sum()),
    }


def _index(series: Series, t: float) -> int | None:
    if not len(series):
        return None
    i = int(round((t - series.t[0]) / series.step))
    return i if 0 <= i < len(series) else None
