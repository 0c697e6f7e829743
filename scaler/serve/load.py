"""The load a trigger scales on, read from Prometheus: its request rate, or with ``tokenQuery`` the binding load
of requests and tokens (``scaler.tokens.binding_load``), for the observed value and for the history alike.

Every query of the load goes through here (the refresher's instant value, the fits' and the tuning's ranges), so
the value decided on and the history forecast are the same quantity.
"""

from __future__ import annotations

import numpy as np

from forecaster.base import Series

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
