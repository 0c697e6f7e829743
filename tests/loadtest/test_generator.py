"""The generator against real HTTP servers on loopback: open loop, closed loop, and what it cannot do."""

from __future__ import annotations

import asyncio
import json
import random
import socket

import pytest
from click.testing import CliRunner

from scaler.cli import main
from scaler.loadtest import stats
from scaler.loadtest.generator import Generator, Target
from scaler.loadtest.workload import template


def loadtest(*args: str):
    return CliRunner().invoke(main, ["loadtest", *args, "--no-progress"], catch_exceptions=False)


def run_open(url: str, rate: float, duration: float, **kw) -> list:
    async def go():
        async with Generator(Target(url + "/v1/completions", template("hi {n}", 4), **kw)) as g:
            return await g.open_loop([(rate, duration)], random.Random(1))
    return asyncio.run(go())


def run_closed(url: str, workers: int, duration: float) -> list:
    async def go():
        async with Generator(Target(url + "/v1/completions", template("hi", 4))) as g:
            return await g.closed_loop(workers, duration)
    return asyncio.run(go())


def test_open_loop_keeps_offering_while_a_slow_server_falls_behind(fake_server):
    # one request at a time, 50 ms each: the server serves at most 20 req/s; we offer 30 req/s for 3 s
    srv = fake_server(delay=0.05, serial=True)
    recs = run_open(srv.url, 30.0, 3.0)
    s = stats.summarize(recs, target=30.0, duration=3.0, slo=0.5, q=95, max_lag=0.05)
    assert s["requests"] == 90 and s["ok"] == 90
    assert s["offered_rps"] == pytest.approx(30.0, rel=0.05)  # the schedule holds whatever the server does
    assert not s["generator_limited"]
    # the server's own clock agrees: 90 arrivals within the 3 s window (plus scheduling slack)
    assert srv.arrivals[-1] - srv.arrivals[0] < 3.0 + 0.2
    # the backlog grows by ~10 req/s: the last requests wait ~1.5 s (30 queued x 50 ms), the first ones do not
    by_time = sorted(recs, key=lambda r: r.scheduled)
    first = stats.percentile([r.latency for r in by_time[:15]], 50)
    last = stats.percentile([r.latency for r in by_time[-15:]], 50)
    assert first < 0.4 and last > 0.9 and last > 3 * first
    # ~1 s/s of lateness: achieved is what the server does (20 req/s over the ~4.5 s it takes)
    assert s["achieved_rps"] == pytest.approx(20.0, rel=0.15)


def test_closed_loop_hides_the_same_overload(fake_server):
    # the same server with one closed-loop worker: the client waits, so it never offers more than 20 req/s
    srv = fake_server(delay=0.05, serial=True)
    recs = run_closed(srv.url, 1, 1.5)
    s = stats.summarize(recs, target=None, duration=1.5, slo=0.5, q=95, max_lag=0.05, mode="closed", concurrency=1)
    assert s["achieved_rps"] == pytest.approx(20.0, rel=0.2) and s["offered_rps"] <= 21.0
    assert s["p95_s"] < 0.15  # latency looks fine: coordinated omission


def test_a_rate_the_generator_cannot_offer_is_detected(fake_server, tmp_path):
    srv = fake_server()
    out = tmp_path / "lt.json"
    r = loadtest(srv.url, "--rates", "5000", "--duration", "0.4s", "--max-connections", "32", "--slo", "1s",
                 "--json", str(out))
    assert r.exit_code == 2, r.output
    assert "generator could not offer 5e+03 req/s on this machine" in r.output
    assert "no step could be offered as asked" in r.output
    doc = json.loads(out.read_text())
    step = doc["steps"][0]
    assert step["generator_limited"] and doc["generator_limited"] and doc["recommended_qps_per_replica"] is None
    assert "all 32 connections in use" in step["limit_reason"]
    assert step["inflight_max"] > 32  # requests waiting for one of the 32 connections count as in flight


def test_unreachable_url(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    r = loadtest(f"http://127.0.0.1:{port}", "--rates", "1", "--duration", "1s")
    assert r.exit_code == 2
    assert f"http://127.0.0.1:{port}/v1/completions: cannot connect" in r.output and "accepted" in r.output
    assert "Traceback" not in r.output


@pytest.mark.parametrize("status", [404, 500, 503])
def test_non_2xx_answers(fake_server, status):
    srv = fake_server(status=status)
    r = loadtest(srv.url, "--rates", "1", "--duration", "1s")
    assert r.exit_code == 2
    assert f"answered HTTP {status} to a lone completion request" in r.output


@pytest.mark.parametrize("stream, needle", [("--stream", "no server-sent events"),
                                            ("--no-stream", "no JSON with choices")])
def test_an_answer_that_is_not_a_completion(fake_server, stream, needle):
    srv = fake_server(plain=True)
    r = loadtest(srv.url, "--rates", "1", "--duration", "1s", stream)
    assert r.exit_code == 2 and "the answer is not an OpenAI completion" in r.output and needle in r.output


def test_a_server_slower_than_the_timeout(fake_server):
    srv = fake_server(delay=0.5)
    r = loadtest(srv.url, "--rates", "1", "--duration", "1s", "--timeout", "0.2s")
    assert r.exit_code == 2 and "no answer within --timeout 0.2 s to a lone request" in r.output


def test_closed_loop_steps_from_the_command_line(fake_server, tmp_path):
    srv = fake_server(delay=0.05, serial=True)  # at most 20 req/s, whatever the workers
    out = tmp_path / "lt.json"
    r = loadtest(srv.url, "--concurrency", "2,1", "--duration", "1s", "--slo", "0.5s", "--json", str(out))
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert [s["concurrency"] for s in doc["steps"]] == [1, 2] and {s["mode"] for s in doc["steps"]} == {"closed"}
    for s in doc["steps"]:
        assert s["achieved_rps"] == pytest.approx(20.0, rel=0.25)  # the server's pace, not the workers'
    # 2 workers on a one-at-a-time server: each waits for the other, ~100 ms
    assert doc["steps"][1]["p50_s"] > 1.5 * doc["steps"][0]["p50_s"]
    assert doc["knee"]["step"] == 1 and doc["recommended_qps_per_replica"] == pytest.approx(
        doc["steps"][1]["achieved_rps"] * 0.8)


def test_no_stream_reads_json_answers(fake_server):
    srv = fake_server()
    r = loadtest(srv.url, "--rates", "2", "--duration", "1s", "--no-stream", "--slo", "1s")
    assert r.exit_code == 0, r.output
    assert "recommended qpsPerReplica: 1.6" in r.output  # 2 req/s x (1 - 0.2)


@pytest.mark.parametrize("content, needle", [
    ('{"prompt": "a"}\nnot json\n', "line 2: not JSON"),
    ('{"text": "a"}\n', 'line 1: no "prompt" string'),
    ('{"prompt": "a", "max_tokens": 0}\n', 'line 1: "max_tokens" 0 is not an integer >= 1'),
    ("[1, 2]\n", "line 1: a JSON list"),
    ("\n\n", "no prompts"),
    (b"\xff\xfe", "not UTF-8"),
])
def test_malformed_prompts_file(tmp_path, content, needle):
    p = tmp_path / "p.jsonl"
    p.write_bytes(content if isinstance(content, bytes) else content.encode())
    r = loadtest("http://127.0.0.1:9", "--prompts", str(p), "--rates", "1")
    assert r.exit_code == 2
    assert f"--prompts {p}" in r.output and needle in r.output


def test_prompts_file_is_cycled_with_its_own_lengths(fake_server, tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text('"short"\n{"prompt": "a longer prompt here", "max_tokens": 7, "temperature": 0}\n')
    srv = fake_server()
    out = tmp_path / "lt.json"
    r = loadtest(srv.url, "--prompts", str(p), "--rates", "4", "--duration", "1s", "--json", str(out))
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["workload"] == {"source": str(p), "prompts": 2, "prompt_chars_min": 5,
                                                       "prompt_chars_max": 20, "max_tokens": [7, 16]}


def test_an_slo_no_rate_meets_exits_2_with_the_lowest_rates_p95(fake_server, tmp_path):
    srv = fake_server(delay=0.1)  # every answer takes >= 100 ms
    out = tmp_path / "lt.json"
    r = loadtest(srv.url, "--rates", "4,2", "--duration", "1s", "--slo", "20ms", "--json", str(out))
    assert r.exit_code == 2
    doc = json.loads(out.read_text())  # written before exiting: the evidence
    assert [s["target_rps"] for s in doc["steps"]] == [2.0, 4.0]
    low = doc["steps"][0]
    assert low["p95_s"] >= 0.1 and not low["meets_slo"] and doc["recommended_qps_per_replica"] is None
    assert f"at the lowest, 2 req/s, p95 was {low['p95_s']:.3f} s" in r.output
    assert "accepted: a looser --slo" in r.output


@pytest.mark.parametrize("args, needle", [
    (["--rates", "1,x"], "accepted: numbers > 0"),
    (["--rates", "0"], "accepted: numbers > 0"),
    (["--rates", "1", "--ramp"], "choose one of"),
    (["--step", "0.6,1.2"], "--step needs --capacity-from"),
    (["--step", "0.6"], "two factors"),
    (["--capacity-from", "x.json"], "--capacity-from goes with --step"),
    (["--concurrency", "0"], "integers 1 to 10000"),
    (["--slo", "fast"], "is not a duration"),
    (["--percentile", "100"], "--percentile"),
])
def test_bad_flags(args, needle):
    r = loadtest("http://127.0.0.1:9", *args)
    assert r.exit_code == 2, r.output
    assert needle in r.output


def test_bad_url():
    r = loadtest("ftp://example", "--rates", "1")
    assert r.exit_code == 2 and "accepted: http(s)://HOST:PORT" in r.output


def test_json_plot_and_step_test(fake_server, tmp_path):
    srv = fake_server(delay=0.01)
    out, png = tmp_path / "lt.json", tmp_path / "lt.png"
    r = loadtest(srv.url, "--rates", "5,10", "--duration", "1s", "--slo", "0.5s", "--json", str(out),
                 "--plot", str(png))
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert doc["schema"] == "forescale.loadtest/v1" and len(doc["steps"]) == 2
    for step in doc["steps"]:
        assert {"offered_rps", "achieved_rps", "p50_s", "p95_s", "p99_s", "errors", "timeouts"} <= set(step)
        assert step["ttft_p50_s"] is not None and step["ttft_p50_s"] <= step["p50_s"]
    assert doc["capacity_rps"] == 10.0 and doc["recommendation_basis"] == "untested_above"
    assert doc["recommended_qps_per_replica"] == pytest.approx(8.0)  # 10 x (1 - 0.2)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the step test: 0.6 x 10 then 1.2 x 10 req/s, back to back, with a per-second timeline
    out2, png2 = tmp_path / "step.json", tmp_path / "step.png"
    r = loadtest(srv.url, "--step", "0.6,1.2", "--capacity-from", str(out), "--duration", "2s", "--json", str(out2),
                 "--plot", str(png2))
    assert r.exit_code == 0, r.output
    step = json.loads(out2.read_text())
    assert [s["target_rps"] for s in step["steps"]] == [6.0, 12.0]
    assert [s["capacity_factor"] for s in step["steps"]] == [0.6, 1.2]
    assert [s["requests"] for s in step["steps"]] == [12, 24]  # 6 req/s x 2 s, 12 req/s x 2 s
    assert len(step["timeline"]) == 4 and sum(w["arrivals"] for w in step["timeline"]) == 36
    assert png2.read_bytes()[:4] == b"\x89PNG"
