"""A trace with shape through the replay: judged on the binding load of requests and tokens (``replay.tokenload``)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pytest

from scaler.cli.traces import load_csv
from scaler.replay import engine, variants
from scaler.replay.settings import ReplayError
from scaler.tokens import TokenCapacity

BUNDLED = Path(__file__).resolve().parents[2] / "scaler" / "data" / "azure_llm_code" / "per_10s.csv"


def shifted_trace(path: Path) -> Path:
    """4 h at 1 min: 10 req/s flat; 1000 generated tokens/s for 2 h, then 2000 (the output length doubles)."""
    t0 = dt.datetime(2026, 1, 5)
    rows = ["timestamp,count,input_tokens,output_tokens"]
    for i in range(240):
        rows.append(f"{(t0 + dt.timedelta(minutes=i)).isoformat()},600,6000,{60000 if i < 120 else 120000}")
    path.write_text("\n".join(rows) + "\n")
    return path


def replay(trace, aware: bool):
    s = engine.Settings(cold_start_seconds=60, qps_per_replica=5, policies=("reactive",), span_seconds=3 * 3600,
                        history_seconds=3600, tokens=TokenCapacity(250.0, input_weight=0.0), token_aware=aware)
    return engine.run(trace, s, variants.defaults(s), accuracy=False)


def test_the_token_columns_are_read_as_tokens_per_second_on_the_requests_grid(tmp_path):
    tr = load_csv(shifted_trace(tmp_path / "t.csv"))
    # 6000 input tokens per minute = 100/s; 60000 and 120000 output tokens per minute = 1000/s and 2000/s
    assert tr.has_tokens and np.array_equal(tr.input_tokens, np.full(240, 100.0))
    assert tr.output_tokens[0] == 1000.0 and tr.output_tokens[-1] == 2000.0 and tr.series.y[0] == 10.0


def test_the_bundled_token_trace_holds_the_azure_requests_and_their_tokens():
    tr = load_csv(BUNDLED)
    # 344 intervals of 10 s; the sums of the 8,819 requests of the Azure code trace (its attribution file beside it)
    assert (len(tr.series), tr.series.step) == (344, 10.0)
    assert round(tr.series.y.sum() * 10) == 8819
    assert round(tr.input_tokens.sum() * 10) == 18_059_974 and round(tr.output_tokens.sum() * 10) == 245_896
    assert (BUNDLED.parent / "LICENSE_AND_ATTRIBUTION.txt").read_text().startswith("Azure LLM inference trace")


def test_the_replay_judges_the_binding_load_and_a_requests_only_policy_misses_the_shift(tmp_path):
    tr = load_csv(shifted_trace(tmp_path / "t.csv"))
    aware, blind = replay(tr, True), replay(tr, False)
    # qps 5 per replica, 250 weighted tokens/s per replica, input weight 0: 1000 tokens/s x 5/250 = 20 req/s-eq,
    # 2000 -> 40; the 10 req/s need only 2 replicas, so the tokens bind everywhere: demand 20 for 1 h, then 40 for 2 h
    for r in (aware, blind):
        d = r.scenario.demand
        assert np.unique(d).tolist() == [20.0, 40.0] and (d == 20.0).sum() == 240 and (d == 40.0).sum() == 480
    # the req/s-only scaler sees 10 req/s: 2 replicas x 5 = 10 served of 20, then of 40
    #   missed = (10 x 3600 + 30 x 7200) / (20 x 3600 + 40 x 7200) = 252,000 / 360,000 = 0.7; 2 replicas x 3 h = 6
    b = blind.policies["reactive"].outcome
    assert np.unique(blind.scenario.observed).tolist() == [10.0]
    assert b.underprovisioned_fraction == pytest.approx(0.7, abs=1e-12) and b.replica_hours == pytest.approx(6.0)
    # token-aware: 4 replicas, then 8 after the shift; only the step itself (the 2-min rate window, a 60 s cold
    # start, KEDA's 30 s polls) misses: under 1 % of 360,000, and about 4 x 1 h + 8 x 2 h = 20 replica-hours
    a = aware.policies["reactive"].outcome
    assert a.underprovisioned_fraction < 0.01 and a.peak_replicas == 8
    assert a.replica_hours == pytest.approx(20.0, abs=0.5)
    assert "the tokens bind in 100.0 %" in aware.notes[-1]


def test_a_token_capacity_on_a_trace_without_tokens_is_refused(tmp_path):
    p = tmp_path / "plain.csv"
    p.write_text("timestamp,count\n" + "".join(f"2026-01-05T{h:02d}:{m:02d}:00,600\n"
                                               for h in range(4) for m in range(60)))
    with pytest.raises(ReplayError, match="no 'input_tokens' and 'output_tokens' columns"):
        replay(load_csv(p), True)


def test_one_token_column_alone_and_a_request_rate_as_tokens_are_refused(tmp_path):
    p = tmp_path / "one.csv"
    p.write_text("timestamp,count,output_tokens\n2026-01-05T00:00:00,6,60\n2026-01-05T00:01:00,6,60\n"
                 "2026-01-05T00:02:00,6,60\n")
    with pytest.raises(ReplayError, match="'output_tokens' column without 'input_tokens'"):
        load_csv(p)
    q = tmp_path / "unit.csv"  # 3 "output tokens" for 6 requests per minute: 0.5 per request, a request rate
    q.write_text("timestamp,count,input_tokens,output_tokens\n" + "".join(
        f"2026-01-05T00:0{m}:00,6,0,3\n" for m in range(4)))
    with pytest.raises(ReplayError, match="0.5 tokens per request on average"):
        load_csv(q)


def test_a_scaledobject_trigger_on_tokens_is_refused_not_replayed_on_requests_alone():
    from scaler.replay.manifest import plans
    from scaler.replay.manifestfields import ManifestError

    doc = {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "t"},
           "spec": {"scaleTargetRef": {"name": "d"}, "triggers": [{"type": "external", "metadata": {
               "scalerAddress": "forescale:9090", "serverAddress": "http://p:9090", "query": "q",
               "qpsPerReplica": "2", "tokenQuery": "t", "tokensPerReplica": "100"}}]}}
    with pytest.raises(ManifestError, match=r"tokenQuery: a trigger on tokens is not replayed"):
        plans([("test", doc)])
