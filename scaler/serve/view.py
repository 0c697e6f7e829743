"""What the HTTP port shows beyond the metrics: per-trigger detail for ``/status.json`` and the decision log.

``StatusView`` reads the registry (workloads, their last error, their forecast curve) and the ``Watch`` (live
scores, drift, the decision log). Everything it returns is bounded: curves are cut to the horizon shown
(``CURVE_POINTS``), messages to ``watch.MAX_TEXT`` characters without control characters.
"""

from __future__ import annotations

import functools
import math
from typing import Any
from urllib.parse import unquote

import numpy as np

from forecaster.calendar import DAY, CalendarError, holiday_periods

from ..events import FILES
from ..prom import short
from . import llmstate
from .capacityfile import reading as capacity_reading
from .answer import missing_why
from .registry import Registry
from .watch import Watch, clean
from .workload import Workload

CURVE_POINTS = 180  # forecast points shown forward from now (3 h at a 1-minute step)


def last_error(wl: Workload) -> str | None:
    """The newest problem of a trigger, as a sanitised, truncated message (None: none)."""
    err = wl.error
    if err is not None and (wl.observed_at is None or (wl.error_at or 0) >= wl.observed_at):
        return clean(f"Prometheus: {err}")
    if wl.missing_since is not None and wl.missing_at is not None:
        return clean(f"Prometheus: {missing_why(wl.missing_at - wl.missing_since)}")
    if wl.cold_start_error is not None:
        return clean(f"coldStartQuery: {wl.cold_start_error}")
    if wl.spec.events_file:
        reading = FILES.get(wl.spec.events_file)
        if reading.error:
            return clean(f"eventsFile: {reading.error}")
    if wl.spec.capacity.model_file:
        why = capacity_reading(wl.spec)[1]
        if why:
            return clean(f"capacityModel: {why}")
    fs = wl.forecast
    if fs.unusable is not None and fs.detail:
        return clean(f"forecast ({fs.unusable.value}): {fs.detail}")
    if fs.detail.startswith("refit failed"):
        return clean(fs.detail)
    return None


@functools.lru_cache(maxsize=256)
def _holidays(spec: str, d0: int, d1: int, window: int, tz: str) -> tuple[tuple[float, float, str], ...]:
    """(start, end, name) of the holidays of ``spec`` (days of ``tz``) touching UTC days ``[d0, d1]`` (cached: the
    page asks every 5 s per trigger)."""
    try:
        return tuple(holiday_periods(spec, d0 * DAY, d1 * DAY + DAY - 1.0, window, tz))
    except CalendarError:  # the spec was validated when parsed; a package without the country shows nothing
        return ()


def calendar(wl: Workload, now: float, t_from: float, t_to: float) -> dict | None:
    """The holidays (``holidays``) and events (``eventsFile``) of a trigger for the status page (None: neither set):
    ``periods`` overlapping ``[t_from, t_to]`` (kind, name, start, end), ``active`` (the names in force now: a
    holiday's day, an event from ``start`` to ``end``) and ``coming`` (the first one starting within the lead,
    with ``in_seconds``; capacity for an event is already planned from ``start - lead``)."""
    spec = wl.spec
    events = FILES.get(spec.events_file).events if spec.events_file else ()
    if not spec.holidays and not events:
        return None
    lead = wl.lead().seconds
    lo, hi = min(t_from, now), max(t_to, now + lead)
    periods: list[dict[str, Any]] = []
    if spec.holidays:
        days = _holidays(spec.holidays, int(lo // DAY), int(hi // DAY), spec.holiday_window, spec.timezone)
        periods += [{"kind": "holiday", "name": clean(name), "start": a, "end": b} for a, b, name in days]
    periods += [{"kind": "event", "name": e.name, "start": e.start, "end": e.end}
                for e in events if e.end >= lo and e.start <= hi]
    periods.sort(key=lambda p: (p["start"], p["kind"]))
    active = [p["name"] for p in periods if p["start"] <= now < p["end"]]
    coming = next(({"name": p["name"], "kind": p["kind"], "in_seconds": p["start"] - now} for p in periods
                   if now < p["start"] <= now + lead), None)
    shown = [p for p in periods if p["end"] >= t_from and p["start"] <= t_to][:50]
    return {"periods": shown, "active": active, "coming": coming}


def events_file(wl: Workload) -> dict | None:
    """The trigger's eventsFile for the status page: its path, the events in force and why its content is not."""
    if not wl.spec.events_file:
        return None
    r = FILES.get(wl.spec.events_file)
    return {"path": clean(wl.spec.events_file), "events": len(r.events), "read": r.read,
            "error": clean(r.error) if r.error else None}


def loop_view(wl: Workload) -> dict | None:
    """The closed loop for the status page (None without its keys): the model server's signals (None: unknown, with
    why), the targets, the factor and what the loop last did (``scaler.feedback``)."""
    lp = wl.spec.loop
    if not lp.queries():
        return None
    sig = wl.signals
    values = {k: None if sig is None or getattr(sig, k) != getattr(sig, k) else getattr(sig, k)
              for k, _ in lp.queries()}
    return {"signals": values, "unknown": {k: clean(v, 200) for k, v in wl.signals_why.items()},
            "targets": {"queue": lp.queue_target, "ttft": lp.ttft_target, "itl": lp.itl_target},
            "factor": wl.loop.factor, "why": clean(wl.loop.why, 200)}


def _floats(a) -> list:
    return [None if not math.isfinite(x) else round(float(x), 4) for x in a]


HIDDEN = "<query hidden>"


def scrub(wl: Workload, value):
    """``value`` (a message, or a log entry's strings) without the trigger's PromQL (``--http-hide-queries``)."""
    if isinstance(value, dict):
        return {k: scrub(wl, v) for k, v in value.items()}
    if not isinstance(value, str):
        return value
    for q in (wl.spec.query, wl.spec.cold_start_query, *(q for _, q in wl.spec.loop.queries())):
        if q:
            value = value.replace(clean(short(q)), HIDDEN).replace(short(q), HIDDEN).replace(q, HIDDEN)
    return value


class StatusView:
    def __init__(self, registry: Registry, watch: Watch | None, hide_queries: bool = False):
        """``hide_queries``: the triggers' PromQL is left out of every message and log entry shown."""
        self.registry, self.watch, self.hide_queries = registry, watch, hide_queries

    def _shown(self, wl: Workload, value):
        return scrub(wl, value) if self.hide_queries else value

    def details(self, now: float) -> dict[tuple[str, str, str], dict]:
        """Per trigger (namespace, name, trigger): last error, tuned choice, scores, drift, the forecast band."""
        out = {}
        for wl in self.registry.workloads():
            d = {"last_error": self._shown(wl, last_error(wl)), "mode": wl.spec.mode, "quantile": wl.spec.quantile,
                 "fitted_at": wl.forecast.fitted_at,  # the fit's data cutoff (the same in every replica)
                 "tuned": None if wl.tuned is None else {
                     "chosen": wl.tuned.label, "at": wl.tuned.chosen_at, "target_met": wl.tuned.met,
                     "expected_miss": wl.tuned.miss, "expected_cost_ratio": wl.tuned.cost_ratio},
                 "band": self._band(wl, now), "events_file": events_file(wl)}
            d["loop"] = self._shown(wl, loop_view(wl))
            if llmstate.applies(wl.spec):  # the token mix, capacity used, queue, TTFT/ITL, learned capacity
                d["llm"] = self._shown(wl, llmstate.view(wl.llm, wl.spec))
            if self.watch is not None:
                d.update(self.watch.summary(wl, now))
                d["forecast_error"] = self.watch.forecast_error(wl, now)
                d["recent"] = [[x["time"], x["observed"], x["planned"]] for x in self.watch.log(wl)["decisions"]]
            band_t = d["band"]["t"] if d["band"] else []
            t_from = min([r[0] for r in d.get("recent", []) if r[0] is not None] or [now])
            d["calendar"] = calendar(wl, now, t_from, band_t[-1] if band_t and band_t[-1] is not None else now)
            out[wl.labels] = d
        return out

    @staticmethod
    def _band(wl: Workload, now: float) -> dict | None:
        """The forecast forward from now: times, q0.1, q0.5 (or the mean), the provisioned quantile."""
        fs = wl.forecast
        if wl.spec.mode == "reactive" or fs.forecast is None or fs.unusable is not None:
            return None
        fc = fs.forecast
        i = int(np.searchsorted(fc.t, now))
        sl = slice(i, i + CURVE_POINTS)
        if i >= len(fc.t):
            return None
        qs = fc.quantiles

        def curve(level: float):
            k = min(qs, key=lambda x: abs(x - level)) if qs else None
            return _floats(qs[k][sl]) if k is not None and abs(k - level) < 1e-6 else None

        return {"t": _floats(fc.t[sl]), "low": curve(0.1), "mid": curve(0.5) or _floats(fc.mean[sl]),
                "provisioned": curve(wl.spec.quantile), "lead_seconds": wl.lead().seconds}

    def decisions(self, path: str, query: str = "") -> dict | None:
        """``/api/scaledobjects/{namespace}/{name}/decisions``: None for another path or an unknown ScaledObject.
        Each trigger's ``history`` is the durable log (``--state-dir``; ``?since=UNIX`` from then on): after a
        restart, before KEDA polls a trigger again, its history alone is served."""
        parts = path.split("/")
        if len(parts) != 6 or parts[:3] != ["", "api", "scaledobjects"] or parts[5] != "decisions":
            return None
        namespace, name = unquote(parts[3]), unquote(parts[4])
        since = _since(query)
        wls = self.registry.workloads(namespace, name)
        journal = self.watch.journal if self.watch is not None else None
        triggers = []
        for wl in sorted(wls, key=lambda w: w.trigger):
            logged = self.watch.log(wl) if self.watch is not None else {"decisions": [], "fits": [], "tuning": [],
                                                                         "events_file": []}
            history = self.watch.history(wl.key, since) if self.watch is not None else []
            logged = {k: [self._shown(wl, e) for e in v] for k, v in logged.items()}
            triggers.append({"trigger": wl.trigger, "metric": wl.spec.metric_name, "mode": wl.spec.mode,
                             "last_error": self._shown(wl, last_error(wl)), **logged,
                             "history": [self._shown(wl, e) for e in history]})
        if journal is not None:
            assert self.watch is not None  # the journal is the watch's
            tracked = {w.key for w in wls}
            for key3 in journal.triggers(namespace, name):
                if key3 not in tracked:  # not polled since a restart (or forgotten, files not yet swept)
                    digest = key3[2].rsplit(".", 1)[-1]
                    history = self.watch.history(key3, since)  # no spec here: the messages' PromQL, if hidden, goes
                    if self.hide_queries:
                        history = [{k: v for k, v in e.items() if k not in ("detail", "why", "error")} for e in history]
                    triggers.append({"trigger": digest[:8], "metric": key3[2].rsplit(".", 1)[0], "tracked": False,
                                     "history": history})
        if not triggers:
            return None
        return {"namespace": namespace, "name": name, "triggers": triggers}


def _since(query: str) -> float | None:
    for part in query.split("&"):
        k, _, v = part.partition("=")
        if k == "since":
            try:
                x = float(v)
            except ValueError:
                return None
            return x if math.isfinite(x) else None
    return None
