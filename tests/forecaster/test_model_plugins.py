"""Models as plugins (entry point group ``forescale.models``): the example package in ``examples/`` installs, passes
the contract every built-in model passes, and is selected by ``--model ewma``; a plugin that fails to load or breaks
the contract is refused with a message naming it, and never takes a process down.

The packages are really installed (``pip install --target``, no network: no build isolation, no dependencies) and
found by ``importlib.metadata`` in a child interpreter whose path holds them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from support.paths import REPO

EXAMPLE = REPO / "examples" / "forescale-model-ewma"


def child(code: str, path: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(path), str(REPO), str(REPO / "tests")])}
    return subprocess.run([sys.executable, *(["-c", code] if code else []), *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("plugin")
    build = tmp_path_factory.mktemp("build")
    src = shutil.copytree(EXAMPLE, build / "src")  # setuptools builds in the source tree: not in the repository's
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                           "--no-index", "--target", str(target), str(src)], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "TMPDIR": str(build)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (target / "forescale_ewma" / "__init__.py").exists()
    return target


def test_the_installed_example_is_a_model(installed):
    code = ("import forecaster.models as m, scaler.keys as k; print(json.dumps([m.NAMES, m.refused(), k.MODELS]))")
    proc = child("import json\n" + code, installed)
    assert proc.returncode == 0, proc.stderr[-2000:]
    names, refused, models = json.loads(proc.stdout)
    assert names[-1] == "ewma" and "ewma" in models and refused == {}


def test_the_contract_test_runs_against_the_plugin(installed):
    """tests/forecaster/test_forecaster_contract.py, parametrized over every model the registry holds, on ewma."""
    proc = child("", installed, "-m", "pytest", "tests/forecaster/test_forecaster_contract.py", "-k", "ewma", "-q",
                 "-p", "no:cacheprovider")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    passed = int(proc.stdout.rsplit(" passed", 1)[0].split()[-1])
    # 11 tests parametrized by model, one of them over 4 input lengths: 14, and nothing failed or skipped
    assert passed == 14 and "failed" not in proc.stdout and "skipped" not in proc.stdout, proc.stdout[-500:]


def test_backtest_selects_the_plugin_by_name(installed, tmp_path):
    out = tmp_path / "r.json"
    proc = child("", installed, "-m", "scaler.cli", "backtest", "--policies", "reactive,predictive", "--model",
                 "ewma", "--span", "12h", "--history", "2d", "--no-progress", "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["settings"]["model"] == "ewma" and set(doc["policies"]) == {"reactive", "predictive"}
    assert "ewma" in doc["forecast"] and np.isfinite(doc["forecast"]["ewma"]["wape"])
    assert "predictive" in proc.stdout and "ewma" in proc.stdout


BROKEN = {
    "crashes": ("crashes_plugin", "raise RuntimeError('no GPU here')\n"),
    "notaclass": ("notaclass_plugin", "def Model():\n    pass\n"),
    "nostate": ("nostate_plugin", textwrap.dedent("""
        from dataclasses import dataclass

        @dataclass(frozen=True)
        class Model:
            name = "nostate"
            seed: int = 0
            level_half_life: float = 0.0

            def fit(self, series, *, warm_start=None):
                return None
        """)),
    "nans": ("nans_plugin", textwrap.dedent("""
        from dataclasses import dataclass

        import numpy as np

        from forecaster.base import Forecast

        @dataclass(frozen=True)
        class Fit:
            model: str = "nans"
            chosen: str = "nans"
            step: float = 60.0
            last_t: float = 0.0
            history_max: float = 1.0

            def predict(self, horizon, quantiles=(), *, origin=None, recent=None):
                t = self.last_t + self.step * np.arange(1, horizon + 1)
                return Forecast(t, np.full(horizon, np.nan), {q: np.zeros(horizon) for q in quantiles}, "nans")

            def to_state(self):
                return {"model": "nans"}

            @staticmethod
            def from_state(d):
                return Fit()

        @dataclass(frozen=True)
        class Model:
            name = "nans"
            fitted = Fit
            seed: int = 0
            level_half_life: float = 0.0

            def fit(self, series, *, warm_start=None):
                return Fit(last_t=float(series.t[-1]), step=float(series.step))
        """)),
}


@pytest.fixture(scope="module")
def broken(tmp_path_factory) -> Path:
    """Four plugins declared by a distribution's metadata (what pip writes), each broken in its own way."""
    root = tmp_path_factory.mktemp("broken")
    for module, source in BROKEN.values():
        (root / f"{module}.py").write_text(source)
    info = root / "broken_plugins-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugins\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[forescale.models]\n" + "".join(
        f"{name} = {module}:{'Model'}\n" for name, (module, _) in BROKEN.items()) + "prophet = nans_plugin:Model\n")
    return root


def test_broken_plugins_are_refused_with_their_reason_and_nothing_crashes(broken):
    code = textwrap.dedent("""
        import json
        import numpy as np
        import forecaster.models as m
        from forecaster.base import FitFailed, Series
        from scaler.spec import MetadataError, parse_metadata

        out = {"names": m.NAMES, "refused": m.refused()}
        s = Series(60.0 * np.arange(100), np.ones(100), 60.0)
        try:
            m.make("nans").fit(s)
        except FitFailed as e:
            out["nans"] = str(e)
        try:
            parse_metadata({"serverAddress": "http://p:9090", "query": "q", "qpsPerReplica": "1", "model": "crashes"})
        except MetadataError as e:
            out["metadata"] = str(e)
        try:
            m.make("nostate")
        except ValueError as e:
            out["make"] = str(e)
        print(json.dumps(out))
        """)
    proc = child(code, broken)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    refused = out["refused"]
    assert out["names"][-1] == "nans" and "crashes" not in out["names"]  # the one that loads stays, checked
    assert refused["crashes"] == "crashes_plugin:Model failed to load: RuntimeError: no GPU here"
    assert "is not a dataclass" in refused["notaclass"]
    assert "no fitted class with a from_state" in refused["nostate"]
    assert refused["prophet"] == "nans_plugin:Model: the name 'prophet' is a built-in model's"
    assert out["nans"] == "model plugin nans violates the forecast contract: the mean has NaN, infinite or negative values"
    assert out["metadata"].startswith("metadata key 'model': got 'crashes'; accepted: prophet | ")
    assert out["metadata"].endswith("this model plugin was refused: crashes_plugin:Model failed to load: "
                                    "RuntimeError: no GPU here")
    assert out["make"].startswith("model plugin 'nostate' was refused: nostate_plugin:Model: it has no fitted")
