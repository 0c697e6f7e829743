"""Tokens as a load: what a replica spends on an LLM server, next to the requests it answers.

The capacity model is a token budget per replica and second, prefill and decode together::

    tokens(t) = input_weight x input_tokens/s + output_tokens/s        (weighted tokens/s)
    replicas needed for the tokens = tokens(t) / tokens_per_replica

``input_weight`` is what one prompt token costs in output-token units (a prefill token is computed with its
batch in one pass, a decode token needs a pass of its own: on a GPU the weight is well below 1). A long-document
hour (more input) and a verbose hour (more output) need more replicas at the same requests/s, which a fixed
``qpsPerReplica`` cannot see.

The load forecast and acted on is the binding one of the two, in the HPA target's unit (requests/s, so that
``qpsPerReplica`` stays the target KEDA hands over)::

    load(t) = max( requests(t), qps_per_replica x tokens(t) / tokens_per_replica )

so ``load / qps_per_replica`` is the larger of the two replica needs. The server (its observed value and its
history) and the replay (``scaler.replay``) compose it here, and ``scaler.policy.decide`` decides on it.

A measured capacity model (``scaler.capacity``, written by ``forescale loadtest --grid-input ... --grid-output``)
is the same budget with two more facts, and goes through the same function (``TokenCapacity.load``):

* its own request ceiling ``requests_per_replica`` (req/s one replica serves however short the requests): the
  request rate counts ``qps_per_replica / requests_per_replica`` equivalents per request, so that
  ``load / qps_per_replica = max(requests / requests_per_replica, tokens / tokens_per_replica)`` whatever the
  target;
* the weighted tokens per request it was measured on (``lengths``): a mix outside them is clamped to the
  nearest measured length (``clamp``), never extrapolated, and the caller says where it was.

Pure: arrays in, arrays out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MIN_TOKENS_PER_REQUEST = 1.0  # every answered request holds at least one output token: below it the unit is wrong


@dataclass(frozen=True)
class TokenCapacity:
    """What one ready replica sustains: ``tokens_per_replica`` weighted tokens/s (``input_weight`` per prompt token)."""

    tokens_per_replica: float
    input_weight: float = 1.0
    requests_per_replica: float | None = None  # a measured model's request ceiling (req/s); None: qps_per_replica
    lengths: tuple[float, float] | None = None  # weighted tokens per request measured (lo, hi); None: no clamp

    def __post_init__(self) -> None:
        if not (math.isfinite(self.tokens_per_replica) and self.tokens_per_replica > 0):
            raise ValueError(f"tokens per replica {self.tokens_per_replica!r}: accepted is a finite number > 0 "
                             "(weighted tokens/s one ready replica sustains)")
        if not (math.isfinite(self.input_weight) and 0 <= self.input_weight <= 1000):
            raise ValueError(f"input token weight {self.input_weight!r}: accepted is a number in [0, 1000] "
                             "(what a prompt token costs in output tokens)")
        q = self.requests_per_replica
        if q is not None and not (math.isfinite(q) and q > 0):
            raise ValueError(f"requests per replica {q!r}: accepted is a finite number > 0 (the request rate one "
                             "replica serves however short its requests)")
        if self.lengths is not None:
            lo, hi = self.lengths
            if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo <= hi):
                raise ValueError(f"measured lengths {self.lengths!r}: accepted are weighted tokens per request "
                                 "0 < lo <= hi")

    def weighted(self, input_tokens: np.ndarray, output_tokens: np.ndarray) -> np.ndarray:
        """Weighted tokens/s: ``input_weight x input + output`` (NaN where either is NaN)."""
        return self.input_weight * np.asarray(input_tokens, dtype=np.float64) + np.asarray(output_tokens,
                                                                                          dtype=np.float64)

    def clamp(self, requests: np.ndarray, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(tokens, clamped)``: the weighted tokens/s with each interval's tokens per request held within the
        measured ``lengths`` (``requests x lo`` .. ``requests x hi``), and where that changed them. Where the request
        rate is not positive there is no per-request length: the tokens stay as they are."""
        k = np.asarray(tokens, dtype=np.float64)
        if self.lengths is None:
            return k, np.zeros(k.shape, dtype=bool)
        r = np.asarray(requests, dtype=np.float64)
        lo, hi = self.lengths
        ok = np.isfinite(r) & (r > 0) & np.isfinite(k) & (k >= 0)
        rr = np.where(ok, r, 0.0)
        held = np.where(ok, np.clip(k, rr * lo, rr * hi), k)
        return held, ok & (held != k)

    def load(self, requests: np.ndarray, tokens: np.ndarray, qps_per_replica: float) -> tuple[np.ndarray, np.ndarray]:
        """``(load, tokens_bind)`` in the target's unit: ``binding_load`` of the request rate (in equivalents of
        ``requests_per_replica``, when the model has its own) and the weighted tokens clamped to ``lengths``."""
        r = np.asarray(requests, dtype=np.float64)
        if self.requests_per_replica is not None:
            r = r * (qps_per_replica / self.requests_per_replica)
        return binding_load(r, self.clamp(requests, tokens)[0], qps_per_replica, self.tokens_per_replica)


def binding_load(requests: np.ndarray, tokens: np.ndarray, qps_per_replica: float,
                 tokens_per_replica: float) -> tuple[np.ndarray, np.ndarray]:
    """``(load, tokens_bind)``: ``max(requests, qps x tokens / tokens_per_replica)`` and where the tokens bind.

    NaN in one of the two leaves the other (a missing token sample does not zero the load); NaN in both stays
    NaN (a gap). Negative values count as missing.
    """
    r = np.asarray(requests, dtype=np.float64)
    eq = np.asarray(tokens, dtype=np.float64) * (qps_per_replica / tokens_per_replica)
    r = np.where(r >= 0, r, np.nan)  # NaN compares False: stays NaN
    eq = np.where(eq >= 0, eq, np.nan)
    bind = np.isfinite(eq) & ~(eq <= r)  # tokens bind where they are larger, or where the requests are missing
    load = np.where(bind, eq, r)
    return load, bind


def unit_refusal(requests: np.ndarray, tokens: np.ndarray, what: str) -> str:
    """Why ``tokens`` cannot be tokens/s next to ``requests`` (req/s); "" when they can.

    Each answered request carries at least one token, so tokens/s below requests/s on the samples where both are
    positive (their total ratio under ``MIN_TOKENS_PER_REQUEST``) means the token series holds another unit
    (a request rate given where a token rate was expected).
    """
    r = np.asarray(requests, dtype=np.float64)
    k = np.asarray(tokens, dtype=np.float64)
    both = np.isfinite(r) & np.isfinite(k) & (r > 0) & (k > 0)
    if not both.any():
        return ""
    ratio = float(k[both].sum() / r[both].sum())
    if ratio >= MIN_TOKENS_PER_REQUEST:
        return ""
    return (f"{what} is {ratio:.3g} tokens per request on average, below {MIN_TOKENS_PER_REQUEST:g}: it looks "
            f"like requests/s, not tokens/s; accepted: a token rate (vLLM: rate(vllm:generation_tokens_total[2m]) "
            f"+ w x rate(vllm:prompt_tokens_total[2m])) or per-interval token counts")
