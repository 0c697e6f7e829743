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
