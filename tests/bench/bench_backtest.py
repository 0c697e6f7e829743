"""The default command's wall time and peak memory: ``forescale backtest`` on the bundled trace.

Runs it as a child process (as a user would) and reads the child's peak RSS.
Run: ``.venv/bin/python tests/bench/bench_backtest.py [extra backtest args]``.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main(extra: list[str]) -> int:
    exe = Path(sys.executable).with_name("forescale")
    cmd = [str(exe) if exe.exists() else sys.executable, *([] if exe.exists() else ["-m", "scaler.cli"]), "backtest"]
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "r.json"
        t0 = time.perf_counter()
        p = subprocess.run([*cmd, "--no-progress", "--json", str(out), *extra], capture_output=True, text=True)
        wall = time.perf_counter() - t0
        rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        if p.returncode:
            print(p.stdout, p.stderr, file=sys.stderr)
            return p.returncode
        doc = json.loads(out.read_text())
    print(p.stdout)
    print(f"wall {wall:.1f} s, peak RSS {rss_mb:.0f} MiB, cores {os.cpu_count()}; inside: "
          + ", ".join(f"{k} {v:.1f}s" for k, v in doc["timing"].items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
