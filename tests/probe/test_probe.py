"""forescale probe, end to end on CPU: the CLI, the HTTP endpoints, the library, user models, bad inputs."""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from scaler.cli import main
from scaler.probe import PHASES, ModelSpec, ProbeConfig, ProbeReportError, WarmupSpec, read_cold_start
from scaler.probe.runner import Probe
from support.procs import announced_url

torch = pytest.importorskip("torch")
from safetensors.torch import save_file  # noqa: E402

TESTS = Path(__file__).resolve().parent  # tests/probe
ROOT = TESTS.parent.parent  # the repository
SUPPORT_PATH = ROOT / "tests"  # where `support.probe_user_model` (the user model of these tests) is found
FORESCALE = [sys.executable, "-m", "scaler.cli"]  # the `forescale` console script, in this interpreter
SIZE = "1M"  # the built-in model in these tests: ~0.9M parameters, 3.4 MB
FAST = ["--steady-requests", "5", "--shallow-requests", "1", "--shallow-tokens", "64", "--request-tokens", "32",
        "--max-input-tokens", "256", "-q"]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("probe-cache"))


@pytest.fixture(autouse=True)
def _user_module_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(SUPPORT_PATH))


def invoke(*args: str):
    return CliRunner().invoke(main, ["probe", *args], catch_exceptions=False)


def get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


# ------------------------------------------------------------------ built-in model via the CLI

@pytest.fixture(scope="module")
def builtin_run(cache_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("probe-run") / "probe.json"
    result = invoke("--model-size", SIZE, "--cache-dir", cache_dir, "--json", str(out),
                    "--image-pull-seconds", "1.5", "--scheduling-seconds", "0.25", *FAST)
    assert result.exit_code == 0, result.output
    return result, json.loads(out.read_text()), out


def test_every_phase_present_and_positive(builtin_run):
    _, report, _ = builtin_run
    assert report["status"] == "ok" and report["schema"] == "forescale.probe/v1"
    assert list(report["phases"]) == list(PHASES)
    for name, seconds in report["phases"].items():
        assert seconds > 0, name


def test_t_cold_is_the_sum_of_phases_and_extras(builtin_run):
    _, report, _ = builtin_run
    assert report["extras"] == {"image_pull_seconds": 1.5, "scheduling_seconds": 0.25}
    assert report["t_cold_seconds"] == pytest.approx(sum(report["phases"].values()) + 1.75, rel=1e-12)


def test_throughputs_are_bytes_over_seconds(builtin_run):
    _, report, _ = builtin_run
    tp, phases, model = report["throughput"], report["phases"], report["model"]
    assert tp["weights_read"]["bytes"] == model["weights_file_bytes"] == os.path.getsize(model["weights_path"])
    assert tp["weights_read"]["seconds"] == phases["weights_read"]
    assert tp["weights_to_device"]["bytes"] == model["weights_tensor_bytes"]
    assert tp["weights_to_device"]["seconds"] == phases["weights_to_device"]
    for key in ("weights_read", "weights_to_device", "raw_read"):
        entry = tp[key]
        assert entry["bytes_per_second"] == pytest.approx(entry["bytes"] / entry["seconds"])
        assert entry["gb_per_second"] == pytest.approx(entry["bytes_per_second"] / 1e9)
    assert tp["raw_read"]["bytes"] == model["weights_file_bytes"]
    assert tp["load_vs_raw_ratio"] == pytest.approx(tp["weights_read"]["bytes_per_second"]
                                                    / tp["raw_read"]["bytes_per_second"])
    assert tp["h2d"] is None  # CPU: no pinned/pageable comparison


def test_predictions_follow_the_bandwidth_formula(builtin_run):
    _, report, _ = builtin_run
    basis, phases = report["prediction_basis"], report["phases"]
    size = basis["size_bytes"]
    rest = report["t_cold_seconds"] - phases["weights_read"] - phases["weights_to_device"]
    assert [p["eta"] for p in report["predictions"]] == [0.0, 0.9, 1.0]
    for p in report["predictions"]:
        load = (1 - p["eta"]) * size * (1 / basis["disk_bytes_per_second"] + 1 / basis["h2d_bytes_per_second"])
        assert p["load_seconds"] == pytest.approx(load)
        assert p["t_cold_seconds"] == pytest.approx(rest + load)
    # at eta=0 the model reproduces the measured load (file bytes ~ tensor bytes)
    assert report["predictions"][0]["t_cold_seconds"] == pytest.approx(report["t_cold_seconds"], rel=0.01)


def test_report_facts_and_inference_figures(builtin_run):
    _, report, _ = builtin_run
    assert report["device"]["type"] == "cpu" and report["device"]["name"]
    host = report["host"]
    assert host["cpu_count"] >= 1 and host["memory_bytes"] > 0 and host["torch_version"] == torch.__version__
    assert host["python"] == sys.version.split()[0]
    assert 0.5e6 < report["model"]["parameters"] < 1.5e6 and report["model"]["source"] == "builtin"
    inf = report["inference"]
    assert inf["steady"]["requests"] == 5
    assert 0 < inf["steady"]["min_seconds"] <= inf["steady"]["p50_seconds"] <= inf["steady"]["p95_seconds"]
    assert inf["first_request_penalty"] == pytest.approx(inf["first_seconds"] / inf["steady"]["p50_seconds"])
    assert report["warmup"]["deep"]["source"] == "default" and report["warmup"]["deep"]["max_tokens"] == 256
    assert report["warmup"]["concurrent"]["threads"] == 4
    pc = report["page_cache"]["weights_read"]
    assert pc["requested"] is True and isinstance(pc["evicted"], bool)
    assert report["phase_details"]["runtime_import"]["import_seconds"] > 0


def test_human_table_lists_every_phase(builtin_run):
    result, report, _ = builtin_run
    for name in PHASES:
        assert name in result.stdout
    assert "image_pull (given)" in result.stdout and "scheduling (given)" in result.stdout
    assert f"{report['t_cold_seconds']:.3f}" in result.stdout
    assert "predicted T_cold" in result.stdout


def test_json_round_trips_into_read_cold_start(builtin_run, tmp_path):
    _, report, path = builtin_run
    assert read_cold_start(path) == report["t_cold_seconds"]
    assert read_cold_start(str(path)) == report["t_cold_seconds"]
    tampered = dict(report, t_cold_seconds=report["t_cold_seconds"] + 5)
    bad = tmp_path / "tampered.json"
    bad.write_text(json.dumps(tampered))
    with pytest.raises(ProbeReportError, match="differs from the sum"):
        read_cold_start(bad)


def test_cached_weights_are_reused(builtin_run, cache_dir):
    _, report, _ = builtin_run
    files = [f for f in os.listdir(cache_dir) if f.endswith(".safetensors")]
    assert len(files) == 1 and report["model"]["weights_path"].startswith(cache_dir)


# ------------------------------------------------------------------ serving: readiness gates on warm-up

def _start_serving(args: list[str], cwd: Path = ROOT) -> tuple[subprocess.Popen, str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(SUPPORT_PATH), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([*FORESCALE, "probe", *args, "--serve", "0", "--host", "127.0.0.1"],
                            cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url, lines = announced_url(proc)
    if url is None:
        proc.kill()
        raise AssertionError("the probe never announced its address: " + "".join(lines))
    return proc, url


def _stop(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise


def test_serve_turns_ready_only_after_warmup(cache_dir, tmp_path):
    deep = tmp_path / "deep.jsonl"
    deep.write_text('[1, 2, 3, 4]\n{"tokens": [5, 6, 7]}\n{"text": "a representative prompt"}\n')
    loadtest = tmp_path / "lt.json"  # a load test's result: its capacity is exported on /metrics
    loadtest.write_text(json.dumps({"schema": "forescale.loadtest/v1", "capacity_rps": 12.5,
                                    "recommended_qps_per_replica": 10.0, "steps": []}))
    proc, url = _start_serving(["--model-size", SIZE, "--cache-dir", cache_dir, "--warmup-inputs", str(deep),
                                "--test-warmup-delay", "2", "--capacity-from", str(loadtest), *FAST])
    try:
        seen_not_ready, seen_states = False, set()
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            # /metrics first: readiness only goes from not ready to ready, so a gauge read before a 503 is 0
            metrics = {s.name: s.value for f in text_string_to_metric_families(get(url + "/metrics")[1])
                       for s in f.samples if f.name == "forescale_probe_ready"}
            code, body = get(url + "/health/ready")
            s_code, s_body = get(url + "/health/startup")
            l_code, _ = get(url + "/health/live")
            assert l_code == 200
            state = json.loads(body)
            seen_states.add(state["state"])
            if code == 503:
                assert state["ready"] is False and state["status"] == "not ready"
                assert state["reason"].startswith(("cold start in progress", "not started"))
                assert len(state["phases"]) < len(PHASES)  # not all phases done: warm-up still running
                seen_not_ready = True
                assert metrics["forescale_probe_ready"] == 0
            else:
                assert code == 200 and state["ready"] is True and s_code == 200
                assert set(state["phases"]) == set(PHASES)
                break
            time.sleep(0.1)
        else:
            raise AssertionError(f"never ready; states seen {seen_states}")
        assert seen_not_ready and "warmup_deep" in seen_states

        families = {f.name: f for f in text_string_to_metric_families(get(url + "/metrics")[1])}
        cold = {s.labels["phase"]: s.value for s in families["forescale_cold_start_seconds"].samples}
        assert set(PHASES) | {"total", "image_pull", "scheduling"} <= set(cold)
        assert all(cold[p] > 0 for p in PHASES)
        assert cold["total"] == pytest.approx(sum(cold[p] for p in PHASES))
        sample = families["forescale_cold_start_seconds"].samples[0]
        assert sample.labels["model"] == "builtin-1M" and sample.labels["device"] == "cpu"
        assert families["forescale_probe_ready"].samples[0].value == 1
        etas = {s.labels["eta"] for s in families["forescale_cold_start_predicted_seconds"].samples}
        assert etas == {"0", "0.9", "1"}
        transfers = {s.labels["transfer"] for s in families["forescale_probe_throughput_bytes_per_second"].samples}
        assert {"weights_read", "weights_to_device"} <= transfers
        # the report over HTTP (complete once the after-readiness raw read is in)
        deadline = time.monotonic() + 30
        while (code_body := get(url + "/report"))[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        report = json.loads(code_body[1])
        assert report["t_cold_seconds"] == pytest.approx(cold["total"])
        assert report["warmup"]["deep"] == {"source": str(deep), "format": "jsonl", "requests": 3,
                                            "tokens": 4 + 3 + len("a representative prompt"), "min_tokens": 3,
                                            "max_tokens": len("a representative prompt"), "truncated": 0}
        assert report["phases"]["warmup_deep"] >= 2.0  # the test delay sits inside the phase
        # readiness came at the end of warm-up: the steady-state timing ran afterwards, outside T_cold
        assert "steady_inference" not in report["phases"] and report["inference"]["steady"]["requests"] == 5
        assert report["t_cold_seconds"] == pytest.approx(sum(report["phases"].values()))
        families = {f.name: f for f in text_string_to_metric_families(get(url + "/metrics")[1])}
        assert families["forescale_capacity_qps"].samples[0].value == 12.5
        assert families["forescale_capacity_qps"].samples[0].labels == {"model": "builtin-1M"}
        # the CLI keeps the warmed model while serving: completions after the report
        req = urllib.request.Request(url + "/v1/completions", data=b'{"prompt": "hi", "max_tokens": 3}',
                                     method="POST")
        with urllib.request.urlopen(req, timeout=30) as r:
            assert r.status == 200 and json.loads(r.read())["usage"]["completion_tokens"] == 3
        assert get(url + "/nope")[0] == 404
    finally:
        rc = _stop(proc)
    assert rc == 0
    assert "T_cold" in proc.stdout.read()


# ------------------------------------------------------------------ library use

def test_library_probe_runs_in_background_and_hands_over_the_model(cache_dir):
    config = ProbeConfig(model=ModelSpec(size=1_000_000, cache_dir=cache_dir),
                         warmup=WarmupSpec(steady_requests=3, shallow_requests=1, shallow_tokens=32,
                                           request_tokens=16, max_input_tokens=64, concurrency=8))
    probe = Probe(config)
    assert probe.state().state == "pending" and probe.model is None
    server = probe.serve("127.0.0.1", 0)
    try:
        probe.start()
        states = set()
        while True:
            st = probe.state()
            if st.ready:  # ready after the last phase; the raw-read comparison may still run
                break
            states.add(st.state)
            assert st.reason.startswith(("not started", "cold start in progress"))
            probe.wait(0.02)
        assert probe.wait(60)
        st = probe.state()
        assert st.ready and st.state == "ready" and st.healthy and probe.error is None and st.reason is None
        assert st.t_cold_seconds == pytest.approx(sum(st.phases.values()))
        assert len(states & set(PHASES)) >= 3
        report = probe.report()
        assert report["status"] == "ok" and report["warmup"]["concurrent"]["threads"] == 8
        logits = probe.model(torch.tensor([[1, 2, 3]]))
        assert logits.shape == (1, 3, report["model"]["vocab_size"])
        assert get(server.url + "/health/ready")[0] == 200
        probe.mark_stopping()  # e.g. on SIGTERM: not ready while draining
        code, body = get(server.url + "/health/ready")
        assert code == 503 and json.loads(body)["reason"] == "shutting down"
    finally:
        probe.close()


def test_library_failure_reports_not_ready_with_reason(tmp_path):
    config = ProbeConfig(model=ModelSpec(weights=str(tmp_path / "absent.safetensors"),
                                         module="support.probe_user_model:build"))
    probe = Probe(config)
    server = probe.serve("127.0.0.1", 0)
    try:
        probe.start()
        assert probe.wait(60)
        st = probe.state()
        assert st.state == "failed" and not st.ready and st.healthy
        assert "--weights" in st.reason and "absent.safetensors" in st.reason
        for endpoint in ("/health/ready", "/health/startup"):
            code, body = get(server.url + endpoint)
            assert code == 503
            assert json.loads(body)["status"] == "not ready" and "absent.safetensors" in json.loads(body)["reason"]
        assert get(server.url + "/health/live")[0] == 200  # a bad input: restarting would not help
        families = {f.name: f for f in text_string_to_metric_families(get(server.url + "/metrics")[1])}
        assert families["forescale_probe_ready"].samples[0].value == 0
        failed = [s for s in families["forescale_probe_state"].samples if s.value == 1]
        assert [s.labels["forescale_probe_state"] for s in failed] == ["failed"]
        assert probe.report()["status"] == "failed"
    finally:
        probe.close()


# ------------------------------------------------------------------ user models

@pytest.mark.parametrize("fmt", ["safetensors", "pt"])
def test_user_model_through_a_factory(tmp_path, fmt):
    from support import probe_user_model as um

    sd = um.state_dict(hidden=24, vocab=300)
    path = tmp_path / f"user.{fmt}"
    if fmt == "safetensors":
        save_file(sd, str(path))
    else:
        torch.save(sd, path)
    out = tmp_path / "r.json"
    result = invoke("--weights", str(path), "--module", "support.probe_user_model:build", "--module-kwargs",
                    '{"hidden": 24, "vocab": 300}', "--model-name", "tiny", "--json", str(out), *FAST)
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["model"]["source"] == "user" and report["model"]["module"] == "support.probe_user_model:build"
    assert report["model"]["weights_format"] == ("safetensors" if fmt == "safetensors" else "torch")
    assert report["model"]["parameters"] == sum(v.numel() for v in sd.values())
    assert report["model"]["vocab_size"] == 300 and report["model"]["name"] == "tiny"
    assert all(report["phases"][p] > 0 for p in PHASES)
    assert read_cold_start(out) == pytest.approx(sum(report["phases"].values()))


@pytest.mark.parametrize("factory", ["build_buffered", "build_meta_hostile"])
def test_user_model_that_needs_a_real_construction(tmp_path, factory):
    """A non-persistent buffer, or a factory that fails on the meta device: built on CPU, then moved."""
    from support import probe_user_model as um

    path = tmp_path / "w.safetensors"
    save_file(um.state_dict(hidden=16), str(path))
    result = invoke("--weights", str(path), "--module", f"support.probe_user_model:{factory}", "--module-kwargs",
                    '{"hidden": 16}', "--no-raw-read", *FAST)
    assert result.exit_code == 0, result.output
    assert "T_cold" in result.stdout


# ------------------------------------------------------------------ bad input: exit 2, the flag and file named

@pytest.fixture
def user_weights(tmp_path) -> Path:
    from support import probe_user_model as um

    path = tmp_path / "w.safetensors"
    save_file(um.state_dict(hidden=32), str(path))
    return path


def _fails(result, *needles: str) -> None:
    assert result.exit_code == 2, (result.exit_code, result.output)
    for needle in needles:
        assert needle in result.output, (needle, result.output)


def _user(path, module="support.probe_user_model:build", *extra: str):
    return invoke("--weights", str(path), "--module", module, *extra, *FAST)


def test_missing_weights_file(tmp_path):
    _fails(_user(tmp_path / "nope.safetensors"), "--weights", "nope.safetensors", "no such file", "accepted")


def test_weights_path_is_a_directory(tmp_path):
    d = tmp_path / "dir.safetensors"
    d.mkdir()
    _fails(_user(d), "--weights", "not a regular file")


@pytest.mark.parametrize("content", [b"", b"\x00" * 4, b"garbage that is not safetensors" * 10])
def test_corrupt_safetensors(tmp_path, content):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(content)
    _fails(_user(path), "--weights", "bad.safetensors", "corrupt or not a safetensors file", "accepted")


def test_truncated_safetensors(tmp_path, user_weights):
    data = user_weights.read_bytes()
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(data[:-100])
    _fails(_user(cut), "cut.safetensors", "truncated")


@pytest.mark.parametrize("content", [b"not a pickle at all", b"PK\x03\x04 broken zip archive"])
def test_corrupt_torch_checkpoint(tmp_path, content):
    path = tmp_path / "bad.pt"
    path.write_bytes(content)
    _fails(_user(path), "--weights", "bad.pt")


def test_torch_file_that_is_not_a_state_dict(tmp_path):
    path = tmp_path / "list.pt"
    torch.save([torch.zeros(2)], path)
    _fails(_user(path), "--weights", "list.pt", "not a state dict")


def test_unknown_weights_extension(tmp_path):
    path = tmp_path / "w.npz"
    path.write_bytes(b"x")
    _fails(_user(path), "--weights", "unknown extension", ".safetensors")


def test_shape_mismatch(user_weights):
    _fails(_user(user_weights, "support.probe_user_model:build", "--module-kwargs", '{"hidden": 48}'),
           "does not fit --module support.probe_user_model:build", "shape mismatch", "emb.weight")


def test_dtype_mismatch(user_weights):
    _fails(_user(user_weights, "support.probe_user_model:build", "--dtype", "float16"),
           "not float16", "float32", "--dtype auto")


def test_dtype_mismatch_in_torch_file(tmp_path):
    from support import probe_user_model as um

    path = tmp_path / "w.pt"
    torch.save(um.state_dict(dtype=torch.bfloat16), path)
    _fails(_user(path, "support.probe_user_model:build", "--dtype", "fp32"), "w.pt", "not float32", "bfloat16")


def test_missing_and_unexpected_tensors(tmp_path):
    from support import probe_user_model as um

    sd = um.state_dict()
    sd.pop("head.weight")
    sd["extra.weight"] = torch.zeros(3)
    path = tmp_path / "partial.safetensors"
    save_file(sd, str(path))
    _fails(_user(path), "missing from the file (head.weight)", "unknown to the module (extra.weight)")


@pytest.mark.parametrize("module, needle", [
    ("no_colon_here", "accepted: package.module:factory"),
    ("no_such_module_xyz:build", "cannot import module 'no_such_module_xyz'"),
    ("support.probe_user_model:missing", "has no attribute 'missing'"),
    ("support.probe_user_model:not_a_module", "accepted: a torch.nn.Module"),
])
def test_bad_module(user_weights, module, needle):
    _fails(_user(user_weights, module), "--module", needle)


def test_forward_that_does_not_take_token_ids(user_weights):
    _fails(_user(user_weights, "support.probe_user_model:build_needs_mask"), "--module", "forward(input_ids) failed",
           "LongTensor of token ids")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_requested_but_absent(cache_dir):
    _fails(invoke("--device", "cuda", "--model-size", SIZE, "--cache-dir", cache_dir, *FAST),
           "--device cuda", "CUDA is not available", "--device cpu")


def test_port_in_use(cache_dir):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        _fails(invoke("--model-size", SIZE, "--cache-dir", cache_dir, "--serve", str(port), "--host", "127.0.0.1",
                      *FAST), f"--serve {port}", "already in use", "free TCP port")


@pytest.mark.parametrize("content, needle", [
    (None, "cannot be read"),
    ("", "no requests"),
    ("[1, 2, 3]\nnot json\n", "line 2: not JSON"),
    ('{"other": 1}\n', "line 1: an object needs"),
    ("[1, -2]\n", "list of integers >= 0"),
    ("[1, 999999]\n", "not below the model's vocabulary size"),
    (b"\xff\xfe\x00bad", "not UTF-8"),
])
def test_bad_warmup_file(tmp_path, cache_dir, content, needle):
    path = tmp_path / "warm.txt"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    _fails(invoke("--model-size", SIZE, "--cache-dir", cache_dir, "--warmup-inputs", str(path), *FAST),
           "--warmup-inputs", "warm.txt", needle)


def test_warmup_file_is_a_directory(tmp_path, cache_dir):
    _fails(invoke("--model-size", SIZE, "--cache-dir", cache_dir, "--warmup-inputs", str(tmp_path), *FAST),
           "--warmup-inputs", "cannot be read")


@pytest.mark.parametrize("args, needle", [
    (["--model-size", "12Q"], "not a parameter count"),
    (["--model-size", "125"], "out of range"),
    (["--module-kwargs", "{nope"], "is not JSON"),
    (["--module-kwargs", "[1]"], "accepted: a JSON object"),
    (["--device", "tpu"], "accepted: auto"),
    (["--weights", "x.safetensors"], "--weights needs --module"),
    (["--module", "a:b"], "--module needs --weights"),
    (["--exit-after-warmup"], "goes with --serve"),
    (["--capacity-from", "lt.json"], "--capacity-from goes with --serve"),
    (["--json", "/no/such/dir/r.json"], "does not exist"),
    (["--concurrency", "0"], "--concurrency"),
    (["--image-pull-seconds", "-1"], "--image-pull-seconds"),
    (["--image-pull-seconds", "nan"], "--image-pull-seconds"),
])
def test_bad_flags(args, needle):
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert needle in result.output


def test_serve_exit_after_warmup_with_bad_input_exits_2(tmp_path):
    result = invoke("--weights", str(tmp_path / "gone.pt"), "--module", "support.probe_user_model:build",
                    "--serve", "0", "--host", "127.0.0.1", "--exit-after-warmup", *FAST)
    _fails(result, "--weights", "gone.pt", "no such file")


def test_failed_run_writes_a_failed_report_that_read_cold_start_rejects(tmp_path):
    out = tmp_path / "failed.json"
    _fails(_user(tmp_path / "gone.safetensors", "support.probe_user_model:build", "--json", str(out)),
           "gone.safetensors")
    report = json.loads(out.read_text())
    assert report["status"] == "failed" and "gone.safetensors" in report["reason"]
    with pytest.raises(ProbeReportError, match="the probe run failed"):
        read_cold_start(out)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_pinned_and_pageable(cache_dir, tmp_path):
    out = tmp_path / "cuda.json"
    for mode in ("pinned", "pageable"):
        result = invoke("--device", "cuda", "--model-size", SIZE, "--cache-dir", cache_dir, "--h2d", mode,
                        "--json", str(out), *FAST)
        assert result.exit_code == 0, result.output
        report = json.loads(out.read_text())
        assert report["device"]["type"] == "cuda" and report["phase_details"]["weights_to_device"]["mode"] == mode
        h2d = report["throughput"]["h2d"]
        assert h2d["pinned"]["bytes_per_second"] > 0 and h2d["pageable"]["bytes_per_second"] > 0
        assert math.isclose(report["t_cold_seconds"], sum(report["phases"].values()), rel_tol=1e-9)
