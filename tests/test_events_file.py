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
