"""forescale probe --watch: a real HTTP model server on 127.0.0.1 that turns healthy after a delay and answers
its first completion after a further delay; the sidecar's endpoints read over real HTTP."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from scaler.cli import main
from scaler.probe.watch import Watcher

HEALTHY_AFTER = 1.0  # seconds from the start to /health answering 200
FIRST_COMPLETION_AFTER = 1.0  # seconds from healthy to the first successful completion
INTERVAL = 0.2
SLACK = 0.25  # an HTTP round trip on a loaded test machine, beyond the interval


class FakeModelServer(ThreadingHTTPServer):
    """vLLM-like: /health 503 then 200; /v1/models; /v1/completions 503 until warm, then a choice."""

    daemon_threads = True

    def __init__(self, t0: float):
        self.t0 = t0
        self.completions = 0
        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def age(self) -> float:
        return time.monotonic() - self.t0


class Handler(BaseHTTPRequestHandler):
    server: FakeModelServer

    def _answer(self, code: int, doc: dict) -> None:
        body = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # noqa: N802
        healthy = self.server.age() >= HEALTHY_AFTER
        if self.path == "/health":
            self._answer(200 if healthy else 503, {})
        elif self.path == "/v1/models" and healthy:
            self._answer(200, {"data": [{"id": "meta-llama/Llama-3-8B"}]})
        else:
            self._answer(404 if healthy else 503, {})

    def do_POST(self):  # noqa: N802
        doc = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if doc.get("model") != "meta-llama/Llama-3-8B":
            return self._answer(404, {"error": {"message": "model not found"}})
        if self.server.age() < HEALTHY_AFTER + FIRST_COMPLETION_AFTER:
            return self._answer(503, {"error": {"message": "warming up"}})
        self.server.completions += 1
        self._answer(200, {"id": "c1", "choices": [{"text": "!", "index": 0}]})

    def log_message(self, *args):
        pass


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def cold_metrics(body: bytes) -> dict:
    return {s.labels["phase"]: s.value for f in text_string_to_metric_families(body.decode()) for s in f.samples
            if s.name == "forescale_cold_start_seconds"}


def test_watch_times_health_and_first_completion_within_one_interval():
    t0 = time.monotonic()
    fake = FakeModelServer(t0)
    w = Watcher(fake.url, label="llama", interval=INTERVAL, image_pull_seconds=20.0)
    side = w.serve("127.0.0.1", 0)
    try:
        w.start(started_at=t0)
        code, body = get(side.url + "/health/ready")
        assert code == 503 and json.loads(body)["state"] in ("watch_health", "watch_completion")
        assert w.wait(30)
        phases = w.state().phases
        # healthy at t0 + 1.0 exactly; seen by the first poll after it: at most one interval (+ a round trip) late
        assert HEALTHY_AFTER <= phases["health"] <= HEALTHY_AFTER + INTERVAL + SLACK
        # the first completion succeeds at t0 + 2.0: the two phases end there, within one interval
        end = phases["health"] + phases["first_completion"]
        assert HEALTHY_AFTER + FIRST_COMPLETION_AFTER <= end <= HEALTHY_AFTER + FIRST_COMPLETION_AFTER + INTERVAL + SLACK
        assert fake.completions == 1  # one successful completion, then the watcher stops asking
        code, body = get(side.url + "/health/ready")
        assert code == 200 and json.loads(body)["status"] == "ready"
        assert get(side.url + "/health/startup")[0] == 200 and get(side.url + "/health/live")[0] == 200
        m = cold_metrics(get(side.url + "/metrics")[1])
        # T_cold = health + first completion + the given 20 s image pull (what coldStartQuery reads)
        assert m["total"] == pytest.approx(phases["health"] + phases["first_completion"] + 20.0)
        assert m["health"] == pytest.approx(phases["health"]) and m["image_pull"] == 20.0
        req = urllib.request.Request(side.url + "/v1/completions", data=b'{"prompt": "x"}', method="POST",
                                     headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=5)
        assert e.value.code == 404 and fake.url in e.value.read().decode()
    finally:
        w.stop()
        fake.shutdown()
        fake.server_close()


def test_watch_cli_refuses_bad_input():
    r = CliRunner().invoke(main, ["probe", "--watch", "http://127.0.0.1:1"])
    assert r.exit_code == 2 and "--watch needs --serve PORT" in r.output
    r = CliRunner().invoke(main, ["probe", "--watch", "ftp://x", "--serve", "0"])
    assert r.exit_code == 2 and "accepted: the model server's base URL" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(main, ["probe", "--watch", "http://127.0.0.1:1", "--serve", "0", "--watch-health", "health"])
    assert r.exit_code == 2 and "accepted: a path such as /health" in r.output


def test_watch_cli_end_to_end(tmp_path):
    """The command itself: serve, watch, print T_cold, exit with --exit-after-warmup."""
    fake = FakeModelServer(time.monotonic())
    try:
        out = tmp_path / "watch.json"
        r = CliRunner().invoke(main, ["probe", "--watch", fake.url, "--serve", "0", "--host", "127.0.0.1",
                                      "--watch-interval", str(INTERVAL), "--exit-after-warmup", "--model-name", "llama",
                                      "--json", str(out)])
        assert r.exit_code == 0, r.output
        rep = json.loads(out.read_text())
        assert rep["model"] == "llama" and set(rep["phases"]) == {"health", "first_completion"}
        assert rep["t_cold_seconds"] == pytest.approx(sum(rep["phases"].values()))
        assert "T_cold" in r.output
    finally:
        fake.shutdown()
        fake.server_close()


def test_the_process_start_is_read_from_proc():
    import subprocess
    import sys

    # a child that sleeps 0.5 s before asking: its own start lies at least 0.5 s back
    code = ("import time; time.sleep(0.5); from scaler.probe.watch import process_started; "
            "print(time.monotonic() - process_started())")
    age = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert 0.5 <= age < 60
