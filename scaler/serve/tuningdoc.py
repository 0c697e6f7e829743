"""A ``tuning: auto`` choice as the state store keeps it (``<state-dir>/tuning/``): its key, its document, read back.

A stored choice serves after a restart only while its key matches: a one-way digest (headers may hold secrets:
never stored in clear) of the declared inputs the choice depends on: what the load is (``forecastdoc``'s load
material), the replica's capacity, the lead, the model and its history, the step, the activation threshold, the
HPA tolerance emulated (``cluster_tolerance``), targetMiss and maxCostRatio. An edit of any of them drops it.
"""

from __future__ import annotations

from ..deadband import KUBERNETES_TOLERANCE
from ..spec import ScalerSpec
from .forecastdoc import load_material
from .state import digest
from .workload import TUNABLE, Tuned

STATE_VERSION = 1


def cluster_tolerance(spec: ScalerSpec) -> float:
    """The HPA tolerance to emulate: the declared one, or Kubernetes' default when compensation is declared off."""
    return spec.hpa_tolerance if spec.hpa_tolerance > 0 else KUBERNETES_TOLERANCE.up


def tuning_key(spec: ScalerSpec) -> str:
    """A one-way digest of the declared inputs a choice depends on (headers may hold secrets)."""
    return digest((*load_material(spec), spec.qps_per_replica, spec.lead, spec.cold_start_query,
                   spec.cold_start_cluster, spec.model, spec.history_seconds, spec.step_seconds,
                   spec.activation_threshold, cluster_tolerance(spec), spec.target_miss, spec.max_cost_ratio))


def tuning_document(tuned: Tuned, figures: dict) -> dict:
    """What ``TuningService`` stores for one choice (the store adds version, trigger and key)."""
    return {"chosen_at": tuned.chosen_at, "label": tuned.label, "policy": tuned.policy,
            "settings": dict(tuned.settings), "met": tuned.met, "miss": tuned.miss, "cost_ratio": tuned.cost_ratio,
            "figures": figures}


def tuned_from_document(doc: dict) -> tuple[Tuned, dict]:
    """``tuning_document`` read back (KeyError/TypeError/ValueError/AttributeError when malformed)."""
    settings = tuple((k, v) for k, v in doc["settings"].items() if k in TUNABLE)
    tuned = Tuned(key=doc["key"], settings=settings, label=str(doc["label"]), policy=str(doc["policy"]),
                  chosen_at=float(doc["chosen_at"]), met=bool(doc["met"]), miss=float(doc["miss"]),
                  cost_ratio=None if doc.get("cost_ratio") is None else float(doc["cost_ratio"]))
    return tuned, dict(doc.get("figures") or {})
