"""End to end on CPU: `forescale probe --serve` with the built-in model, then `forescale loadtest` against it.

The probe runs as its own process (real HTTP over loopback, real torch generating tokens), configured
as a server with admission control: batches of up to 8 requests, a queue of 8 (beyond it: 503). What
keeps the figures steady on a small machine shared with other work: one intra-op thread
(OMP_NUM_THREADS=1: a tiny model gains nothing from two and loses much when the cores are busy) and a
150 ms pause per batch step (the probe's hidden testing aid: device time that costs no CPU), so time,
not the contended CPU, sets the capacity: 2 tokens take ~0.35 s and one replica serves ~24 req/s.
Measured with 0, 2 and 4 busy loops beside it on 2 cores, the capacity found was 26, 22 and 22 req/s;
with a 50 ms pause and 4 tokens (the CPU's share of a step three times larger) it fell from 32 to 16,
and a recommendation found by the ramp failed its 30 s replay when the machine's load changed between
the two. Beyond the capacity the queue overflows and answers 503s, a sharp knee; the SLO (1 s) is
above the slowest admitted request (~4 steps: one request's turn in the queue, then its own two), so
only those 503s miss it. The SLO is the 90th percentile, so one or two requests delayed by the
machine's scheduler do not decide a step of ~100.
"""

from __future__ import annotations

import json
import os
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
from support.procs import announced_url, stop

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent.parent
COMMON = ["--slo", "1s", "--percentile", "90", "--max-tokens", "2", "--no-progress"]


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.fixture(scope="module")
def probe_url(tmp_path_factory):
    cache = tmp_path_factory.mktemp("lt-probe-cache")
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-m", "scaler.cli", "probe", "--model-size", "1M",
                             "--cache-dir", str(cache),
                             "--steady-requests", "3", "--shallow-requests", "1", "--shallow-tokens", "64",
                             "--request-tokens", "32", "--max-input-tokens", "256", "--no-raw-read", "-q",
                             "--serve", "0", "--host", "127.0.0.1", "--max-batch", "8", "--max-queue", "8",
                             "--test-step-delay", "0.15"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        url, lines = announced_url(proc)
        assert url is not None, "the probe never announced its address: " + "".join(lines)
        deadline = time.monotonic() + 90
        while get(url + "/report")[0] != 200:  # ready, and the after-readiness timing finished
            assert time.monotonic() < deadline and proc.poll() is None, "".join(lines)
            time.sleep(0.2)
        yield url
    finally:
        stop(proc)


def loadtest(*args: str):
    return CliRunner().invoke(main, ["loadtest", *args], catch_exceptions=False)


def test_loadtest_finds_a_rate_that_holds_and_one_that_does_not(probe_url, tmp_path):
    out = tmp_path / "lt.json"
    r = loadtest(probe_url, "--ramp", "--start-rate", "8", "--ramp-factor", "2", "--refine", "3",
                 "--duration", "3s", "--json", str(out), *COMMON)
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    steps = doc["steps"]
    assert doc["schema"] == "forescale.loadtest/v1" and doc["url"] == probe_url + "/v1/completions"
    assert len(steps) == r.output.count("loadtest: ") >= 3  # every step run is in the JSON
    for s in steps:
        assert {"offered_rps", "achieved_rps", "p50_s", "p95_s", "p99_s", "errors", "timeouts"} <= set(s)
        assert s["offered_rps"] == pytest.approx(s["target_rps"], rel=0.05)
        assert s["ttft_p50_s"] is not None and s["ttft_p50_s"] < s["p50_s"]  # streamed: first token before the last
    assert doc["recommendation_basis"] == "slo"  # a higher rate broke the SLO
    rec = doc["recommended_qps_per_replica"]
    assert rec == pytest.approx(doc["capacity_rps"] * 0.8)
    assert 8 < rec < 40  # ~24 req/s per replica x 0.8, with the machine's noise

    # replayed for 30 s (the check): the recommended rate meets the SLO, 50 % more does not
    again = tmp_path / "again.json"
    r = loadtest(probe_url, "--rates", f"{rec:.4f},{rec * 1.5:.4f}", "--duration", "30s", "--json", str(again),
                 *COMMON)
    assert r.exit_code == 0, r.output
    at_rec, above = json.loads(again.read_text())["steps"]
    assert at_rec["meets_slo"] and not at_rec["generator_limited"], at_rec
    assert not above["meets_slo"] and not above["generator_limited"], above
    assert above["within_slo"] < at_rec["within_slo"]

    # the step test on one replica: 60 % of the capacity, then at once 120 %
    step = tmp_path / "step.json"
    r = loadtest(probe_url, "--step", "0.6,1.2", "--capacity-from", str(out), "--duration", "3s", "--json", str(step),
                 *COMMON)
    assert r.exit_code == 0, r.output
    sdoc = json.loads(step.read_text())
    low, high = sdoc["steps"]
    assert low["target_rps"] == pytest.approx(0.6 * doc["capacity_rps"])
    assert high["target_rps"] == pytest.approx(1.2 * doc["capacity_rps"])
    assert low["meets_slo"] and high["within_slo"] < low["within_slo"]
    assert len(sdoc["timeline"]) == 6
    assert sum(w["arrivals"] for w in sdoc["timeline"]) == low["requests"] + high["requests"]

    # the server counted what the client sent: every ok answer is a 200 in its histogram
    families = {f.name: f for f in text_string_to_metric_families(get(probe_url + "/metrics")[1])}
    ok = sum(s.value for s in families["forescale_requests"].samples
             if s.name == "forescale_requests_total" and s.labels["code"] == "200")
    sent_ok = sum(s["ok"] for s in steps) + at_rec["ok"] + above["ok"] + low["ok"] + high["ok"]
    assert ok >= sent_ok  # plus the preflight requests and the settling ones
    count = next(s.value for s in families["forescale_request_duration_seconds"].samples
                 if s.name.endswith("_count"))
    assert count == ok
