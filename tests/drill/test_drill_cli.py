"""``forescale drill`` on input it cannot run: a clear error naming it, exit 2, and nothing left running."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

from scaler.drill.cluster import BINARIES

REPO = Path(__file__).resolve().parents[2]


def drill(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "scaler.cli", "drill", "--no-isolate", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


# an etcd that answers /health and /version on its --listen-client-urls port, and lives until it is stopped
FAKE_ETCD = f"""#!{sys.executable}
import http.server, json, sys
port = int([a for a in sys.argv if a.startswith("--listen-client-urls=")][0].rsplit(":", 1)[1])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({{"health": "true", "etcdserver": "fake"}}).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def fake_bins(tmp_path: Path) -> Path:
    """etcd fakes health; kube-apiserver exits 4 at once; the rest would sleep."""
    d = tmp_path / "bin"
    d.mkdir()
    for b in BINARIES:
        p = d / b
        p.write_text(FAKE_ETCD if b == "etcd" else "#!/bin/sh\nexit 4\n" if b == "kube-apiserver"
                     else "#!/bin/sh\nsleep 600\n")
        p.chmod(0o755)
    return d


def test_a_missing_build_names_the_binaries_and_the_make_target(tmp_path):
    r = drill("--bin-dir", str(tmp_path), "--out", str(tmp_path / "out"), "--port-base", "26000")
    assert r.returncode == 2
    assert f"missing drill binaries in {tmp_path}: etcd, kube-apiserver" in r.stderr
    assert "make drill-build" in r.stderr and "Traceback" not in r.stderr


def test_an_unknown_scenario_is_named_with_the_accepted_ones(tmp_path):
    r = drill("--scenarios", "step,nope", "--bin-dir", str(fake_bins(tmp_path)), "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "unknown scenario 'nope'; accepted: step, zero, pod-kill, scaler-down, percent, behavior" \
        in r.stderr


def test_a_port_taken_is_named(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        base = s.getsockname()[1] - 2  # the apiserver's port (base + 2) is taken
        r = drill("--scenarios", "step", "--bin-dir", str(fake_bins(tmp_path)), "--out", str(tmp_path / "o"),
                  "--port-base", str(base))
    assert r.returncode == 2 and f"port(s) already taken on 127.0.0.1: apiserver {base + 2}" in r.stderr


def test_a_part_that_dies_stops_the_run_and_everything_it_started(tmp_path):
    bins = fake_bins(tmp_path)
    r = drill("--scenarios", "step", "--short", "--bin-dir", str(bins), "--out", str(tmp_path / "o"),
              "--port-base", "26100")
    # etcd came up (the fake answers /health), kube-apiserver died: the run stops and takes etcd down with it
    assert r.returncode == 2 and "kube-apiserver exited with 4 before ready" in r.stderr
    assert "Traceback" not in r.stderr and (tmp_path / "o" / "runs" / "step" / "logs" / "etcd.log").exists()
    time.sleep(0.5)
    left = [p.info["cmdline"] for p in psutil.process_iter(["cmdline"]) if any(str(bins) in c for c in
                                                                              (p.info["cmdline"] or []))]
    assert left == []


def test_a_trace_too_short_or_a_trigger_without_a_source(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("timestamp,qps\n" + "".join(f"{1_700_000_000 + 60 * i},5\n" for i in range(600)))
    so = tmp_path / "so.yaml"
    so.write_text("apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {name: w}\nspec:\n"
                  "  scaleTargetRef: {name: w}\n  triggers:\n  - type: external\n"
                  "    metadata: {scalerAddress: x, serverAddress: http://p, query: q, qpsPerReplica: '10'}\n")
    bins = str(fake_bins(tmp_path))
    r = drill("--trace", str(trace), "--scaledobject", str(so), "--span", "1h", "--bin-dir", bins)
    assert r.returncode == 2 and "the trace holds 10.0 h: a drill of 1 h needs it plus at least a day" in r.stderr
    so.write_text(so.read_text().replace("type: external", "type: kafka"))
    r = drill("--trace", str(trace), "--scaledobject", str(so), "--bin-dir", bins)
    assert r.returncode == 2 and "type 'kafka' has no source in the drill" in r.stderr
    r = drill("--trace", str(trace), "--bin-dir", bins)
    assert r.returncode == 2 and "--trace and --scaledobject go together" in r.stderr
