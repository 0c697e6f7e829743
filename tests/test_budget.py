"""The fleet GPU budget's arbitration (scaler.budget), by worked arithmetic and as rules."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from scaler.budget import BudgetError, Claim, arbitrate


def by_name(grants):
    return {g.name: g for g in grants}


def test_value_rule_gives_the_gpus_to_the_most_valuable_requests():
    # Budget 10 GPUs. chat: 6 replicas x 1 GPU for 60 req/s (10 each), $0.01 a request, min 1;
    # docs: 4 replicas x 2 GPUs for 20 req/s (5 each), $0.10 a request, min 1.
    # Minimums: 1 + 2 = 3 GPUs, 7 left. Gain per GPU of the next replica:
    #   chat: 0.01 x 10 / 1 = 0.10 $/s per GPU;  docs: 0.10 x 5 / 2 = 0.25 $/s per GPU.
    # docs takes its 3 missing replicas first (6 GPUs, 1 left), then chat one (1 GPU, 0 left).
    # chat 2 replicas serve 20 of 60: lost 40 req/s x 0.01 = 0.40 $/s; docs all 20 served.
    g = by_name(arbitrate([Claim("chat", 6, 1, 1, 10, 60, 0.01), Claim("docs", 4, 1, 2, 5, 20, 0.10)], 10))
    assert (g["chat"].replicas, g["docs"].replicas) == (2, 4)
    assert g["chat"].capped and not g["docs"].capped
    assert g["chat"].lost_value == pytest.approx(0.40)
    assert g["chat"].gpus + g["docs"].gpus == 10


def test_equal_share_caps_each_at_its_share_and_loses_more_value():
    # Same claims, equal share of the 7 GPUs left after the minimums, one replica at a time to the fewest extra GPUs
    # (ties: fewer GPUs per replica, then name), extra GPUs after each step: chat 1, docs 2, chat 2, chat 3, docs 4:
    # all 7 used. chat 1 + 3 = 4 replicas (40 of 60 req/s, lost 20 x 0.01 = 0.20 $/s); docs 1 + 2 = 3 (15 of 20,
    # lost 5 x 0.10 = 0.50 $/s): 0.70 $/s against the value rule's 0.40.
    claims = [Claim("chat", 6, 1, 1, 10, 60, 0.01), Claim("docs", 4, 1, 2, 5, 20, 0.10)]
    g = by_name(arbitrate(claims, 10, "equal"))
    assert (g["chat"].replicas, g["docs"].replicas) == (4, 3)
    assert g["chat"].lost_value + g["docs"].lost_value == pytest.approx(0.70)
    v = sum(x.lost_value for x in arbitrate(claims, 10))
    assert v == pytest.approx(0.40) and v < 0.70


def test_a_partial_last_replica_counts_only_what_it_serves():
    # a: 3 replicas of 10 req/s for 21 req/s (the third serves 1); b: 2 of 10 for 20. Budget 4, no minimums.
    # gains: a 10, 10, then 1; b 10, 10. Ties go to the fewest GPUs above the minimum, then the name: a, b, a, b
    # -> a 2 (lost 1), b 2.
    g = by_name(arbitrate([Claim("a", 3, 0, 1, 10, 21), Claim("b", 2, 0, 1, 10, 20)], 4))
    assert (g["a"].replicas, g["b"].replicas) == (2, 2)
    assert g["a"].lost_load == pytest.approx(1.0)


def test_a_budget_below_the_minimums_is_refused_naming_them():
    with pytest.raises(BudgetError, match=r"below the 6 GPUs.*chat: 2.*minReplicaCount"):
        arbitrate([Claim("chat", 5, 2, 1), Claim("docs", 3, 2, 2)], 5)
    for bad in (float("nan"), -1.0, float("inf")):
        with pytest.raises(BudgetError, match="GPU budget"):
            arbitrate([Claim("chat", 1)], bad)
    with pytest.raises(BudgetError, match="budget rule 'fair'.*value, equal"):
        arbitrate([Claim("chat", 1)], 1, "fair")
    with pytest.raises(BudgetError, match="gpusPerReplica 0"):
        arbitrate([Claim("chat", 1, 0, 0)], 1)


claims_st = st.lists(
    st.builds(Claim, name=st.just(""), desired=st.integers(0, 12), minimum=st.integers(0, 2),
              gpus_per_replica=st.sampled_from([0.5, 1.0, 2.0, 4.0]), capacity=st.floats(0.5, 20),
              load=st.none() | st.floats(0, 200), value_per_request=st.floats(0, 5)),
    min_size=1, max_size=6).map(lambda cs: [Claim(f"w{i}", *[getattr(c, f) for f in
                                                           ("desired", "minimum", "gpus_per_replica", "capacity",
                                                            "load", "value_per_request")])
                                          for i, c in enumerate(cs)])


@settings(max_examples=200, deadline=None)
@given(claims=claims_st, extra=st.floats(0, 60), rule=st.sampled_from(["value", "equal"]))
def test_rules_never_exceed_the_budget_nor_the_ask_and_keep_the_minimums(claims, extra, rule):
    floor = sum(c.minimum * c.gpus_per_replica for c in claims)
    grants = arbitrate(claims, floor + extra, rule)
    assert sum(g.gpus for g in grants) <= floor + extra + 1e-6
    for c, g in zip(claims, grants):
        assert c.minimum <= g.replicas <= max(c.desired, c.minimum)
    # a budget that holds every ask caps nobody
    full = sum(max(c.desired, c.minimum) * c.gpus_per_replica for c in claims)
    assert not any(g.capped for g in arbitrate(claims, full, rule))


@settings(max_examples=200, deadline=None)
@given(claims=claims_st, extra=st.floats(0, 60))
def test_the_value_rule_loses_no_more_value_than_equal_share(claims, extra):
    # optimal (so never worse than any rule) when replicas are the same size: the greedy is exact there
    claims = [Claim(c.name, c.desired, c.minimum, 1.0, c.capacity, c.load, c.value_per_request) for c in claims]
    floor = sum(c.minimum * c.gpus_per_replica for c in claims)
    v = sum(g.lost_value for g in arbitrate(claims, floor + extra, "value"))
    e = sum(g.lost_value for g in arbitrate(claims, floor + extra, "equal"))
    assert v <= e + 1e-6 * max(1.0, e)


@pytest.mark.parametrize("qps", [0.001, 0.0333, 1.0, 7.77, 10.0, 123.456, 1e6])
def test_a_granted_value_asks_the_hpa_for_exactly_the_grant(qps):
    # KEDA hands value and target over as milli-quantities ("%.3f"); the HPA's AverageValue recommendation is
    # ceil(value_m / target_m). grant x target_m milli divides back to the grant exactly, whatever the target's
    # digits (0.0333: 33 milli; 7.77: 7770), and the HPA at the grant stays there (ratio 1: inside its band)
    from scaler.budget import desired_replicas, granted_value
    from scaler.deadband import KUBERNETES_TOLERANCE, to_milli
    from scaler.replay.hparules import replica_recommendation

    t = to_milli(qps)
    for r in range(0, 201):
        v = granted_value(r, qps)
        assert to_milli(v) == r * t and desired_replicas(v, qps) == r
        if r:
            assert replica_recommendation(to_milli(v), t, r, KUBERNETES_TOLERANCE)[0] == r
            assert replica_recommendation(to_milli(v), t, 3 * r, KUBERNETES_TOLERANCE)[0] == r  # from far above


def test_capped_is_the_plan_or_the_grant_never_above_the_plan():
    from scaler.budget import Grant, capped, claim

    c = claim("a", 41.0, 10.0)  # 41 req/s: 5 replicas asked (ceil 4.1)
    assert (c.desired, c.demand) == (5, 41.0)
    assert capped(41.0, Grant("a", 5, 5, 5.0, 0.0, 0.0), 10.0) == 41.0  # granted what it asks: the plan itself
    assert capped(41.0, Grant("a", 3, 5, 3.0, 11.0, 11.0), 10.0) == 30.0  # capped: exactly 3 replicas' worth
