"""The tracked-trigger table (scaler.serve.admission.Table) against the rule it indexes, stated by brute force: for a
new trigger of namespace/name that found no room, the trigger to evict is the least recently polled one polled
fewer than PROVEN_POLLS times, of the namespace at its quota or of any at the cap, never of the same ScaledObject."""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from scaler.serve.admission import PROVEN_POLLS, Table
from scaler.serve.registryconfig import RegistryConfig

NAMESPACES = ("a", "b", "c")
NAMES = ("x", "y", "z")


def trigger(ns: str, name: str, metric: str, now: float) -> SimpleNamespace:
    return SimpleNamespace(namespace=ns, name=name, key=(ns, name, metric), polls=1, last_polled=now)


def brute_evictable(tracked, namespace: str, name: str, why: str):
    scope = namespace if why.startswith("namespace") else None
    unproven = [w for w in tracked if w.polls < PROVEN_POLLS and (scope is None or w.namespace == scope)
                and (w.namespace, w.name) != (namespace, name)]
    return min(unproven, key=lambda w: w.last_polled) if unproven else None


ops = st.lists(st.tuples(st.sampled_from(("add", "poll", "remove")), st.sampled_from(NAMESPACES),
                         st.sampled_from(NAMES), st.sampled_from(("m0", "m1"))), max_size=60)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_the_table_picks_what_the_rule_says_after_any_history(history):
    table, tracked = Table(), {}
    for now, (op, ns, name, metric) in enumerate(history):  # one op per second: no ties in last_polled
        key = (ns, name, metric)
        if op == "add" and key not in tracked:
            tracked[key] = trigger(ns, name, metric, float(now))
            table.add(tracked[key])
            table.polled(tracked[key])  # the registry counts the creating call a poll
        elif op == "poll" and key in tracked:
            w = tracked[key]
            w.polls += 1
            w.last_polled = float(now)
            table.polled(w)
        elif op == "remove" and key in tracked:
            w = tracked.pop(key)
            last = table.remove(w)
            assert last == (not any(k[:2] == (ns, name) for k in tracked))
        assert len(table) == len(tracked)
        for qns in NAMESPACES:
            assert table.count(qns) == sum(k[0] == qns for k in tracked)
            for qname in NAMES:
                assert sorted(w.key for w in table.of(qns, qname)) == sorted(k for k in tracked if k[:2] == (qns, qname))
                for why in ("namespace a has 3 triggers here", "this scaler tracks 9 triggers"):
                    assert table.evictable(qns, qname, why) is brute_evictable(tracked.values(), qns, qname, why)


def test_no_room_names_the_cap_or_the_quota():
    table, cfg = Table(), RegistryConfig(max_tracked=3, max_tracked_per_namespace=2)
    for i, ns in enumerate(("a", "a", "b")):
        assert table.no_room(ns, cfg) is None or i == 2
        table.add(trigger(ns, f"so-{i}", "m", float(i)))
    assert table.no_room("c", cfg) == "this scaler tracks 3 triggers, its limit (MAX_TRACKED 3)"
    table.remove(table.get(("b", "so-2", "m")))
    assert table.no_room("a", cfg) == "namespace a has 2 triggers here, its quota (--max-triggers-per-namespace 2)"
    assert table.no_room("b", cfg) is None
