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
    # one request at a time, 50 ms each on the clock: the server serves at most 20 req/s; we offer 30 req/s for 3 s.
    # Time sets every figure below (the server's queue grows by 10 req/s, seconds by the end); the machine's load
    # only adds milliseconds of send lag and answer delivery, so no figure here rests on an idle CPU.
    srv = fake_server(delay=0.05, serial=True)
    recs = run_open(srv.url, 30.0, 3.0)
    s = stats.summarize(recs, target=30.0, duration=3.0, slo=0.5, q=95)
    assert s["requests"] == 90 and s["ok"] == 90 and len(srv.waits) == 90  # the schedule's 90 (30 req/s x 3 s)
    by_time = sorted(recs, key=lambda r: r.scheduled)
    # the schedule holds whatever the server does: no request leaves before its time, and none waits for an answer.
    # By the second half the server is >= 0.7 s behind (request k ends at ~0.05 k s, is due at ~k / 30 s), so a
    # generator that waited for the previous answer would send every one of them after it; this one sends each
    # before it
    assert all(r.sent >= r.scheduled for r in recs)
    late = by_time[45:]
    assert all(r.sent < prev.finished for prev, r in zip(by_time[44:], late)), [
        (round(prev.finished, 3), round(r.sent, 3)) for prev, r in zip(by_time[44:], late) if r.sent >= prev.finished]
    # what misses the SLO is the server's backlog, not the generator: with each request's send lag taken off
    # its latency the step still misses it (the summary would otherwise call the step generator-limited)
    assert not s["meets_slo"] and not stats.lag_excused(recs, 0.5, 95) and not s["generator_limited"]
    # the server's clock agrees: its queue grew as the requests kept arriving. Its first 15 requests queued for
    # ~0.1 s (at most 0.35 s however they bunch: the 8th to arrive has 7 ahead), its last 15 for ~1.45 s (by 3 s
    # the server has served at most 60 of the 90: 30 x 50 ms ahead of the last), less their send lag
    first_wait = stats.percentile(srv.waits[:15], 50)
    last_wait = stats.percentile(srv.waits[-15:], 50)
    assert last_wait > 3 * first_wait and last_wait > 0.9
    # and the generator's latencies include that queueing: each answer came after its request's wait and service
    # at the server (the same clock, CLOCK_MONOTONIC), so over all 90 the latencies add up to at least those
    assert sum(r.latency for r in recs) >= sum(srv.waits) + 90 * 0.05
    last = stats.percentile([r.latency for r in by_time[-15:]], 50)
    assert last > 0.9
    # achieved is what the server does: 90 answers, one per 50 ms, the last ~4.5 s after the first arrival
    assert s["achieved_rps"] <= 20.0 + 1e-9 and s["achieved_rps"] == pytest.approx(20.0, rel=0.15)


def test_closed_loop_hides_the_same_overload(fake_server):
    # the same server with one closed-loop worker: the client waits for each answer, so it never offers more than
    # the server's 20 req/s, and the server never has a queue
    srv = fake_server(delay=0.05, serial=True)
    recs = run_closed(srv.url, 1, 1.5)
    s = stats.summarize(recs, target=None, duration=1.5, slo=0.5, q=95, mode="closed", concurrency=1)
    assert s["ok"] == s["requests"] == len(srv.waits) > 0
    assert s["offered_rps"] <= 21.0 and s["achieved_rps"] <= 20.0 + 1e-9  # at most 1.5 s / 50 ms + 1 requests
    assert srv.waits == [0.0] * len(srv.waits)  # each request arrived after the one before was answered
    # latency looks fine, a service time: the step meets the SLO that the open loop at this server missed
    # (coordinated omission)
    assert s["meets_slo"] and s["p95_s"] >= 0.05


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
    # each request: 100 ms on its way, in parallel with the others, then 100 ms of one-at-a-time service, both on
    # the clock. One worker waits 200 ms a request: at most 5 req/s, the server idle half the time; three workers
    # ask for 3 / 0.2 = 15 req/s of a server that serves at most 1 / 0.1 = 10: they queue, ~100 ms each (3 x 100 ms
    # of service per 300 ms cycle). The machine's own delay per request (milliseconds, tens when it is busy) changes
    # none of the verdicts below: they hold unless it averages above 100 ms a request
    srv = fake_server(delay=0.1, latency=0.1, serial=True)
    out = tmp_path / "lt.json"
    r = loadtest(srv.url, "--concurrency", "3,1", "--duration", "2s", "--slo", "1s", "--json", str(out))
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    steps = doc["steps"]
    assert [s["concurrency"] for s in steps] == [1, 3] and {s["mode"] for s in steps} == {"closed"}
    assert all(s["ok"] == s["requests"] > 0 for s in steps)
    # the server saw it: after the 3 preflight requests, the lone worker's requests never queued (each reached
    # the queue after the one before was answered: exactly 0), the three workers' did (most, ~100 ms)
    assert len(srv.waits) == 3 + steps[0]["requests"] + steps[1]["requests"]
    one, three = srv.waits[3:3 + steps[0]["requests"]], srv.waits[3 + steps[0]["requests"]:]
    assert one == [0.0] * len(one) and stats.percentile(three, 50) > 0.0
    # and the load test's latencies include it: each holds its 100 ms on the way, its wait and its 100 ms of
    # service, so their median holds the waits' median
    assert steps[1]["p50_s"] >= 0.2 + stats.percentile(three, 50) and steps[0]["p50_s"] >= 0.2
    # achieved rates on the clock: the lone worker's k-th answer comes >= 0.2 k s after the step's start (at most
    # 5 req/s), the server's k-th >= 0.1 k s (at most 10 req/s, whatever the workers: three ask for 15)
    assert steps[0]["achieved_rps"] <= 5.0 + 1e-9 and steps[1]["achieved_rps"] <= 10.0 + 1e-9
    # three workers keep the server busy: they reach its pace, twice the lone worker's (~9.5 req/s: 21 answers by
    # 2.2 s; at least 7.5 = 3 / (0.2 + 0.2) unless each request lost more than 200 ms to the machine)
    assert steps[1]["achieved_rps"] > steps[0]["achieved_rps"]
    assert steps[1]["achieved_rps"] == pytest.approx(10.0, rel=0.25)
    # the knee: both meet the 1 s SLO (~0.2 and ~0.3 s), so it is the step of the higher achieved rate, three
    # workers; the recommendation is 80 % of it
    assert all(s["meets_slo"] for s in steps)
    assert doc["knee"]["step"] == 1 and doc["recommended_qps_per_replica"] == pytest.approx(
        steps[1]["achieved_rps"] * 0.8)


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
