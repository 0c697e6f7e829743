"""scaler.events: the server's eventsFile, read off the caller's thread, re-read when it changes, the last good
events kept on a bad edit; FIFOs, devices, files outside the allowed directories refused (issue 40, item 2)."""

from __future__ import annotations

import os
import threading
import time

from scaler.events import CHECK_SECONDS, EventsFiles
from support.clock import FakeClock
from support.fakes import wait_for

HEADER = "name,start,end,multiplier,floor_qps\n"


def read(files: EventsFiles, clock: FakeClock, path: str):
    """The reading after the next check (the clock moved past CHECK_SECONDS, the check waited for)."""
    clock.advance(CHECK_SECONDS)
    return files.wait(path, 5.0)


def test_reread_on_change_and_last_good_kept(tmp_path):
    p = tmp_path / "events.csv"
    p.write_text(HEADER + "a,2026-12-02T09:00:00Z,2026-12-02T10:00:00Z,,100\n")
    clock = FakeClock(0.0)
    files = EventsFiles(clock=clock)
    try:
        assert files.get(str(p)).read is False  # never read on the caller's thread: the first check is pending
        r1 = files.wait(str(p), 5.0)
        assert [e.floor_qps for e in r1.events] == [100.0] and r1.error is None and r1.read
        assert files.get(str(p)) is r1 and read(files, clock, str(p)) is r1  # unchanged file: the same reading
        p.write_text(HEADER + "a,2026-12-02T09:00:00Z,2026-12-02T10:00:00Z,,250\n")
        os.utime(p, ns=(1, 1))  # a new mtime whatever the file system's resolution
        assert files.get(str(p)) is r1  # not before the next check (CHECK_SECONDS)
        assert [e.floor_qps for e in read(files, clock, str(p)).events] == [250.0]
        p.write_text(HEADER + "a,2026-12-02T10:00:00Z,2026-12-02T09:00:00Z,,250\n")  # end before start
        os.utime(p, ns=(2, 2))
        bad = read(files, clock, str(p))
        assert [e.floor_qps for e in bad.events] == [250.0]  # the last good events stay in force
        assert "line 2: event 'a' ends before" in bad.error
        p.unlink()
        gone = read(files, clock, str(p))
        assert "does not exist" in gone.error and len(gone.events) == 1
        never = files.wait(str(tmp_path / "never.csv"), 5.0)
        assert files.get("").events == () and never.events == () and "does not exist" in never.error
    finally:
        files.stop()


def test_a_fifo_a_pipe_and_a_link_outside_are_refused_without_blocking(tmp_path):
    """A FIFO nobody writes, /dev/stdout (a pipe here) and a symlink out of the allowed directory: each refused at
    once with why; a valid file next to them is read; no caller ever waits on any of them."""
    allowed = tmp_path / "etc"
    allowed.mkdir()
    good = allowed / "events.csv"
    good.write_text(HEADER + "a,2026-12-02T09:00:00Z,2026-12-02T10:00:00Z,,100\n")
    fifo = allowed / "fifo.csv"
    os.mkfifo(fifo)
    outside = tmp_path / "secret.csv"
    outside.write_text(HEADER + "b,2026-12-02T09:00:00Z,2026-12-02T10:00:00Z,,100\n")
    link = allowed / "link.csv"
    link.symlink_to(outside)
    r, w = os.pipe()
    pipe = f"/proc/self/fd/{w}"
    files = EventsFiles(allowed=(str(allowed), "/proc/self/fd"))
    try:
        t0 = time.monotonic()
        for path in (fifo, pipe, link, good):
            files.get(str(path))  # memory only: returns at once, whatever the file is
        assert time.monotonic() - t0 < 1.0
        for path in (fifo, pipe):
            got = files.wait(str(path), 5.0)
            assert got.events == () and "not a regular file" in got.error, got
        assert "outside the directories" in files.wait(str(link), 5.0).error
        assert "outside the directories" in files.wait("/dev/stdout", 5.0).error
        ok = files.wait(str(good), 5.0)
        assert ok.error is None and [e.name for e in ok.events] == ["a"]
    finally:
        os.close(r)
        os.close(w)
        files.stop()


def test_a_check_that_hangs_is_reported_and_holds_no_caller(tmp_path, monkeypatch):
    """A file system that never answers (the stat hangs): callers get the last reading at once, with why."""
    clock = FakeClock(0.0)
    files = EventsFiles(clock=clock)
    release = threading.Event()
    real_stat = os.stat

    def hung_stat(path, *a, **kw):
        if str(path).endswith("hung.csv"):
            release.wait(10)
        return real_stat(path, *a, **kw)

    monkeypatch.setattr(os, "stat", hung_stat)
    path = str(tmp_path / "hung.csv")
    try:
        assert files.get(path).error is None  # the check starts in the background
        clock.advance(3.0)  # past READ_SECONDS
        t0 = time.monotonic()
        got = files.get(path)
        assert time.monotonic() - t0 < 0.5 and "has not finished after 3s" in got.error
    finally:
        release.set()
        wait_for(lambda: files.get(path).read)
        files.stop()


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
    from scaler.events import FILES

    FILES.wait(str(p), 5.0)  # read off the caller's thread: the first check, waited for
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
