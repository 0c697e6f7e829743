"""The live fleet GPU budget (scaler.serve.ledger) in the registry, on a fake clock and a scripted Prometheus: the
answers of a budget's members, the reason, the metrics, two replicas sharing claims, and bad input."""

from __future__ import annotations

import math

import pytest

from scaler.budget import desired_replicas
from scaler.policy import Reason
from scaler.prom import CredentialStore
from scaler.serve.ledger import STALE_SECONDS, Budget, BudgetFileError, Ledger, read_budgets
from scaler.serve.metrics import ScalerMetrics
from scaler.serve.registry import Registry, RegistryConfig
from scaler.serve.workload import ScalerError
from support.clock import FakeClock
from support.fakes import FakePrometheus, sample_value, wait_for

T0 = 1_700_000_400.0
RATES = {"a": 50.0, "b": 40.0, "c": 30.0}  # req/s; 10 a replica: 5, 4 and 3 replicas asked, 12 GPUs
VALUES = {"a": "0.01", "b": "0.1", "c": "0.001"}  # $ a lost request


def md(w: str, **over) -> dict:
    m = {"serverAddress": "http://prom.test:9090", "query": f"sum(rate({w}_total[2m]))", "qpsPerReplica": "10",
         "mode": "reactive", "hpaTolerance": "0", "gpuBudget": "gpus", "gpusPerReplica": "1",
         "valuePerRequest": VALUES[w]}
    m.update(over)
    return {k: v for k, v in m.items() if v is not None}


class Replica:
    """One scaler replica's registry and ledger (10 GPUs in budget ``gpus``) over one scripted Prometheus."""

    def __init__(self, clock: FakeClock, prom: FakePrometheus, rule: str = "value", gpus: float = 10.0):
        self.metrics = ScalerMetrics()
        self.ledger = Ledger({"gpus": Budget("gpus", gpus, rule)}, clock, self.metrics)
        self.reg = Registry(clock, CredentialStore(None), self.metrics, RegistryConfig(first_wait_seconds=2.0),
                            client_factory=prom.factory(), ledger=self.ledger)

    def refresh(self) -> None:
        """One scheduler tick, and the refreshes it started, done."""
        self.reg.tick()
        wait_for(lambda: not any(w.refreshing for w in self.reg.workloads()))

    def answer(self, w: str, **over):
        wl = self.reg.workload("serving", w, md(w, **over))
        return self.reg.decision(wl)


@pytest.fixture
def world():
    clock, prom = FakeClock(T0), FakePrometheus()
    for w, r in RATES.items():
        prom.set_scalar(f"sum(rate({w}_total[2m]))", r)
    made = []

    def replica(**kw) -> Replica:
        made.append(Replica(clock, prom, **kw))
        return made[-1]

    yield clock, replica
    for r in made:
        r.reg.stop()


def test_the_value_rule_caps_the_cheapest_requests_to_whole_replicas(world):
    _, replica = world
    s = replica()
    for w in "abc":  # every member's claim first (KEDA polls them in turn)
        s.answer(w)
    d = {w: s.answer(w) for w in "abc"}
    # 10 GPUs for 5 + 4 + 3 asked. Lost value a replica saves, per GPU: b 0.1 x 10 = 1.0, a 0.01 x 10 = 0.1,
    # c 0.001 x 10 = 0.01 -> b 4, a 5 (9 GPUs), c 1: c's answer is exactly 1 x 10 = 10 req/s (KEDA's milli-units:
    # the HPA divides 10000 by 10000: 1 replica); the answers sum to 50 + 40 + 10 = 100 req/s = 10 replicas
    assert (d["a"].planned, d["b"].planned, d["c"].planned) == (50.0, 40.0, 10.0)
    assert d["c"].reason == Reason.BUDGET_CAPPED and d["a"].reason == Reason.MODE_REACTIVE
    assert sum(desired_replicas(x.planned, 10.0) for x in d.values()) == 10
    labels = {"namespace": "serving", "scaledobject": "c", "budget": "gpus"}
    assert sample_value(s.metrics.registry, "forescale_budget_gpus", {**labels, "kind": "asked"}) == 3.0
    assert sample_value(s.metrics.registry, "forescale_budget_gpus", {**labels, "kind": "granted"}) == 1.0
    assert s.metrics.registry.get_sample_value("forescale_budget_limit_gpus", {"budget": "gpus"}) == 10.0


def test_the_equal_share(world):
    _, replica = world
    s = replica(rule="equal")
    for w in "abc":
        s.answer(w)
    d = {w: s.answer(w) for w in "abc"}
    # one GPU at a time to the member holding the fewest (ties: the name): a, b, c, a, b, c, a, b, c (c has its 3),
    # a -> a 4, b 3, c 3: a and b capped to 40 and 30 req/s, c keeps its 30
    assert [d[w].planned for w in "abc"] == [40.0, 30.0, 30.0]
    assert [d[w].reason for w in "abc"] == [Reason.BUDGET_CAPPED, Reason.BUDGET_CAPPED, Reason.MODE_REACTIVE]


def test_two_replicas_agree_once_they_share_their_claims(world):
    clock, replica = world
    one, two = replica(), replica()
    # KEDA's two connections reach different replicas: one is asked about a and b, two about c
    alone = [one.answer("a").planned, one.answer("b").planned, two.answer("c").planned]
    assert alone == [50.0, 40.0, 30.0]  # each fits its own claims: together 12 replicas, over the budget
    one.ledger.merge(two.ledger.claims())  # what each fetches from the other's /budget/claims
    two.ledger.merge(one.ledger.claims())
    assert one.ledger.snapshot("gpus") == two.ledger.snapshot("gpus")  # the same claims, the same grants
    both = [one.answer("a").planned, one.answer("b").planned, two.answer("c").planned]
    assert both == [50.0, 40.0, 10.0]  # as one replica holding all three would answer
    assert two.ledger.snapshot("gpus")["members"]["serving/c/" + two.reg.workloads()[0].trigger]["capped"]
    # a claim not renewed for STALE_SECONDS drops out: two, asked only about c since, holds c alone again
    clock.advance(STALE_SECONDS + 1)
    two.refresh()
    assert two.answer("c").planned == 30.0


def test_a_newer_claim_from_a_peer_wins_and_an_old_one_does_not(world):
    clock, replica = world
    one, two = replica(), replica()
    one.answer("c")
    clock.advance(1.0)
    two.answer("c")
    got = one.ledger.merge(two.ledger.claims())
    assert got == 1 and one.ledger.merge(two.ledger.claims()) == 0  # the same claim again: nothing new
    assert two.ledger.merge(one.ledger.claims()) == 0  # one's is older
    assert one.ledger.merge({"replica": "x", "claims": [{"budget": "gpus", "member": "m", "planned": "nan"}]}) == 0


def test_bad_budget_metadata_is_invalid_argument_naming_the_key(world):
    _, replica = world
    s = replica()
    for over, fragment in (({"gpuBudget": "other"}, "gpuBudget 'other': this scaler holds no such budget; accepted: "
                                                     "gpus"),
                           ({"gpusPerReplica": None}, "gpusPerReplica"),
                           ({"gpusPerReplica": "0"}, "gpusPerReplica"),
                           ({"valuePerRequest": "-1"}, "valuePerRequest"),
                           ({"valuePerRequest": "nan"}, "valuePerRequest"),
                           ({"minReplicaCount": "1.5"}, "minReplicaCount"),
                           ({"gpuBudget": "Bad_Name"}, "gpuBudget")):
        with pytest.raises(ScalerError) as e:
            s.answer("a", **over)
        assert e.value.code == "INVALID_ARGUMENT" and fragment in str(e.value), str(e.value)
    with pytest.raises(ScalerError, match="gpuBudget 'gpus': this scaler holds no GPU budget"):
        Registry(FakeClock(T0), CredentialStore(None), ScalerMetrics(), RegistryConfig(),
                 client_factory=FakePrometheus().factory()).workload("serving", "a", md("a"))
    # minReplicaCounts that the budget cannot hold: every member's answer is FAILED_PRECONDITION, named
    s.answer("a", minReplicaCount="6")
    with pytest.raises(ScalerError) as e:
        s.answer("b", minReplicaCount="5")
    assert e.value.code == "FAILED_PRECONDITION" and "below the 11 GPUs the minReplicaCounts keep" in str(e.value)


@pytest.mark.parametrize("doc,fragment", [
    ({"budgets": [{"name": "gpus", "gpus": -1}]}, "budgets[0].gpus: GPU budget -1.0: accepted is a finite number"),
    ({"budgets": [{"name": "gpus", "gpus": math.nan}]}, "GPU budget nan"),
    ({"budgets": [{"name": "gpus", "gpus": "16"}]}, "budgets[0].gpus '16': expected a number"),
    ({"budgets": [{"name": "gpus", "gpus": 4, "rule": "fair"}]}, "rule 'fair': accepted are value, equal"),
    ({"budgets": [{"name": "gpus", "gpus": 4}, {"name": "gpus", "gpus": 2}]}, "budgets[1].name 'gpus': expected a unique"),
    ({"budgets": [{"name": "gpus", "gpus": 4, "members": []}]}, "expected a mapping with name, gpus and rule"),
    ({"budget": []}, "expected one mapping with the key budgets"),
    ({"budgets": []}, "budgets: empty"),
])
def test_a_bad_budget_file_is_named(doc, fragment):
    with pytest.raises(BudgetFileError) as e:
        read_budgets(doc)
    assert fragment in str(e.value)
