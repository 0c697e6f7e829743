"""``scaler.tokens``: the capacity model's token budget, the binding load and the unit check, worked by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from scaler.tokens import TokenCapacity, binding_load, unit_refusal


def test_weighted_tokens_are_the_prefill_weight_times_input_plus_output():
    # 0.1 x 1000 prompt tokens/s + 50 generated tokens/s = 150 weighted tokens/s
    cap = TokenCapacity(400.0, input_weight=0.1)
    assert cap.weighted(np.array([1000.0, 0.0]), np.array([50.0, 80.0])).tolist() == pytest.approx([150.0, 80.0])


@pytest.mark.parametrize("tpr,w,word", [(0.0, 1.0, "tokens per replica"), (math.nan, 1.0, "tokens per replica"),
                                        (100.0, -1.0, "input token weight"), (100.0, math.inf, "input token weight")])
def test_a_bad_capacity_is_refused_naming_what_is_accepted(tpr, w, word):
    with pytest.raises(ValueError, match=word) as e:
        TokenCapacity(tpr, w)
    assert "accepted" in str(e.value)


def test_the_binding_load_is_the_larger_need_in_the_targets_unit():
    # qps 2 per replica, 400 tokens/s per replica: tokens count 2/400 = 0.005 req/s-equivalents each
    #   [1000, 3000, 500, NaN] tokens/s -> [5, 15, 2.5, NaN] equivalents
    #   requests [10, 10, NaN, 4]: load = [max(10, 5), max(10, 15), 2.5 (requests missing), 4 (tokens missing)]
    load, bind = binding_load(np.array([10.0, 10.0, np.nan, 4.0]), np.array([1000.0, 3000.0, 500.0, np.nan]), 2.0,
                              400.0)
    assert load.tolist() == [10.0, 15.0, 2.5, 4.0]
    assert bind.tolist() == [False, True, True, False]


def test_negative_samples_count_as_missing_never_as_zero():
    # a negative request rate is a broken sample: the tokens' 800 x 2/400 = 4 stand; a negative token rate leaves 3
    load, bind = binding_load(np.array([-1.0, 3.0, -1.0]), np.array([800.0, -5.0, -5.0]), 2.0, 400.0)
    assert load[:2].tolist() == [4.0, 3.0] and math.isnan(load[2])
    assert bind.tolist() == [True, False, False]


@given(st.lists(st.tuples(st.floats(0, 1e6), st.floats(0, 1e9)), min_size=1, max_size=50),
       st.floats(0.01, 1e4), st.floats(0.01, 1e6))
def test_the_binding_load_needs_as_many_replicas_as_the_larger_of_the_two(pairs, qps, tpr):
    r = np.array([p[0] for p in pairs])
    k = np.array([p[1] for p in pairs])
    load, bind = binding_load(r, k, qps, tpr)
    need = np.maximum(r / qps, k / tpr)
    # relative 1e-12; below the normal range (subnormal floats, < 2.2e-308, which Hypothesis draws) a product and a
    # quotient keep no relative precision, so an absolute 1e-300 there
    assert np.allclose(load / qps, need, rtol=1e-12, atol=1e-300)
    assert (load >= r).all()
    assert np.allclose(load[bind], k[bind] * qps / tpr, rtol=1e-12, atol=1e-300) and (load[~bind] == r[~bind]).all()


def test_a_request_rate_given_as_tokens_is_refused():
    # 5 + 10 "tokens" for 10 + 20 requests: 15 / 30 = 0.5 tokens per request, below 1: it is a request rate
    why = unit_refusal(np.array([10.0, 20.0, 0.0]), np.array([5.0, 10.0, 7.0]), "tokenQuery")
    assert "tokenQuery is 0.5 tokens per request" in why and "accepted" in why
    assert unit_refusal(np.array([10.0, 20.0]), np.array([100.0, 200.0]), "tokenQuery") == ""
    assert unit_refusal(np.array([0.0, np.nan]), np.array([1.0, 2.0]), "tokenQuery") == ""  # no sample to judge


def test_the_token_keys_parse_together_and_move_the_forecast_key():
    from scaler.spec import MetadataError, parse_metadata
    from scaler.specwrite import to_metadata

    base = {"serverAddress": "http://prometheus:9090", "query": "sum(rate(r[2m]))", "qpsPerReplica": "2"}
    plain = parse_metadata(base)[0]
    tok = parse_metadata({**base, "tokenQuery": "sum(rate(t[2m]))", "tokensPerReplica": "2000"})[0]
    assert (tok.token_query, tok.tokens_per_replica) == ("sum(rate(t[2m]))", 2000.0)
    assert plain.load_identity() == "sum(rate(r[2m]))"  # no digest of a trigger without tokens moves
    assert tok.forecast_key() != plain.forecast_key()
    assert parse_metadata(to_metadata(tok))[0] == tok
    with pytest.raises(MetadataError, match="'tokensPerReplica': got missing"):
        parse_metadata({**base, "tokenQuery": "sum(rate(t[2m]))"})
    with pytest.raises(MetadataError, match="'tokenQuery': got missing"):
        parse_metadata({**base, "tokensPerReplica": "2000"})
    with pytest.raises(MetadataError, match="'tokensPerReplica': got '0'"):
        parse_metadata({**base, "tokenQuery": "q", "tokensPerReplica": "0"})
