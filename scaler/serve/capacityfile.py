"""The trigger's ``capacityModel``: its file read off every caller's thread (``CAPACITY_FILES``: the events files'
reader, ``scaler.events.EventsFiles``, bounded to ``--capacity-dir``), and the model in force put into the
workload's spec (``apply``), where the load (``scaler.serve.load``) and the forecast's identity read it.

A file not read yet, gone, bad, or measured on another model than ``servedModel`` leaves the last good model in
force (none: the request rate alone) and says why (``why``: the status page, ``forescale_capacity_model_ok``).
"""

from __future__ import annotations

import dataclasses
import threading
from typing import cast

from ..capacity import MAX_BYTES, CapacityModel, loads
from ..events import EventsFiles
from ..limits import CAPACITY_DIRS as DEFAULT_DIRS  # noqa: F401 - the server's default, declared once in limits
from ..spec import ScalerSpec


def _parse(text: str, path: str) -> tuple:
    return (loads(text, f"capacity file {path!r}"),)


CAPACITY_FILES = EventsFiles(parse=_parse, what="capacity file", flag="--capacity-dir", max_bytes=MAX_BYTES,
                             form="a readable capacity file (JSON, forescale.capacity/v1: forescale loadtest "
                                  "--capacity-model)")


def reading(spec: ScalerSpec) -> tuple[CapacityModel | None, str | None]:
    """The model the trigger's file holds now (the last good one) and why its content is not in force (None: it
    is), from memory; servedModel checked."""
    r = CAPACITY_FILES.get(spec.capacity.model_file)
    model = cast(CapacityModel, r.events[0]) if r.events else None  # the reader holds (model,) for this parse
    why = r.error if r.error else (None if r.read else f"capacity file {spec.capacity.model_file!r}: not read yet")
    want = spec.capacity.served_model
    if model is not None and want and model.model != want:
        return None, (f"capacity file {spec.capacity.model_file!r}: measured on model {model.model!r} "
                      f"({model.hardware}), not on servedModel {want!r}; accepted: the capacity file of the model "
                      "this workload serves")
    return model, why


def with_model(spec: ScalerSpec, model: CapacityModel | None) -> ScalerSpec:
    return dataclasses.replace(spec, capacity=dataclasses.replace(spec.capacity, model=model))


def read_in(spec: ScalerSpec) -> ScalerSpec:
    """``spec`` with the model its file holds now (memory only; a spec without capacityModel as it is)."""
    return with_model(spec, reading(spec)[0]) if spec.capacity.model_file else spec


def apply(wl, lock: threading.Lock | threading.Condition) -> bool:
    """Put the file's model in force in the workload ``wl``'s declared and running spec (under ``lock``); True when
    it changed (the load's identity moved: its forecast is refitted on the new load)."""
    if not wl.spec.capacity.model_file:
        return False
    model, _ = reading(wl.spec)
    if model is wl.spec.capacity.model or model == wl.spec.capacity.model:
        return False
    with lock:
        assert wl.declared is not None
        wl.declared, wl.spec = with_model(wl.declared, model), with_model(wl.spec, model)
    return True
