"""``forescale backtest --tokens-per-replica``: a trace with shape on the command line, its JSON, bad input."""

from __future__ import annotations

import json

import pytest

from support.backtest import AZURE as BUNDLED, AZURE_ARGS as ARGS, backtest as invoke


def test_the_binding_load_costs_more_replicas_than_requests_alone_on_the_azure_trace(tmp_path):
    runs = {}
    for on in ("binding", "requests"):
        out = tmp_path / f"{on}.json"
        r = invoke(str(BUNDLED), *ARGS, "--tokens-per-replica", "100", "--input-token-weight", "0.02",
                   "--scale-on", on, "--json", str(out))
        assert r.exit_code == 0, r.output
        runs[on] = json.loads(out.read_text())
    tok = runs["binding"]["settings"]["tokens"]
    assert tok == {"tokens_per_replica": 100.0, "input_token_weight": 0.02, "scaled_on": "binding"}
    assert runs["requests"]["settings"]["tokens"]["scaled_on"] == "requests"
    # the code trace averages 2,048 prompt and 27.9 generated tokens per request: 0.02 x 2048 + 27.9 = 68.9
    # weighted tokens; at 2 req/s per replica a request may use 100 / 2 = 50 of them, so the tokens bind where a
    # 10 s interval's mix is heavier than that: 38.1 % of the simulated intervals (the note). The req/s-only
    # reactive policy runs fewer replicas and misses more of the same judged load (figures of this replay:
    # deterministic, reactive has no model)
    aware, blind = (runs[k]["policies"]["reactive"] for k in ("binding", "requests"))
    assert aware["replica_hours"] > blind["replica_hours"]
    assert aware["underprovisioned_fraction"] == pytest.approx(0.27022, abs=5e-5)
    assert blind["underprovisioned_fraction"] == pytest.approx(0.36161, abs=5e-5)
    assert any("the tokens bind in 38.1 %" in n for n in runs["binding"]["notes"])


def test_token_options_without_a_budget_are_refused():
    r = invoke(str(BUNDLED), *ARGS, "--scale-on", "requests")
    assert r.exit_code == 2 and "need --tokens-per-replica" in r.output
    r = invoke(str(BUNDLED), *ARGS, "--tokens-per-replica", "0")
    assert r.exit_code == 2 and "--tokens-per-replica" in r.output
