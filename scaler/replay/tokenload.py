"""A trace with shape on the replay's grid: the binding load of requests and tokens (``scaler.tokens``).

With a token capacity (``Settings.tokens``) and a trace carrying ``input_tokens`` and ``output_tokens``:

* what is judged (``Scenario.demand``) is the true need in the target's unit, ``max(requests, qps x tokens /
  tokens_per_replica)`` per trace interval (``TokenCapacity.load``: with a measured capacity model, its own
  request ceiling and the lengths it was measured on): a replica serves neither more requests nor more tokens
  than it can;
* what the scaler sees (``Scenario.observed``, the history it forecasts from) is, token-aware
  (``Settings.token_aware``), the same max of the two ``rate()`` views, as the server composes its two queries;
  req/s only, the request view alone (the baseline the tokens are measured against).

Pure: arrays in, arrays out.
"""

from __future__ import annotations

import numpy as np

from forecaster.base import Series

from ..tokens import TokenCapacity
from .scenario import Scenario, rate_view, scenario


def equivalent(requests: np.ndarray, tokens_per_s: np.ndarray, qps: float, cap: TokenCapacity) -> np.ndarray:
    """Weighted tokens/s in the target's unit: ``qps x tokens / tokens_per_replica`` (clamped to the lengths a
    measured model holds, per request of ``requests``)."""
    return cap.clamp(requests, tokens_per_s)[0] * (qps / cap.tokens_per_replica)


def weighted(trace, cap: TokenCapacity) -> np.ndarray:
    """The trace's weighted tokens/s on its grid (``TokenCapacity.weighted``)."""
    return cap.weighted(trace.input_tokens, trace.output_tokens)


def judged(series: Series, tokens: np.ndarray, qps: float, cap: TokenCapacity) -> np.ndarray:
    """The true need per interval in the target's unit: the binding load of the raw trace."""
    return cap.load(series.y, tokens, qps)[0]


def seen(series: Series, tokens: np.ndarray, qps: float, cap: TokenCapacity, *, counts: bool) -> Series:
    """The history a token-aware scaler forecasts from: the max of the two ``rate()`` views (of a CSV's counts;
    a Prometheus trace is its queries' view already)."""
    r, k = series.y, tokens
    if counts:
        r, k = rate_view(series.t, r, series.step), rate_view(series.t, k, series.step)
    return Series(series.t, cap.load(r, k, qps)[0], series.step)


def with_need(requests: Scenario, tokens: Scenario, need: Scenario, *, token_aware: bool,
              cap: TokenCapacity | None = None) -> Scenario:
    """The scenario judged on ``need``'s demand; observed: the max of the requests' and the tokens' views
    (token-aware: the server's two queries) or the requests' alone."""
    obs = requests.observed
    if token_aware:  # requests in the target's unit (a measured model's own ceiling), next to the tokens
        q = need.qps_per_replica
        f = 1.0 if cap is None or cap.requests_per_replica is None else q / cap.requests_per_replica
        obs = np.maximum(obs * f, tokens.observed)
    return Scenario(requests.t0, need.demand, obs, requests.cold_start_seconds, requests.qps_per_replica,
                    requests.tick)


def token_share(series: Series, tokens: np.ndarray, qps: float, cap: TokenCapacity, start: float,
                end: float) -> float:
    """The share of the trace's intervals in ``[start, end)`` where the tokens bind (0 .. 1)."""
    sel = (series.t >= start) & (series.t < end)
    bind = cap.load(series.y[sel], tokens[sel], qps)[1]
    return float(bind.mean()) if bind.size else 0.0


def clamped_share(series: Series, tokens: np.ndarray, cap: TokenCapacity, start: float, end: float) -> float:
    """The share of the trace's intervals in ``[start, end)`` whose mix a measured model holds to its lengths."""
    sel = (series.t >= start) & (series.t < end)
    held = cap.clamp(series.y[sel], tokens[sel])[1]
    return float(held.mean()) if held.size else 0.0


def prompt_per_request(requests: Scenario, series: Series, input_tokens: np.ndarray, start: float,
                       end: float) -> np.ndarray:
    """Prompt tokens per request in each tick of ``requests``' grid (0 where no request arrives)."""
    toks = scenario(series.t, np.asarray(input_tokens, dtype=np.float64), series.step, start, end,
                    cold_start_seconds=requests.cold_start_seconds, qps_per_replica=requests.qps_per_replica,
                    tick=requests.tick)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(requests.demand > 0, toks.demand / np.where(requests.demand > 0, requests.demand, 1.0), 0.0)
