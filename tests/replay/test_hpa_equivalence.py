"""The compiled HPA loop against the pure-Python one it replaced (issue 26, item 2), on 2,900 random cases.

The old ``run_hpa`` is read from git (tests/support/oldhpa.py, commit BASE); every case draws a bumpy
demand, a value sequence (the observed rate scaled, spikes, zeros) and settings within what the old
emulation could express (bounds, tolerances, windows, rate-limit percents and periods, polling, activation,
cooldown, T_cold, milli rounding). Replicas and ready pods must be equal tick for tick: bit-identical.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from scaler.replay.hpa import Hpa, poll_count
from scaler.replay.keda import run_hpa
from scaler.replay.scenario import scenario
from support import oldhpa

CASES = 2900
BATCHES = 10


@pytest.fixture(scope="module")
def old():
    return oldhpa.load()


def _case(rng: np.random.Generator):
    n = int(rng.integers(40, 160))
    cold = float(rng.choice([0.0, 15.0, 50.0, 60.0, 180.0]))
    q = float(rng.choice([1.0, 2.5, 10.0]))
    y = np.abs(rng.uniform(0, 60) + np.cumsum(rng.normal(0, 5, n + 10)))
    sc = scenario(np.arange(n + 10) * 15.0, y, 15.0, 150.0, (n + 10) * 15.0, cold_start_seconds=cold,
                  qps_per_replica=q)
    lo = int(rng.choice([0, 0, 1, 3]))
    hpa = Hpa(cached_metrics=True, target=q, min_replicas=lo, max_replicas=int(rng.choice([max(lo, 1), 5, 20, 100])),
              tolerance_up=float(rng.choice([0.0, 0.02, 0.1])), tolerance_down=float(rng.choice([0.0, 0.1])),
              scale_up_pods=int(rng.choice([1, 4])), scale_up_percent=float(rng.choice([10.0, 50.0, 100.0])),
              scale_up_period_seconds=float(rng.choice([15.0, 60.0])),
              scale_up_window_seconds=float(rng.choice([0.0, 0.0, 60.0])),
              scale_down_window_seconds=float(rng.choice([0.0, 60.0, 300.0])),
              scale_down_percent=float(rng.choice([10.0, 50.0, 100.0])),
              scale_down_period_seconds=float(rng.choice([15.0, 60.0, 120.0])),
              polling_seconds=float(rng.choice([15.0, 30.0, 60.0])),
              activation_threshold=float(rng.choice([0.0, 0.0, 5.0])),
              cooldown_seconds=float(rng.choice([60.0, 300.0])), milli=bool(rng.random() < 0.8))
    polls = poll_count(sc.n, hpa, sc.tick)
    base = sc.observed[:: max(1, int(round(hpa.polling_seconds / 15.0)))][:polls]
    vals = base * rng.choice([0.5, 1.0, 1.3]) + np.where(rng.random(polls) < 0.05, 80.0, 0.0)
    vals = np.where(rng.random(polls) < 0.1, 0.0, vals)
    init = None if rng.random() < 0.7 else int(rng.integers(0, 30))
    return sc, vals, hpa, init


@pytest.mark.parametrize("batch", range(BATCHES))
def test_compiled_loop_equals_the_pure_python_one(old, batch):
    rng = np.random.default_rng(1000 + batch)
    for case in range(CASES // BATCHES):
        sc, vals, hpa, init = _case(rng)
        ohpa = old.Hpa(**{k: getattr(hpa, k) for k in old.Hpa.__dataclass_fields__})
        a = old.run_hpa(sc, vals, ohpa, initial_replicas=init)
        b = run_hpa(sc, vals, hpa, initial_replicas=init)
        assert a.replicas.tolist() == b.replicas.tolist(), (batch, case, hpa, init)
        assert a.ready.tolist() == b.ready.tolist(), (batch, case, hpa, init)
        assert np.array_equal(a.value, b.value, equal_nan=True)


def test_milli_values_equal_to_milli_element_by_element():
    from scaler.deadband import to_milli
    from scaler.replay.keda import milli_values

    rng = np.random.default_rng(7)
    # random magnitudes, values on and next to the halves of a milli-unit (where "%.3f" and x * 1000 may part),
    # zero, negatives, infinities; NaN stays NaN (a failed poll)
    x = np.concatenate([10 ** rng.uniform(-4, 9, 20000), np.round(rng.uniform(0, 1000, 20000), 3) + 0.0005,
                        np.nextafter(np.arange(1, 5000) / 1000 + 0.0005, 0), np.nextafter(np.arange(1, 5000) / 1000
                                                                                          + 0.0005, 1),
                        [0.0, -1.0, -0.0004, np.inf, -np.inf, 1e-300, 2.0 ** 60]])
    got = milli_values(x, True)
    assert got.tolist() == [float(to_milli(float(v))) for v in x]
    assert np.isnan(milli_values(np.array([np.nan]), True)[0])


def test_compiled_without_a_writable_cache_compiles_per_process(tmp_path):
    # a read-only image: no __pycache__ can be made next to the module (here a file is in its way) and
    # no user-wide cache either; numba's own cache=True fails at import there ("no locator available"),
    # compiled() compiles instead
    import os
    import subprocess
    import sys

    (tmp_path / "__pycache__").write_text("")
    (tmp_path / "ro_mod.py").write_text("from scaler.replay.hparules import compiled\n\n@compiled\ndef f(x):\n"
                                        "    return x + 1\n")
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, NUMBA_CACHE_DIR="/dev/null/no", HOME="/dev/null", XDG_CACHE_HOME="/dev/null/no",
               PYTHONPATH=os.pathsep.join([str(tmp_path), root]), PYTHONDONTWRITEBYTECODE="1")
    out = subprocess.run([sys.executable, "-c", "import ro_mod; print(ro_mod.f(41))"], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "42"


def test_without_numba_the_same_functions_give_the_same_timeline():
    """``pip install forescale`` without the ``fast`` extra: ``hparules.compiled`` leaves the rules and the loop as
    plain Python. A child interpreter where ``import numba`` fails replays 40 random cases; its replicas and
    ready pods equal the compiled loop's here, tick for tick."""
    import json
    import os
    import subprocess
    import sys

    import scaler.replay.hparules as hpa_module

    assert hpa_module.njit is not None, "the test extra installs numba: this side must be the compiled loop"
    code = (
        "import sys, json; sys.modules['numba'] = None\n"
        "import numpy as np\n"
        "import scaler.replay.hparules as h\n"
        "assert h.njit is None\n"
        "from replay.test_hpa_equivalence import _case\n"
        "rng = np.random.default_rng(77); out = []\n"
        "for _ in range(40):\n"
        "    sc, vals, hpa, init = _case(rng)\n"
        "    import scaler.replay.keda as k\n    tl = k.run_hpa(sc, vals, hpa, initial_replicas=init)\n"
        "    out.append([tl.replicas.tolist(), tl.ready.tolist()])\n"
        "print(json.dumps(out))\n"
    )
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{root / 'tests'}"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=600,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    interpreted = json.loads(proc.stdout)
    rng = np.random.default_rng(77)
    for k in range(40):
        sc, vals, hpa, init = _case(rng)
        tl = run_hpa(sc, vals, hpa, initial_replicas=init)
        assert interpreted[k] == [tl.replicas.tolist(), tl.ready.tolist()], k
