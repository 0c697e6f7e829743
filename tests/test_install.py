"""The lean install (issue 24 item 4): the base install leaves out statsforecast (the ``forescale[models]`` extra)
and grpcio-tools (the ``dev`` extra). Without statsforecast, mstl/ets are refused with a message naming the extra,
before any run, and ``auto`` still works (it competes without them).

The absent package is real absence for the child process: ``sys.modules["statsforecast"] = None`` makes every
``import statsforecast`` fail and ``importlib.util.find_spec`` answer None, exactly as on a base install."""

from __future__ import annotations

import subprocess
import sys
import tomllib

from support.paths import REPO

WITHOUT = "import sys; sys.modules['statsforecast'] = None\n"


def _child(code: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WITHOUT + code], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})


def test_the_base_dependencies_leave_out_statsforecast_and_grpcio_tools():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    base = " ".join(project["dependencies"])
    assert "statsforecast" not in base and "grpcio-tools" not in base
    extras = project["optional-dependencies"]
    assert any(d.startswith("statsforecast") for d in extras["models"])
    assert any(d.startswith("grpcio-tools==") for d in extras["dev"])
    # the tests need both: the stale-stubs test and the mstl/ets tests
    assert any(d.startswith("grpcio-tools==") for d in extras["test"])
    assert any(d.startswith("statsforecast") for d in extras["test"])


def test_backtest_with_mstl_without_the_models_extra_exits_2_naming_the_extra():
    res = _child("from scaler.cli import main\nmain(['backtest', '--no-progress', '--model', 'mstl', '--span', '1d'])")
    assert res.returncode == 2, res.stderr
    assert "'--model'" in res.stderr and "pip install 'forescale[models]'" in res.stderr
    assert "Traceback" not in res.stderr


def test_tune_with_ets_without_the_models_extra_exits_2():
    res = _child("from scaler.cli import main\nmain(['tune', '--model', 'ets'])")
    assert res.returncode == 2, res.stderr
    assert "model 'ets' needs the statsforecast package" in res.stderr


def test_metadata_model_mstl_without_the_extra_is_a_metadata_error():
    res = _child("from scaler.spec import MetadataError, parse_metadata\n"
                 "try:\n"
                 "    parse_metadata({'serverAddress': 'http://127.0.0.1:9', 'query': 'up', 'qpsPerReplica': '10', 'model': 'mstl'})\n"
                 "except MetadataError as e:\n"
                 "    print('refused:', e)\n")
    assert res.returncode == 0, res.stderr
    assert "refused: metadata key 'model'" in res.stdout and "forescale[models]" in res.stdout


def test_auto_fits_without_the_models_extra():
    # three days of a daily sine at 10 min: auto scores its candidates and picks one that is not mstl/ets
    res = _child("import numpy as np\n"
                 "from forecaster.base import Series\n"
                 "from forecaster.models import make\n"
                 "t = np.arange(0, 3 * 86400, 600.0)\n"
                 "y = 100 + 50 * np.sin(2 * np.pi * t / 86400)\n"
                 "f = make('auto', seed=0, quantile=0.8).fit(Series(t, y, 600.0))\n"
                 "print('chosen', f.chosen)\n", timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    chosen = res.stdout.split("chosen", 1)[1].strip()
    assert chosen and chosen not in ("mstl", "ets")


def test_the_envelope_running_max_equals_scipys_maximum_filter():
    # the envelope model no longer needs scipy (113 MiB, only statsforecast brought it): its running max must be
    # scipy.ndimage.maximum_filter1d(size=2*half+1, mode="constant", cval=-inf) exactly (scipy: test extra)
    import numpy as np
    from scipy.ndimage import maximum_filter1d

    from forecaster.models.envelope import running_max

    rng = np.random.default_rng(7)
    for n in (1, 2, 5, 17, 1000):
        for half in (0, 1, 3, 30, 64, 700):
            y = rng.normal(size=n)
            y[rng.random(n) < 0.2] = -np.inf
            want = maximum_filter1d(y, size=2 * half + 1, mode="constant", cval=-np.inf)
            assert np.array_equal(running_max(y, half), want), (n, half)


def test_the_lock_pins_every_requirement_of_pyproject():
    # constraints.txt (make lock) must cover the base install and every extra: a requirement added to pyproject
    # without `make lock` would install unpinned
    import re

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"]) + [r for extra in project["optional-dependencies"].values() for r in extra]

    def norm(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    pinned = {norm(m.group(1)) for m in re.finditer(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==", (REPO / "constraints.txt")
                                                     .read_text(), flags=re.M)}
    missing = sorted({norm(re.match(r"[A-Za-z0-9._-]+", r).group(0)) for r in reqs} - pinned)
    assert missing == [], f"not in constraints.txt (run `make lock`): {missing}"
    # torch stays the tested 2.13.0 (the probe extra's pin)
    assert re.search(r"^torch==2\.13\.0\b", (REPO / "constraints.txt").read_text(), flags=re.M)


def test_what_users_install_is_bounded_to_what_the_lock_tests():
    """`pip install .` (and its user-facing extras) without the lock resolves within the versions the suite ran:
    every range has an upper bound, and admits the lock's pin (pandas: >= 2.1, < 3 holds the pinned 2.3.3)."""
    import re

    from packaging.requirements import Requirement

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    lock = {re.sub(r"[-_.]+", "-", m.group(1)).lower(): m.group(2) for m in
            re.finditer(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^ ;\n]+)", (REPO / "constraints.txt").read_text(), re.M)}
    user = list(project["dependencies"]) + [r for name, extra in project["optional-dependencies"].items()
                                            if name not in ("test", "dev") for r in extra]
    unbounded, outside = [], []
    for text in user:
        req = Requirement(text)
        if not any(s.operator in ("<", "<=", "==", "~=") for s in req.specifier):
            unbounded.append(text)
        pin = lock[re.sub(r"[-_.]+", "-", req.name).lower()].split("+")[0]
        if not req.specifier.contains(pin, prereleases=True):
            outside.append(f"{text} (lock: {pin})")
    assert unbounded == [] and outside == [], (unbounded, outside)
    assert Requirement(next(r for r in project["dependencies"] if r.startswith("pandas"))).specifier.contains("2.3.3")
    assert not Requirement(next(r for r in project["dependencies"] if r.startswith("pandas"))).specifier.contains("3.1.1")


def test_the_package_says_what_users_look_at():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert "Programming Language :: Python :: 3.11" in project["classifiers"]
    assert project["requires-python"] == ">=3.11" and len(project["keywords"]) >= 5
    assert {"Homepage", "Repository", "Issues", "Changelog"} <= set(project["urls"])
    changelog = (REPO / "CHANGELOG.md").read_text()
    assert f"## [{project['version']}]" in changelog  # the version's changes are said
