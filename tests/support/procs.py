"""Stopping the processes a test started: SIGTERM, then SIGKILL if it is still there after ``timeout``."""

from __future__ import annotations

import signal
import subprocess


def stop(proc: subprocess.Popen, timeout: float = 30.0) -> int:
    """SIGTERM ``proc`` and wait; past ``timeout`` kill it. Returns its exit status (negative: the signal)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def announced_url(proc: subprocess.Popen, timeout: float = 60.0) -> tuple[str | None, list[str]]:
    """Read ``proc``'s stderr in a thread until it prints ``serving http://...``: (that URL or None, the lines
    so far). The thread keeps draining stderr into the returned list, so the process never blocks on it."""
    import threading

    lines: list[str] = []
    found = threading.Event()

    def pump() -> None:
        for line in proc.stderr:
            lines.append(line)
            if "serving http://" in line:
                found.set()

    threading.Thread(target=pump, daemon=True).start()
    if not found.wait(timeout):
        return None, lines
    return next(ln for ln in lines if "serving http://" in ln).split("serving ")[1].split()[0], lines
