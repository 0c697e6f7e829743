"""A trigger's capacity keys: the measured capacity model it reads (``capacityModel``, with the prompt and answer
token rates it needs) and which per-replica capacity the decision divides by (``capacity``: configured | learned).

``CapacityKeys`` is the part of ``ScalerSpec`` they parse to (``scaler.spec.parse_metadata`` calls ``parse``);
``model`` is not metadata: the server fills it with the file's content once read (``scaler.serve.capacityfile``),
so that a new file changes the load's identity and the forecast is refitted on it.
"""

from __future__ import annotations

from dataclasses import dataclass

from .capacity import CapacityModel
from .reader import MetadataError, Reader

CAPACITY_MODES = ("configured", "learned")


@dataclass(frozen=True)
class CapacityKeys:
    model_file: str = ""  # capacityModel: a path under --capacity-dir; "" = none
    input_query: str = ""  # inputTokenQuery: prompt tokens/s
    output_query: str = ""  # outputTokenQuery: generated tokens/s
    served_model: str = ""  # servedModel: the file must be this model's; "" = not checked
    learned: bool = False  # capacity: learned (the figure learned at saturation, bounded, with hysteresis)
    model: CapacityModel | None = None  # the file's model in force (the server's; never metadata)


def _path(v: str) -> str:
    if v and (not v.startswith("/") or len(v) > 1024 or not v.isprintable()):
        raise ValueError(v)
    return v


def _name(v: str) -> str:
    if len(v) > 256 or not v.isprintable():
        raise ValueError(v)
    return v.strip()


def parse(r: Reader, *, token_query: str, loop_queries: tuple[tuple[str, str], ...]) -> CapacityKeys:
    """The capacity keys: ``capacityModel`` with both token queries and instead of ``tokenQuery``;
    ``capacity: learned`` with ``queueQuery`` and ``readyReplicasQuery`` (what saturation is seen by)."""
    model_file = r.get("capacityModel", _path, "an absolute path of a mounted capacity file (forescale loadtest "
                       "--capacity-model), e.g. /etc/forescale/capacity/llama-8b-h100.json")
    queries = {k: r.raw(k) or "" for k in ("inputTokenQuery", "outputTokenQuery")}
    served = r.get("servedModel", _name, "the name of the served model, as the capacity file names it")
    if model_file:
        if token_query:
            raise MetadataError("tokenQuery", token_query, "absent with capacityModel (the file holds the token "
                                "budget; its prompt and answer rates are inputTokenQuery and outputTokenQuery)")
        for key, what in (("inputTokenQuery", "prompt"), ("outputTokenQuery", "generated")):
            if not queries[key]:
                raise MetadataError(key, None, f"a PromQL expression whose single result is the {what} tokens/s "
                                    "(required with capacityModel)")
    else:
        for key in ("inputTokenQuery", "outputTokenQuery", "servedModel"):
            if r.raw(key) is not None:
                raise MetadataError(key, r.raw(key), "absent without capacityModel (the capacity file it goes with)")
    mode = r.get("capacity", _mode, " | ".join(CAPACITY_MODES))
    learned = mode == "learned"
    if learned:
        given = {name for name, _ in loop_queries}
        for key, signal in (("queueQuery", "waiting"), ("readyReplicasQuery", "ready")):
            if signal not in given:
                raise MetadataError(key, None, "a PromQL expression (required with capacity: learned: saturation is "
                                    "a non-empty queue, the capacity per ready replica)")
    return CapacityKeys(model_file, queries["inputTokenQuery"], queries["outputTokenQuery"], served, learned)


def _mode(v: str) -> str:
    if v not in CAPACITY_MODES:
        raise ValueError(v)
    return v


def to_metadata(keys: CapacityKeys) -> dict[str, str]:
    """The keys back as metadata (the model itself is the file's, never written)."""
    return {"capacityModel": keys.model_file, "inputTokenQuery": keys.input_query, "outputTokenQuery": keys.output_query,
            "servedModel": keys.served_model, "capacity": "learned" if keys.learned else "configured"}
