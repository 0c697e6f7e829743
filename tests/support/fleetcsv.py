"""A CSV fleet for the fleet's command-line tests: a daily ramp per workload, per minute, and the fast options."""

from __future__ import annotations

import numpy as np
from click.testing import CliRunner

from scaler.cli import main

T0 = 1_700_006_400
FAST = ["--model", "seasonal_naive", "--target-miss", "0.001", "--span", "12h", "--history", "1d", "--refit", "2h", "--qps-per-replica", "10",
        "--jobs", "1", "--no-progress"]


def write_fleet(path, workloads: dict[str, tuple[float, float, float]]):
    """``timestamp,team,service,count``: per workload (days, scale, hour shift) of a daily ramp, per minute."""
    with open(path, "w") as f:
        f.write("timestamp,team,service,count\n")
        for name, (days, scale, shift) in workloads.items():
            t = T0 + 60 * np.arange(int(days * 1440))
            h = ((t % 86400) / 3600 - shift) % 24
            qps = scale * (20 + 173 / (1 + np.exp(-(h - 8) * 6)) - 173 / (1 + np.exp(-(h - 18) * 6)))
            f.writelines(f"{a},ml,{name},{60 * b:.3f}\n" for a, b in zip(t, qps))
    return path


def invoke(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)
