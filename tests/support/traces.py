"""Synthetic trace files for the CLI tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np

T0 = 1_700_006_400  # a Wednesday 00:00 UTC


def write_daily(path: Path, days: float, step: int = 60, t0: int = T0) -> Path:
    """``timestamp,qps``: a daily ramp from 20 req/s up to 193 req/s between 08:00 and 18:00, every ``step`` s."""
    t = t0 + step * np.arange(int(days * 86400 / step))
    hour = (t % 86400) / 3600
    y = 20 + 173 / (1 + np.exp(-(hour - 8) * 6)) - 173 / (1 + np.exp(-(hour - 18) * 6))
    with open(path, "w") as f:
        f.write("timestamp,qps\n")
        f.writelines(f"{a},{b:.4f}\n" for a, b in zip(t, y))
    return path
