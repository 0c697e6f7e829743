"""``forescale loadtest --grid-input ... --grid-output ...`` against an LLM server whose capacity the clock sets
(``FakeServer(tokens=(a, p, d))``: one request at a time, ``a + p x prompt + d x answer`` seconds each, every token
streamed at its time): TTFT and ITL per step, the knees per grid point, the capacity model file."""

from __future__ import annotations

import asyncio
import json
import random

import pytest
from click.testing import CliRunner

from scaler.capacity import read
from scaler.cli import main
from scaler.loadtest import stats
from scaler.loadtest.generator import Generator, Target
from scaler.loadtest.workload import shaped

# a = 8 ms per request, p = 0.5 ms per prompt token, d = 4 ms per answer token: the service time of a point is
#   (8, 2): 0.008 + 0.004 + 0.008 = 0.02 s (50 req/s)     (8, 22): 0.008 + 0.004 + 0.088 = 0.1 s (10 req/s)
#   (768, 2): 0.008 + 0.384 + 0.008 = 0.4 s (2.5 req/s)   (768, 22): 0.008 + 0.384 + 0.088 = 0.48 s (2.08 req/s)
# and the clock's model is min(1 / a, (1 / d) / ((p / d) x prompt + answer)) = min(125, 250 / (0.125 i + o))
COSTS = (0.008, 0.0005, 0.004)
CLOCK_CAPACITY = {(8, 2): 50.0, (8, 22): 10.0, (768, 2): 2.5, (768, 22): 1 / 0.48}


def loadtest(*args: str):
    return CliRunner().invoke(main, ["loadtest", *args, "--no-progress"], catch_exceptions=False)


def test_the_generator_measures_ttft_itl_and_the_servers_token_counts(fake_server):
    # 6 requests of 40 prompt words and 5 answer tokens at 3 req/s: each answer streams 5 token events and a
    # usage chunk, so each record has 4 gaps, the server's counts (40, 5), and a first token no earlier than the
    # clock allows: 8 + 40 x 0.5 + 4 = 32 ms after it reached the server (its scheduled time is earlier still)
    srv = fake_server(tokens=COSTS)

    async def go():
        async with Generator(Target(srv.url + "/v1/completions", shaped(40, 5))) as g:
            return await g.open_loop([(3.0, 2.0)], random.Random(1))

    recs = asyncio.run(go())
    assert len(recs) == 6 and all(r.status == "ok" for r in recs)
    assert [(r.prompt_tokens, r.output_tokens, len(r.gaps)) for r in recs] == [(40, 5, 4)] * 6
    assert srv.served == [(40, 5)] * 6  # "{n} hello hello ...": the request number and 39 fillers
    assert all(r.ttft >= 0.032 for r in recs)
    s = stats.summarize(recs, target=3.0, duration=2.0, slo=None, q=95, slo_ttft=5.0, slo_itl=5.0)
    assert (s["prompt_tokens_mean"], s["output_tokens_mean"]) == (40.0, 5.0)
    assert s["itl_p50_s"] is not None and s["ttft_p95_s"] is not None and s["meets_slo"]
    # an ITL objective below what any gap can be (0 s) fails the step, whatever the TTFT
    assert not stats.summarize(recs, target=3.0, duration=2.0, slo=None, q=95, slo_itl=0.0)["meets_slo"]


def test_the_grid_finds_each_points_knee_and_writes_the_capacity_model(fake_server, tmp_path):
    # the ramp 1, 5, 25 req/s (x5; 125 is past --max-rate), 2 s a step, held to TTFT p95 <= 1.5 s. A rate at
    # least twice a point's capacity (25 at 10 req/s, 5 at 2.5 and 2.08) piles up a queue the clock sets: half of
    # the step's requests wait over 1.5 s, so it misses the SLO however fast the machine; at half the capacity
    # or less the first tokens come within ~0.8 s. So the knees are 25 (8, 2), 5 (8, 22), 1 (768, *)
    srv = fake_server(tokens=COSTS)
    out, cap = tmp_path / "lt.json", tmp_path / "capacity.json"
    r = loadtest(srv.url, "--grid-input", "768,8", "--grid-output", "2,22", "--slo-ttft", "1.5s", "--slo-itl", "1s",
                 "--hardware", "fake 2-core CPU", "--duration", "2s", "--start-rate", "1", "--ramp-factor", "5",
                 "--refine", "0", "--max-rate", "30", "--margin", "0.2", "--json", str(out), "--capacity-model",
                 str(cap))
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    points = {(p["input_tokens_requested"], p["output_tokens_requested"]): p for p in doc["grid"]["points"]}
    assert sorted(points) == [(8, 2), (8, 22), (768, 2), (768, 22)]
    # the lengths are the server's own counts (usage), the same on every answered request
    assert all((p["input_tokens"], p["output_tokens"]) == k for k, p in points.items())
    knees = {k: p["capacity_rps"] for k, p in points.items()}
    assert all(knees[k] <= CLOCK_CAPACITY[k] for k in knees), knees  # no rate above the clock's capacity passes
    assert knees == {(8, 2): 25.0, (8, 22): 5.0, (768, 2): 1.0, (768, 22): 1.0}
    steps = [s for s in doc["steps"] if (s["input_tokens"], s["output_tokens"]) == (8, 22)]
    assert [s["target_rps"] for s in steps] == [1.0, 5.0, 25.0] and not steps[-1]["meets_slo"]
    assert steps[-1]["ttft_p95_s"] > 1.5 and steps[-1]["itl_p50_s"] is not None
    # the capacity model: fitted on the four knees, read back, naming the model (GET /v1/models) and the hardware
    m = read(cap)
    assert (m.model, m.hardware, m.margin) == ("fake-llm", "fake 2-core CPU", 0.2)
    got = m.capacity_rps([k[0] for k in knees], [k[1] for k in knees], margin=False)[0]
    errors = [abs(g / knees[k] - 1) for g, k in zip(got, knees)]
    assert max(errors) == pytest.approx(m.fit.max_error, rel=1e-9)  # the stated error is the worst point's
    assert float(m.capacity_rps(768, 22)[0]) <= float(m.capacity_rps(8, 22)[0]) <= float(m.capacity_rps(8, 2)[0])
    assert doc["recommended_qps_per_replica"] == pytest.approx(m.qps_per_replica)
    assert "capacity model (fake-llm on fake 2-core CPU): min(" in r.output and "fit error" in r.output


@pytest.mark.parametrize("args, needle", [
    (["--grid-input", "128"], "--grid-input and --grid-output go together"),
    (["--grid-input", "128,1024", "--grid-output", "64", "--hardware", "x"], "accepted: --slo-ttft and/or --slo-itl"),
    (["--grid-input", "128,1024", "--grid-output", "64", "--slo-ttft", "1s"], "accepted: --hardware TEXT"),
    (["--grid-input", "128,0", "--grid-output", "64"], "accepted: token counts 1 to 1000000"),
    (["--grid-input", "128", "--grid-output", "64", "--slo-ttft", "1s", "--hardware", "x", "--concurrency", "2"],
     "accepted with --rates or --ramp, not --concurrency"),
    (["--grid-input", "128", "--grid-output", "64", "--slo-ttft", "1s", "--hardware", "x", "--no-stream"],
     "accepted: --stream"),
    (["--capacity-model", "c.json"], "--capacity-model goes with --grid-input and --grid-output"),
])
def test_grid_options_are_checked_together(args, needle, tmp_path):
    r = loadtest("http://127.0.0.1:9", *args)
    assert r.exit_code == 2 and needle in r.output and "Traceback" not in r.output


def test_a_grid_that_meets_its_slo_nowhere_writes_its_steps_and_says_why(fake_server, tmp_path):
    # a TTFT objective of 1 ms: the clock alone puts every first token >= 8 + 4 = 12 ms after its request
    srv = fake_server(tokens=COSTS)
    out = tmp_path / "lt.json"
    r = loadtest(srv.url, "--grid-input", "8,16", "--grid-output", "2,3", "--slo-ttft", "1ms", "--hardware", "x",
                 "--rates", "2", "--duration", "1s", "--json", str(out), "--model", "named-by-hand")
    assert r.exit_code == 2
    assert "no capacity model" in r.output and "no tested rate met the SLO at (8, 2), (8, 3), (16, 2), (16, 3)" in \
        r.output
    doc = json.loads(out.read_text())
    assert doc["grid"]["capacity_model"] is None and all(p["capacity_rps"] is None for p in doc["grid"]["points"])


def test_a_model_over_its_knee_by_more_than_the_margin_is_warned_of():
    from scaler.cli.loadgrid import overestimate

    # margin 0.2: the recommendation is 0.8 x the fit. A point the fit over-estimates by 20 % is at 0.96 of its knee
    # (covered); by 30 %, at 1.04: the scaler would plan 4 % too few replicas for that mix
    doc = {"margin": 0.2, "points": [{"input_tokens": 64, "output_tokens": 8, "error": -0.1},
                                     {"input_tokens": 1024, "output_tokens": 32, "error": 0.2}]}
    assert overestimate(doc) is None
    doc["points"][1]["error"] = 0.3
    assert overestimate(doc).startswith("the model over-estimates the (1024, 32) point by 30.0 %, more than the "
                                        "margin 0.2 covers")
