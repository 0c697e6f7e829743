"""The HTTP port (prometheus_client's app, HEAD, gzip, OpenMetrics, runtime collectors, build info),
the status page in a real headless Chromium, and `forescale serve` refusing what it cannot do (exit 2).

Servers listen on 127.0.0.1 (or fail to bind, which sends nothing); every process started is stopped.
"""

from __future__ import annotations

import gzip
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families

from support.procs import stop
from support import promfixture as pf
from support.browser import chromium, console_errors, wait_for
from support.clock import FakeClock
from support.scaler import Scaler

REPO = Path(__file__).resolve().parents[2]
QPS = 12.5


def request(url: str, method: str = "GET", headers: dict | None = None):
    req = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


@pytest.fixture
def scaler():
    s = Scaler(FakeClock(1_700_000_000.0))
    yield s
    s.close()


def base(s: Scaler) -> str:
    return f"http://127.0.0.1:{s.server.http_port}"


def test_metrics_from_prometheus_client_app_with_head_gzip_openmetrics(scaler):
    code, headers, body = request(base(scaler) + "/metrics")
    assert code == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
    fams = {f.name: f for f in text_string_to_metric_families(body.decode())}
    (info,) = fams["forescale_build_info"].samples
    from importlib import metadata
    assert info.value == 1 and info.labels["version"] == metadata.version("forescale")
    assert info.labels["python_version"] == ".".join(map(str, sys.version_info[:3]))
    # process, platform and GC collectors; the process' own RSS is real (tens of MB at least)
    assert fams["process_resident_memory_bytes"].samples[0].value > 20e6
    assert "python_info" in fams and "python_gc_objects_collected" in fams
    # HEAD: the same headers, no body (the library's app alone answers 405)
    hcode, hheaders, hbody = request(base(scaler) + "/metrics", "HEAD")
    assert (hcode, hbody) == (200, b"")
    assert hheaders["Content-Type"] == headers["Content-Type"]
    assert abs(int(hheaders["Content-Length"]) - len(body)) < 200  # process counters move between the two scrapes
    # gzip when asked
    gcode, gheaders, gbody = request(base(scaler) + "/metrics", headers={"Accept-Encoding": "gzip"})
    assert gcode == 200 and gheaders["Content-Encoding"] == "gzip"
    assert b"forescale_build_info" in gzip.decompress(gbody)
    # OpenMetrics when asked: parses with the strict OpenMetrics parser and ends with # EOF
    ocode, oheaders, obody = request(base(scaler) + "/metrics",
                                     headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert ocode == 200 and oheaders["Content-Type"].startswith("application/openmetrics-text")
    assert obody.endswith(b"# EOF\n")
    assert "forescale_build_info" in {f.name for f in parse_openmetrics(obody.decode())}


def test_health_status_page_and_unknown_paths(scaler):
    assert request(base(scaler) + "/healthz")[::2] == (200, b"ok\n")
    code, headers, body = request(base(scaler) + "/")
    assert code == 200 and headers["Content-Type"].startswith("text/html")
    assert "default-src 'none'" in headers["Content-Security-Policy"]
    assert b"<script>" in body and b"src=\"http" not in body and b"https://" not in body  # nothing external
    doc = json.loads(request(base(scaler) + "/status.json")[2])
    assert doc["scaledobjects"] == [] and doc["now"] == 1_700_000_000.0
    assert request(base(scaler) + "/nope")[0] == 404
    assert request(base(scaler) + "/metrics", "POST")[0] == 405


def test_status_page_in_a_real_browser_after_keda_calls(prometheus_factory):
    """KEDA-like gRPC calls, then the page in headless Chromium: the row appears, no console error."""
    end = float(int(time.time()))
    t = pf.sample_times(end - 3600, end, 15.0)
    prom = prometheus_factory([pf.SeriesSpec("forescale_test_qps", {"job": "t"}, "gauge", t, [QPS] * len(t))])
    s = Scaler(FakeClock(end))
    try:
        md = {"scalerAddress": "x:9090", "serverAddress": prom.url, "query": "max(forescale_test_qps)",
              "qpsPerReplica": "5", "mode": "reactive", "hpaTolerance": "0"}
        assert s.value(md).metricValueFloat == pytest.approx(QPS)  # GetMetrics, as KEDA polls
        s.stub.IsActive(s.ref(md), timeout=5)
        with chromium() as driver:
            driver.get(base(s) + "/")
            row = wait_for(driver, "document.getElementById('so:serving/llm')", what="the ScaledObject's row")
            cells = {td.get_attribute("data-col"): td.text for td in row.find_elements("css selector", "td")}
            assert cells["namespace"] == "serving" and cells["name"] == "llm"
            assert cells["reason"] == "mode_reactive"
            # planned = observed = 12.5 req/s (reactive, tolerance 0); L = 180 + 30 + 60 + 15 s
            assert cells["observed"] == "12.50" and cells["planned"] == "12.50"
            assert cells["lead_seconds"] == "285 s" and cells["errors"] == "0"
            assert driver.find_element("id", "empty").is_displayed() is False
            # refreshed in place: a second ScaledObject shows up without a reload
            marker = driver.execute_script("window.__same_page = 1; return 1;")
            s.value(md, name="other")
            wait_for(driver, "document.getElementById('so:serving/other')", timeout=15, what="the second row")
            assert driver.execute_script("return window.__same_page;") == marker
            assert console_errors(driver) == []
    finally:
        s.close()


def test_two_triggers_of_one_scaledobject_are_two_rows_named_by_their_trigger(prometheus_factory):
    """Issue 27: each forescale trigger is its own workload; the page shows one row each, not one flipping."""
    from scaler.serve.registry import metadata_digest

    end = float(int(time.time()))
    t = pf.sample_times(end - 3600, end, 15.0)
    prom = prometheus_factory([pf.SeriesSpec("forescale_test_qps", {"job": "t"}, "gauge", t, [QPS] * len(t))])
    s = Scaler(FakeClock(end))
    try:
        base_md = {"serverAddress": prom.url, "query": "max(forescale_test_qps)", "mode": "reactive",
                   "hpaTolerance": "0"}
        mds = [{**base_md, "qpsPerReplica": "5", "metricName": "a"}, {**base_md, "qpsPerReplica": "2", "metricName": "b"}]
        for md in mds:
            assert s.value(md, name="pair").metricValueFloat == pytest.approx(QPS)
        with chromium() as driver:
            driver.get(base(s) + "/")
            for md in mds:
                trig = metadata_digest(md)[:8]
                row = wait_for(driver, f"document.getElementById('so:serving/pair/{trig}')", what="a trigger's row")
                cells = {td.get_attribute("data-col"): td.text for td in row.find_elements("css selector", "td")}
                assert cells["name"] == f"pair [{trig}]" and cells["planned"] == "12.50"
            assert console_errors(driver) == []
    finally:
        s.close()


# --------------------------------------------------------------------------
# `forescale serve` as a process: refusals exit 2 with one line, never a traceback


def serve(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "scaler.cli", "serve", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


def assert_refused(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    for n in needles:
        assert n in proc.stderr, (n, proc.stderr)


def test_busy_grpc_port_is_refused_even_when_its_holder_allows_port_reuse():
    # the holder sets SO_REUSEPORT, as a gRPC server does by default: without grpc.so_reuseport=0 the
    # second server would share the port and start
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    try:
        proc = serve("--host", "127.0.0.1", "--port", str(port), "--http-port", "0")
    finally:
        holder.close()
    assert_refused(proc, f"cannot listen on 127.0.0.1:{port} (gRPC", "Address already in use")


def test_unbindable_host_from_the_environment_is_refused():
    # 192.0.2.1 (TEST-NET-1) is no address of this machine: bind() fails, nothing is sent
    proc = serve("--port", "0", "--http-port", "0", env={"FORESCALE_HOST": "192.0.2.1"})
    assert_refused(proc, "cannot listen on 192.0.2.1:0", "Cannot assign requested address")


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def test_tls_files_are_validated_with_the_real_cause(tmp_path):
    for name in ("a", "b"):
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1",
                 "-subj", f"/CN={name}", "-keyout", f"{name}.key", "-out", f"{name}.crt", cwd=tmp_path)
    common = ("--host", "127.0.0.1", "--port", "0", "--http-port", "0")
    (tmp_path / "junk.key").write_text("not a key\n")
    # three separate processes, started side by side (each pays the interpreter's start-up)
    cert = ("--tls-cert", str(tmp_path / "a.crt"))
    with ThreadPoolExecutor(3) as ex:
        runs = [ex.submit(serve, *common, *cert, "--tls-key", str(tmp_path / "b.key")),
                ex.submit(serve, *common, *cert, "--tls-key", str(tmp_path / "junk.key")),
                ex.submit(serve, *common, env={"FORESCALE_TLS_CERT": str(tmp_path / "a.crt"),
                                               "FORESCALE_TLS_KEY": str(tmp_path / "missing.key")})]
        mismatched, not_pem, missing = (r.result() for r in runs)
    # a key that is not the certificate's
    assert_refused(mismatched, "the key does not match the certificate")
    # not PEM at all
    assert_refused(not_pem, "--tls-key", "no PEM private key")
    # a missing file, given through the environment
    assert_refused(missing, "--tls-key: cannot read", "No such file or directory")


def test_every_serve_flag_has_a_forescale_env_var():
    from scaler.cli import main

    for p in main.commands["serve"].params:
        if p.name == "help":
            continue
        assert p.envvar == "FORESCALE_" + p.name.upper(), (p.name, p.envvar)


def test_log_format_json_and_port_from_env(free_port):
    proc = subprocess.Popen([sys.executable, "-m", "scaler.cli", "serve", "--host", "127.0.0.1", "--http-port", "0"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "FORESCALE_PORT": str(free_port), "FORESCALE_LOG_FORMAT": "json"})
    try:
        deadline = time.monotonic() + 60
        lines = []
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            lines.append(line)
            if "serving gRPC" in line:
                break
        doc = json.loads(lines[-1])
        assert doc["level"] == "info" and doc["logger"] == "forescale"
        assert f"serving gRPC on 127.0.0.1:{free_port}" in doc["message"]
        assert doc["time"].endswith("Z")
    finally:
        stop(proc)
    assert proc.returncode == 0
    for line in proc.stderr.read().splitlines():
        json.loads(line)  # every line is JSON, the stop messages too


SCRAPE = """\
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
scrape_configs:
{jobs}
"""
# what the Prometheus Operator generates for a ServiceMonitor/PodMonitor: the target's namespace (here
# "forescale", the scaler's own) becomes a target label; honor_labels decides who wins on a clash
JOB = """\
  - job_name: {name}
    honor_labels: {honor}
    static_configs: [{{targets: ["127.0.0.1:{port}"]}}]
    relabel_configs:
      - {{target_label: namespace, replacement: forescale}}
      - {{target_label: pod, replacement: forescale-0}}
"""


def test_scrape_keeps_the_scaledobject_namespace_with_honor_labels(prometheus_factory, scaler):
    """A real Prometheus scrapes the scaler like the operator's ServiceMonitor does: with honorLabels
    (the chart's setting) the series keep namespace="serving"; without, it becomes exported_namespace."""
    m = scaler.server.metrics
    m.observed.labels("serving", "llm", "0123abcd").set(QPS)
    m.reason.labels("serving", "llm", "0123abcd", "fallback_fit_failed").set(1)
    end = float(int(time.time()))
    t = pf.sample_times(end - 120, end, 15.0)
    prom = prometheus_factory([pf.SeriesSpec("forescale_unused", {"job": "x"}, "gauge", t, [0.0] * len(t))],
                              extra_args=["--web.enable-lifecycle"])
    port = scaler.server.http_port
    jobs = JOB.format(name="honor", honor="true", port=port) + JOB.format(name="plain", honor="false", port=port)
    (prom.workdir / "prometheus.yml").write_text(SCRAPE.format(jobs=jobs))
    assert prom.session.post(f"{prom.url}/-/reload", timeout=10).status_code == 200
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(prom.query("forescale_observed_qps")) < 2:
        time.sleep(0.25)
    got = {r["metric"]["job"]: r["metric"] for r in prom.query("forescale_observed_qps")}
    assert got["honor"]["namespace"] == "serving" and "exported_namespace" not in got["honor"]
    assert got["plain"]["namespace"] == "forescale" and got["plain"]["exported_namespace"] == "serving"
    # the shipped alert's grouping finds the ScaledObject only on the honored scrape
    stuck = prom.query('max by (namespace, scaledobject, reason) '
                       '(forescale_decision_reason{job="honor",reason=~"fallback_.*"}) == 1')
    assert [r["metric"] for r in stuck] == [{"namespace": "serving", "scaledobject": "llm",
                                             "reason": "fallback_fit_failed"}]
    # process metrics (no namespace of their own) keep the target's
    (proc,) = prom.query('process_resident_memory_bytes{job="honor"}')
    assert proc["metric"]["namespace"] == "forescale" and float(proc["value"][1]) > 20e6


def test_a_bearer_token_guards_every_path_but_healthz_and_queries_can_be_hidden(prometheus_factory, tmp_path):
    """Issue 40, item 13: /status.json quoted failing triggers' PromQL and listed every namespace/name to anyone on
    the port. With --http-token-file every path but /healthz wants the token (401 otherwise, re-read when the file
    changes); with --http-hide-queries no message shows the PromQL."""
    import urllib.error

    token = tmp_path / "token"
    token.write_text("s3cret-token-0123456789\n")
    now = time.time()
    t = pf.sample_times(now - 600, now)
    prom = prometheus_factory([pf.SeriesSpec("other", {"job": "x"}, "counter", t, pf.counter_from_rate(t, 1.0))])
    s = Scaler(FakeClock(now), server={"http_token_file": str(token), "http_hide_queries": True})
    base = f"http://127.0.0.1:{s.server.http_port}"
    query = 'sum(rate(secret_metric_total{team="payments"}[2m]))'  # no such series: NO_DATA quotes the query
    md = {"serverAddress": prom.url, "query": query, "qpsPerReplica": "1", "mode": "reactive",
          "ignoreNullValues": "false"}

    def get(path, tok=None):
        req = urllib.request.Request(base + path, headers={"Authorization": f"Bearer {tok}"} if tok else {})
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
    try:
        with pytest.raises(Exception):
            s.value(md, name="failing")  # FAILED_PRECONDITION: "query returned no series ...: <the query>"
        assert query in str(s.server.registry.workloads()[0].error)  # the message does quote it
        assert get("/healthz") == (200, "ok\n")  # kubelet's probe needs no token
        for path in ("/metrics", "/status.json", "/", "/api/scaledobjects/serving/failing/decisions"):
            code, body = get(path)
            assert code == 401 and "bearer token" in body and "failing" not in body, path
            assert get(path, "wrong")[0] == 401
        code, body = get("/status.json", "s3cret-token-0123456789")
        assert code == 200 and "serving" in body and "no series" in body and "query hidden" in body
        assert "secret_metric_total" not in body and "payments" not in body
        code, body = get("/api/scaledobjects/serving/failing/decisions", "s3cret-token-0123456789")
        assert code == 200 and "secret_metric_total" not in body
        token.write_text("rotated-token-9876543210\n")
        os.utime(token, ns=(1, 1))
        assert get("/metrics", "s3cret-token-0123456789")[0] == 401 and get("/metrics", "rotated-token-9876543210")[0] == 200
    finally:
        s.close()
