"""The load a trigger scales on, read from Prometheus: its request rate, or with ``tokenQuery`` the binding load
of requests and tokens (``scaler.tokens.binding_load``), or with ``capacityModel`` the binding load of its measured
model (``scaler.tokens.TokenCapacity.load`` on the prompt and answer token rates), for the observed value and for
the history alike; and
the model server's own state the closed loop reads (``observed_signals``: the queue, the ready replicas, TTFT
and ITL).

Every query of the load goes through here (the refresher's instant value, the fits' and the tuning's ranges), so
the value decided on and the history forecast are the same quantity.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from forecaster.base import Series

from ..feedback import Signals
from ..prom import PromError, PromErrorKind
from ..spec import ScalerSpec
from ..tokens import binding_load, unit_refusal


@dataclass(frozen=True)
class Observed:
    """One observation of the load and its parts (NaN: not queried or unknown)."""

    load: float
    requests: float = math.nan
    input_tokens: float = math.nan  # capacityModel: prompt tokens/s
    output_tokens: float = math.nan  # capacityModel: generated tokens/s
    clamped: bool = False  # capacityModel: the mix is outside the lengths the model was measured on (held to them)


def observe(client, spec: ScalerSpec, at: float | None, ignore_null: bool | None = None) -> Observed:
    """The load now, with its parts: requests/s; with ``tokenQuery`` the binding load; with ``capacityModel`` (its
    model read) the binding load of the model (``TokenCapacity.load``: its request ceiling, its token budget, the
    mix held to its lengths); PromError as the client's. A token query without a usable value leaves the request
    rate (never a zero). ``ignore_null`` (default the trigger's ``ignoreNullValues``): False makes no usable value
    NO_DATA, for a caller that tells missing from zero itself (the refresher)."""
    null = spec.ignore_null_values if ignore_null is None else ignore_null
    r = client.scalar(spec.query, at, ignore_null=null)
    c = spec.capacity
    if c.model_file:
        i, o = (_maybe(client, q, at) for q in (c.input_query, c.output_query))
        if c.model is None:  # not read (yet, or refused): the request rate alone, and the trigger says why
            return Observed(r, r, i, o)
        cap = c.model.token_capacity()
        k = cap.weighted(np.array([i]), np.array([o]))
        load = float(cap.load(np.array([r]), k, spec.qps_per_replica)[0][0])
        return Observed(load, r, i, o, bool(cap.clamp(np.array([r]), k)[1][0]))
    if not spec.token_query:
        return Observed(r, r)
    k = client.scalar(spec.token_query, at, ignore_null=null)
    return Observed(float(binding_load(np.array([r]), np.array([k]), spec.qps_per_replica,
                                       spec.tokens_per_replica)[0][0]), r)


def _maybe(client, query: str, at: float | None) -> float:
    """A token rate, NaN when it has no usable value (the request rate then stands alone: missing, not zero)."""
    try:
        v = client.scalar(query, at, ignore_null=False)
    except PromError as e:
        if e.kind is PromErrorKind.NO_DATA:
            return math.nan
        raise
    return v if v >= 0 else math.nan


def observed_load(client, spec: ScalerSpec, at: float | None, ignore_null: bool | None = None) -> float:
    """The load now (``observe``'s)."""
    return observe(client, spec, at, ignore_null).load


def load_series(client, spec: ScalerSpec, start: float, end: float, step: float):
    """The load's history at ``step``: ``(Series, HygieneReport)`` of the request query, with ``tokenQuery`` the
    binding load on the request series' grid (a token sample missing leaves the requests; the report is the
    requests'). ValueError when the token query's values are not tokens/s (``scaler.tokens.unit_refusal``)."""
    series, report = client.range_series(spec.query, start, end, step)
    c = spec.capacity
    if c.model_file and c.model is not None:
        i, o = (_on_grid(client, q, series, start, end, step) for q in (c.input_query, c.output_query))
        cap = c.model.token_capacity()
        k = cap.weighted(i, o)
        if why := unit_refusal(series.y, k, "inputTokenQuery and outputTokenQuery"):
            raise ValueError(why)
        return Series(series.t, cap.load(series.y, k, spec.qps_per_replica)[0], series.step), report
    if not spec.token_query:
        return series, report
    k = _on_grid(client, spec.token_query, series, start, end, step)
    if why := unit_refusal(series.y, k, "tokenQuery"):
        raise ValueError(why)
    load = binding_load(series.y, k, spec.qps_per_replica, spec.tokens_per_replica)[0]
    return Series(series.t, load, series.step), report


def _on_grid(client, query: str, series: Series, start: float, end: float, step: float) -> np.ndarray:
    """``query``'s range on the request series' grid (NaN where it has no sample)."""
    toks, _ = client.range_series(query, start, end, step)
    k = np.full(len(series), np.nan)
    i = np.searchsorted(toks.t, series.t)
    hit = (i < len(toks.t)) & (toks.t[np.minimum(i, len(toks.t) - 1)] == series.t)
    k[hit] = toks.y[i[hit]]
    return k


def observed_signals(client, spec: ScalerSpec, at: float | None) -> tuple[Signals, dict[str, str]]:
    """The closed loop's signals now (``spec.loop``'s queries: ``queueQuery``, ``readyReplicasQuery``,
    ``ttftQuery``, ``itlQuery``) and, per signal that is unknown, why. Never raises and never reads a zero into
    what is unknown: no series, NaN (``histogram_quantile`` over a histogram without buckets), an infinity, a
    negative value or a failed query each leave that signal NaN, with its reason."""
    values: dict[str, float] = {}
    why: dict[str, str] = {}
    for name, query in spec.loop.queries():
        try:
            v = client.scalar(query, at, ignore_null=False)
        except PromError as e:
            values[name] = math.nan
            why[name] = ("no usable value (no series, or NaN: a histogram without buckets gives NaN)"
                         if e.kind is PromErrorKind.NO_DATA else f"{e.kind.value}: {e}")
            continue
        except Exception as e:  # noqa: BLE001 - a broken signal must not take the rate's refresh with it
            values[name], why[name] = math.nan, f"query failed: {type(e).__name__}"
            continue
        if not math.isfinite(v):
            values[name], why[name] = math.nan, f"{v}: not a usable value"
            continue
        if v < 0:
            values[name], why[name] = math.nan, f"a negative value {v:g}: not a count or a time"
            continue
        values[name] = v
    return Signals(**values), why
