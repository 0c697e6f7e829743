"""The load a trigger scales on, read from Prometheus: its request rate, or with ``tokenQuery`` the binding load
of requests and tokens (``scaler.tokens.binding_load``), for the observed value and for the history alike; and
the model server's own state the closed loop reads (``observed_signals``: the queue, the ready replicas, TTFT
and ITL).

Every query of the load goes through here (the refresher's instant value, the fits' and the tuning's ranges), so
the value decided on and the history forecast are the same quantity.
"""

from __future__ import annotations

import math

import numpy as np

from forecaster.base import Series

from ..feedback import Signals
from ..prom import PromError, PromErrorKind
from ..spec import ScalerSpec
from ..tokens import binding_load, unit_refusal


def observed_load(client, spec: ScalerSpec, at: float | None, ignore_null: bool | None = None) -> float:
    """The load now (requests/s, or the binding load in requests/s with ``tokenQuery``); PromError as the client's.
    ``ignore_null`` (default the trigger's ``ignoreNullValues``): False makes no usable value NO_DATA, for a caller
    that tells missing from zero itself (the refresher)."""
    null = spec.ignore_null_values if ignore_null is None else ignore_null
    r = client.scalar(spec.query, at, ignore_null=null)
    if not spec.token_query:
        return r
    k = client.scalar(spec.token_query, at, ignore_null=null)
    return float(binding_load(np.array([r]), np.array([k]), spec.qps_per_replica, spec.tokens_per_replica)[0][0])


def load_series(client, spec: ScalerSpec, start: float, end: float, step: float):
    """The load's history at ``step``: ``(Series, HygieneReport)`` of the request query, with ``tokenQuery`` the
    binding load on the request series' grid (a token sample missing leaves the requests; the report is the
    requests'). ValueError when the token query's values are not tokens/s (``scaler.tokens.unit_refusal``)."""
    series, report = client.range_series(spec.query, start, end, step)
    if not spec.token_query:
        return series, report
    toks, _ = client.range_series(spec.token_query, start, end, step)
    k = np.full(len(series), np.nan)
    i = np.searchsorted(toks.t, series.t)
    hit = (i < len(toks.t)) & (toks.t[np.minimum(i, len(toks.t) - 1)] == series.t)
    k[hit] = toks.y[i[hit]]
    if why := unit_refusal(series.y, k, "tokenQuery"):
        raise ValueError(why)
    load = binding_load(series.y, k, spec.qps_per_replica, spec.tokens_per_replica)[0]
    return Series(series.t, load, series.step), report


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
        if v < 0:
            values[name], why[name] = math.nan, f"a negative value {v:g}: not a count or a time"
            continue
        values[name] = v
    return Signals(**values), why
