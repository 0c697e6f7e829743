"""A forecast as the state store keeps it (``--state-dir``): its key, its document, and the document read back.

``FitService`` (``fitting``) stores every adopted fit and restores it when a trigger is first seen after a
restart. What a stored forecast may be used for is its key: a one-way digest (headers may hold secrets: never
stored in clear) of what the load is (``load_material``: the Prometheus target, its headers and credentials'
name, the load's identity) and of the fit's inputs (model, history, step, levelCorrection); ``keeper`` starts
its own keys with the same load material. A document that does not read back as a curve the policy can use
(lengths, times, quantile levels, non-finite figures) is refused with a ValueError: the file is ignored and the
forecast refitted.
"""

from __future__ import annotations

import math

import numpy as np

from forecaster.base import Forecast

from ..spec import ScalerSpec
from .state import digest, finite_or_none, float_array, json_floats
from .workload import ForecastState

STATE_VERSION = 1
MAX_CURVE_POINTS = 60_000  # a stored curve longer than this is refused (spec.MAX_HORIZON_STEPS plus slack)


def load_material(spec: ScalerSpec) -> tuple:
    """What the observed load is: the Prometheus it comes from (its headers and credentials' name too) and the
    load's identity (``ScalerSpec.load_identity``). The start of every state document's key."""
    p = spec.prometheus
    return (p.server_address, p.query_parameters, p.custom_headers, p.credentials, spec.load_identity())


def forecast_key_hash(spec: ScalerSpec) -> str:
    """A one-way digest of what a forecast depends on (headers may hold secrets: never stored in clear)."""
    return digest((*load_material(spec), spec.model, spec.history_seconds, spec.step_seconds,
                   spec.level_correction_seconds))


def forecast_document(fs: ForecastState, model_state: dict | None) -> dict:
    """What ``FitService`` stores for one forecast (the store adds version, trigger and key)."""
    fc = fs.forecast
    assert fc is not None  # only a fit's curve is stored
    return {
        "fitted_at": fs.fitted_at, "completed_at": finite_or_none(fs.completed_at), "model": fs.model,
        "history_max": finite_or_none(fs.history_max), "fit_seconds": finite_or_none(fs.fit_seconds),
        "forecast": {"t": json_floats(fc.t), "mean": json_floats(fc.mean),
                     "quantiles": {f"{q:g}": json_floats(v) for q, v in fc.quantiles.items()}},
        "model_state": model_state,
    }


def forecast_from_document(doc: dict, key: tuple) -> tuple[ForecastState, dict | None]:
    """``forecast_document`` read back (KeyError/TypeError/ValueError when malformed)."""
    f = doc["forecast"]
    t, mean = float_array(f["t"]), float_array(f["mean"])
    quantiles = {float(q): float_array(v) for q, v in f["quantiles"].items()}
    # shape: a curve the policy can read, or a ValueError (the file is ignored and the forecast refitted)
    if not 0 < len(t) <= MAX_CURVE_POINTS or len(mean) != len(t) or any(len(v) != len(t) for v in quantiles.values()):
        raise ValueError(f"curve lengths disagree or exceed {MAX_CURVE_POINTS} (t {len(t)}, mean {len(mean)})")
    if not np.isfinite(t).all() or (len(t) > 1 and not (np.diff(t) > 0).all()):
        raise ValueError("curve times are not finite and increasing")
    if not quantiles or not all(0 < q < 1 for q in quantiles):
        raise ValueError("quantile levels must be in (0, 1)")
    fitted_at, history_max, fit_seconds = doc["fitted_at"], doc.get("history_max"), doc.get("fit_seconds")
    completed_at = doc.get("completed_at")
    for name, v in (("fitted_at", fitted_at), ("history_max", history_max), ("fit_seconds", fit_seconds),
                    ("completed_at", completed_at)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)):
            raise ValueError(f"{name} is not a finite number")
    model_state = doc.get("model_state")
    if model_state is not None and not isinstance(model_state, dict):
        raise ValueError("model_state is not an object")
    fc = Forecast(t, mean, quantiles, str(doc.get("model", "")))
    fs = ForecastState(forecast=fc, fitted_at=float(fitted_at), completed_at=completed_at, history_max=history_max,
                       model=str(doc.get("model", "")), fit_seconds=fit_seconds, key=key)
    return fs, doc.get("model_state")
