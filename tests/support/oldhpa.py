"""The HPA emulation as it was before it was compiled (issue 26), read from git: the reference that the
randomised comparison (tests/replay/test_hpa_equivalence.py) and tests/bench/bench_hpa.py hold the new one to.

Nothing of it is kept in the product: the module is loaded from ``git show BASE:scaler/replay/hpa.py``.
"""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

BASE = "6696aa0"  # the last commit with the pure-Python loop (scaler/replay/hpa.py before issue 26)
ROOT = Path(__file__).resolve().parents[2]


# Rule changes made since, on purpose, applied to the old source so that the comparison holds the loop, not the
# rules, to the old code: the Percent scale-up limit is Go's float64 ceil, with no epsilon (the drill saw the
# real HPA limit 25 replicas +12 % to 29; see scaler/replay/hpa.py scale_up_rate_limit). And a move: the tolerance
# band and the milli-quantities left scaler.policy for scaler.deadband (the same code).
FIXES = (("math.ceil(start * (1.0 + percent / 100.0) - EPS)", "math.ceil(start * (1.0 + percent / 100.0))"),
         ("from ..policy import KUBERNETES_TOLERANCE, Tolerance, to_milli",
          "from ..deadband import KUBERNETES_TOLERANCE, Tolerance, to_milli"))


def load(rev: str = BASE) -> types.ModuleType:
    """The old ``scaler.replay.hpa`` as a module of the package (its relative imports resolve), with ``FIXES``."""
    src = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:scaler/replay/hpa.py"], check=True,
                         capture_output=True, text=True).stdout
    for old, new in FIXES:
        if old not in src:
            raise AssertionError(f"oldhpa: {old!r} is not in {rev}:scaler/replay/hpa.py")
        src = src.replace(old, new)
    name = "scaler.replay.hpa_before_issue26"
    mod = types.ModuleType(name)
    mod.__package__ = "scaler.replay"
    mod.__file__ = f"<git {rev}:scaler/replay/hpa.py>"
    sys.modules[name] = mod
    exec(compile(src, mod.__file__, "exec"), mod.__dict__)
    return mod
