"""scaler.events: the server's eventsFile, re-read when it changes, the last good events kept on a bad edit."""

from __future__ import annotations

import os

from scaler.events import EventsFiles

HEADER = "name,start,end,multiplier,floor_qps\n"


def test_reread_on_change_and_last_good_kept(tmp_path):
    p = tmp_path / "events.csv"
    p.write_text(HEADER + "a,2026-12-02T09:00:00Z,2026-12-02T10:00:00Z,,100\n")
    files = EventsFiles()
    r1 = files.get(str(p))
    assert [e.floor_qps for e in r1.events] == [100.0] and r1.error is None
    assert files.get(str(p)) is r1  # unchanged file: not read again
    p.write_text(HEADER + "a,2026-12-02T09:00:00Z,2026-12-02T10:00:00Z,,250\n")
    os.utime(p, ns=(1, 1))  # a new mtime whatever the file system's resolution
    assert [e.floor_qps for e in files.get(str(p)).events] == [250.0]
    p.write_text(HEADER + "a,2026-12-02T10:00:00Z,2026-12-02T09:00:00Z,,250\n")  # end before start
    os.utime(p, ns=(2, 2))
    bad = files.get(str(p))
    assert [e.floor_qps for e in bad.events] == [250.0]  # the last good events stay in force
    assert "line 2: event 'a' ends before" in bad.error
    p.unlink()
    gone = files.get(str(p))
    assert "does not exist" in gone.error and len(gone.events) == 1
    assert files.get("").events == () and files.get(str(tmp_path / "never.csv")).events == ()


def test_workload_event_floor_reaches_status_json(tmp_path):
    """eventsFile in the metadata -> the workload's PolicyParams -> decide -> metrics -> /status.json's event."""
    import json
    import time

    from scaler.policy import Reason, decide
    from scaler.serve.metrics import ScalerMetrics
    from scaler.serve.status import status_json
    from scaler.serve.workload import Workload
    from scaler.spec import parse_metadata

    now = time.time()  # the event is placed around now: any real time works
    start, end = now + 120.0, now + 3600.0
    iso = lambda t: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))  # noqa: E731
    p = tmp_path / "events.csv"
    p.write_text(HEADER + f"launch,{iso(start)},{iso(end)},,400\n")
    spec, _ = parse_metadata({"serverAddress": "http://prom.test:9090", "query": "sum(rate(x[2m]))",
                              "qpsPerReplica": "10", "mode": "reactive", "hpaTolerance": "0",
                              "eventsFile": str(p)}, name="llm", namespace="serving")
    wl = Workload("serving", "llm", spec, client=None, created=now, last_polled=now)  # type: ignore[arg-type]
    params = wl.params()
    assert [e.name for e in params.events] == ["launch"]
    # L = 180 + 105 = 285 s: now >= start - 285 s, so the floor is in force; reactive with observed 30 -> 400
    d = decide(30.0, None, params, now)
    assert d.planned == 400.0 and d.reason == Reason.EVENT and d.event == "launch"
    metrics = ScalerMetrics()
    metrics.export_decision(wl.labels, d, wl.lead(), spec.quantile)
    row = json.loads(status_json(metrics.registry, now))["scaledobjects"][0]
    assert row["reason"] == "event" and row["event"] == "launch"
    later = decide(30.0, None, params, end + 1.0)  # after the end: no event, its series gone
    metrics.export_decision(wl.labels, later, wl.lead(), spec.quantile)
    row = json.loads(status_json(metrics.registry, now))["scaledobjects"][0]
    assert row["reason"] == "mode_reactive" and "event" not in row
