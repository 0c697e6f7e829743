"""The load test's JSON result (schema ``forescale.loadtest/v1``) and reading it back.

    schema                        "forescale.loadtest/v1"
    url, mode                     the endpoint; rates | ramp | concurrency | step
    slo                           {seconds, percentile}: a step meets it when >= percentile % of its requests
                                  finished within seconds (errors and timeouts are misses)
    settings                      {duration_s, margin, stream, timeout_s, seed, max_lag_s, ...}
    workload                      {source, prompts, prompt_chars_min, prompt_chars_max, max_tokens}
    baseline_s                    the fastest of the lone requests sent first (idle latency)
    steps                         [{mode, target_rps, concurrency, duration_s, requests, ok, offered_rps, achieved_rps,
                                    p50_s, p95_s, p99_s, max_s, ttft_p50_s, ttft_p95_s, errors, error_kinds, timeouts,
                                    slo_latency_s, within_slo, meets_slo, send_lag_p99_s, send_lag_max_s,
                                    inflight_max, generator_limited, limit_reason, ...}] in the order run
    knee                          {rate_rps, step (index)} | null: the highest rate meeting the SLO with every lower
                                  trusted rate meeting it too
    capacity_rps                  knee.rate_rps | null
    recommended_qps_per_replica   capacity_rps x (1 - margin) | null
    recommendation_basis          "slo" (a higher rate broke the SLO) | "generator_limit" (the generator could not
                                  offer more: a lower bound) | "untested_above" (no higher rate was tried) | null
    generator_limited             true when any step could not be offered as asked
    timeline                      step test only: [{t_s, arrivals, rate_rps, p95_s, errors, timeouts}] per window
    grid                          a grid only: {points: [{input_tokens_requested, output_tokens_requested,
                                  input_tokens, output_tokens (the means the server counted), capacity_rps (the
                                  point's knee) | null, knee_step, ttft_p95_s, itl_p95_s, ...}], capacity_model
                                  (the fitted model's fit and recommendation, as in its file) | null}; each step
                                  carries its point's input_tokens and output_tokens; capacity_rps and
                                  recommended_qps_per_replica are the model's request ceiling and its
                                  recommendation
"""

from __future__ import annotations

import json
import math
import os

from . import stats

SCHEMA = "forescale.loadtest/v1"


class LoadtestReportError(ValueError):
    """A file that is not a usable load test result; the message names the file and what is accepted."""


def basis(steps: list[dict], knee: dict | None) -> str | None:
    if knee is None:
        return None
    above = [s for s in steps if stats.rate_of(s) > stats.rate_of(knee)]
    if any(not s["meets_slo"] and not s["generator_limited"] for s in above):
        return "slo"
    if any(s["generator_limited"] for s in above):
        return "generator_limit"
    return "untested_above"


def document(outcome, *, url: str, workload: dict, stream: bool, timeout: float, version: str) -> dict:
    s = outcome.settings
    knee = outcome.knee
    rec = outcome.recommended
    doc = {
        "schema": SCHEMA, "forescale_version": version, "url": url, "mode": s.mode,
        "slo": {"seconds": s.slo, "percentile": s.percentile, "ttft_seconds": s.slo_ttft, "itl_seconds": s.slo_itl},
        "settings": {"duration_s": s.duration, "margin": s.margin, "stream": stream, "timeout_s": timeout,
                     "seed": s.seed, "max_lag_s": s.max_lag, "rates": list(s.rates) or None,
                     "start_rate": s.start_rate if s.mode == "ramp" else None,
                     "ramp_factor": s.ramp_factor if s.mode == "ramp" else None,
                     "refine": s.refine if s.mode == "ramp" else None,
                     "concurrency": list(s.concurrency) or None,
                     "step": list(s.step) if s.mode == "step" else None,
                     "capacity_rps": s.capacity if s.mode == "step" else None},
        "workload": workload, "baseline_s": outcome.baseline_s,
        "steps": outcome.steps,
        "knee": None if knee is None else {"rate_rps": stats.rate_of(knee), "step": outcome.steps.index(knee)},
        "capacity_rps": None if knee is None else stats.rate_of(knee),
        "recommended_qps_per_replica": rec,
        "recommendation_basis": basis(outcome.steps, knee),
        "generator_limited": bool(outcome.generator_limited),
    }
    if outcome.timeline is not None:
        doc["timeline"] = outcome.timeline
    if outcome.points is not None:
        doc["mode"] = "grid"
        doc["grid"] = {"points": outcome.points, "capacity_model": None}
    return doc


def with_model(doc: dict, model: dict | None) -> dict:
    """A grid's document with its fitted capacity model (``scaler.capacity.document``): the model's request ceiling
    is the capacity, its recommendation the qpsPerReplica."""
    doc["grid"]["capacity_model"] = model
    if model is not None:
        doc["capacity_rps"] = model["fit"]["requests_per_second"]
        doc["recommended_qps_per_replica"] = model["recommended"]["qps_per_replica"]
        doc["recommendation_basis"] = "capacity_model"
    return doc


def load(path: str | os.PathLike, flag: str) -> dict:
    """A ``forescale.loadtest/v1`` document; LoadtestReportError naming ``flag`` and the file otherwise."""
    shown = f"{flag} {os.fspath(path)}"
    hint = "accepted: the file written by `forescale loadtest URL --json PATH`"
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as exc:
        raise LoadtestReportError(f"{shown}: cannot be read ({exc.strerror or exc}); {hint}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise LoadtestReportError(f"{shown}: not JSON ({getattr(exc, 'msg', 'not UTF-8')}); {hint}") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        found = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise LoadtestReportError(f"{shown}: schema {found!r}, expected {SCHEMA!r}; {hint}")
    return doc


def _positive(doc: dict, key: str, shown: str, why: str) -> float:
    v = doc.get(key)
    if v is None:
        raise LoadtestReportError(f"{shown}: {key} is null ({why})")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise LoadtestReportError(f"{shown}: {key} {v!r} is not a number of req/s > 0")
    return float(v)


def read_qps_per_replica(path: str | os.PathLike, flag: str = "--qps-per-replica-from") -> float:
    """The recommended qpsPerReplica of a load test result (the HPA target)."""
    doc = load(path, flag)
    return _positive(doc, "recommended_qps_per_replica", f"{flag} {os.fspath(path)}",
                     "no tested rate met the SLO, or it was a step test")


def read_capacity(path: str | os.PathLike, flag: str = "--capacity-from") -> float:
    """The measured capacity (req/s at the SLO, before the margin) of a load test result."""
    doc = load(path, flag)
    return _positive(doc, "capacity_rps", f"{flag} {os.fspath(path)}",
                     "no tested rate met the SLO, or it was a step test")
