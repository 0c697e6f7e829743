"""``forescale check`` checks what KEDA checks, and ``backtest --scaledobject`` refuses the same, with the same
messages (one validator, ``scaler.kedacheck``): KEDA v2.21.0's CRD schema, strict as ``kubectl apply``, its
webhook's and operator's rules, the HPA's; manifests read by one bounded loader (``scaler.manifest_yaml``)."""

from __future__ import annotations

import copy

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings, strategies as st

from scaler import kedacheck
from scaler.cli import main
from scaler.replay import manifest, manifestfields
from support.manifests import as_yaml, scaled_object
from support.traces import write_daily

GOOD = as_yaml(scaled_object(minReplicaCount=1, maxReplicaCount=20, trigger_name="ahead"))
BEHAVIOR = "spec.advanced.horizontalPodAutoscalerConfig.behavior.scaleUp"


def check(text: str, tmp_path):
    f = tmp_path / "so.yaml"
    f.write_text(text)
    return CliRunner().invoke(main, ["check", str(f)], catch_exceptions=False)


def backtest(text: str, tmp_path):
    f = tmp_path / "so.yaml"
    f.write_text(text)
    csv = write_daily(tmp_path / "daily.csv", 1.5)
    return CliRunner().invoke(main, ["backtest", str(csv), "--model", "naive", "--span", "6h", "--history", "1d",
                                     "--no-progress", "--qps-per-replica", "10", "--scaledobject", str(f)],
                              catch_exceptions=False)


def patched(fn) -> str:
    doc = yaml.safe_load(GOOD)
    fn(doc)
    return yaml.safe_dump(doc, sort_keys=False)


def _behavior(**rules):
    return lambda d: d["spec"].update(advanced={"horizontalPodAutoscalerConfig": {"behavior": {"scaleUp": rules}}})


def _formula(text):
    return lambda d: d["spec"].update(advanced={"scalingModifiers": {"formula": text, "target": "10"}})


# the bad manifests `check` passed before (issue 36 item 10): path, and what the message says
CASES = [
    (lambda d: d["spec"].update(minReplicas=1), "spec.minReplicas", "unknown field \"minReplicas\"",
     "did you mean 'minReplicaCount'?"),
    (lambda d: d["spec"].update(maxReplicaCounts=5), "spec.maxReplicaCounts", "unknown field", "'maxReplicaCount'"),
    (lambda d: d["spec"]["triggers"][0].update(type="externl"), "spec.triggers[0].type",
     "KEDA v2.21.0 has no scaler of that type", "did you mean 'external'?"),
    (lambda d: d["spec"].update(pollingInterval="30s"), "spec.pollingInterval", "got \"30s\" (a string)",
     "accepted: a whole number >= 1 (seconds, without a unit)"),
    (lambda d: d["spec"].update(pollingInterval=-5), "spec.pollingInterval", "got -5", "a whole number >= 1"),
    (lambda d: d["spec"].update(cooldownPeriod="five"), "spec.cooldownPeriod", "got \"five\"", ">= 0"),
    (lambda d: d["spec"].pop("scaleTargetRef"), "spec.scaleTargetRef", "missing; KEDA's schema requires it",
     "scaleTargetRef: {name: my-deployment}"),
    (lambda d: d["spec"].update(triggers=[]), "spec.triggers", "an empty list", "at least 1"),
    (lambda d: d["spec"].update(fallback={"failureThreshold": 3}), "spec.fallback.replicas", "missing", "replicas"),
    (_behavior(selectPolicy="Maximum"), f"{BEHAVIOR}.selectPolicy", "\"Maximum\"", "accepted: Max, Min, Disabled"),
    (_behavior(policies=[{"type": "Replicas", "value": 2, "periodSeconds": 15}]), f"{BEHAVIOR}.policies[0].type",
     "\"Replicas\"", "accepted: Pods, Percent"),
    (_formula("sqrt(ahead)"), "spec.advanced.scalingModifiers.formula", "unknown function sqrt()", "no sqrt"),
    (_formula("ahead + pods"), "spec.advanced.scalingModifiers.formula", "unknown name 'pods'",
     "named triggers here: ahead"),
    (lambda d: d["spec"]["triggers"][0].update(metricType="Average"), "spec.triggers[0].metricType", "\"Average\"",
     "AverageValue, Value"),
    (lambda d: d.update(apiVersion="keda.sh/v1beta1"), "apiVersion", "keda.sh/v1alpha1 only", "accepted"),
    (lambda d: d["spec"]["triggers"][0]["metadata"].update(qpsPerReplica=10), "spec.triggers[0].metadata.qpsPerReplica",
     "got 10 (a whole number)", "quote numbers and booleans"),
    (lambda d: d["spec"].update(minReplicaCount=30), "spec.minReplicaCount", "30 is greater than maxReplicaCount 20",
     "KEDA's CRD rule"),
    (lambda d: d["spec"].update(idleReplicaCount=1), "spec.idleReplicaCount", "1 is not below minReplicaCount",
     "KEDA's webhook"),
    (lambda d: d["spec"]["triggers"].append(copy.deepcopy(d["spec"]["triggers"][0])), "spec.triggers[1].name",
     "'ahead' is the name of spec.triggers[0] too", "unique"),
    (lambda d: d["spec"]["triggers"][0].update(name=5), "spec.triggers[0].name", "got 5", "a string"),
    (lambda d: d["spec"]["triggers"][0].update(name=["a", "b"]), "spec.triggers[0].name", "got a list", "a string"),
    (lambda d: d["metadata"].update(name="LLM_1"), "metadata.name", "\"LLM_1\"", "a DNS-1123 subdomain"),
    (_behavior(policies=[]), f"{BEHAVIOR}.policies", "an empty list", "at least one"),
    (lambda d: d["spec"].update(fallback={"failureThreshold": 3, "replicas": 2, "behavior": "scalingModifiers"}),
     "spec.fallback.behavior", "scalingModifiers needs", "formula"),
]


@pytest.mark.parametrize("fn, path, said, accepted", CASES)
def test_check_and_backtest_refuse_what_keda_refuses_with_one_message(tmp_path, fn, path, said, accepted):
    text = patched(fn)
    (problem,) = [p for p in kedacheck.errors(yaml.safe_load(text)) if p.path == path]
    assert said in problem.message and accepted in problem.message, problem
    r = check(text, tmp_path)
    assert r.exit_code == 2 and "Traceback" not in r.output
    name = yaml.safe_load(text)["metadata"]["name"]
    assert f"{tmp_path / 'so.yaml'}: ScaledObject serving/{name}: {problem.message} -- document 1, {path}" in r.stderr
    b = backtest(text, tmp_path)
    assert b.exit_code == 2 and "Traceback" not in b.output
    assert f"document 1 (ScaledObject {name!r}): {path}: {problem.message}" in b.output


def test_the_valid_manifest_passes_both_and_keda_warnings_are_warnings(tmp_path):
    r = check(GOOD, tmp_path)
    assert r.exit_code == 0 and r.stderr == "", r.output
    assert backtest(GOOD, tmp_path).exit_code == 0
    # pollingInterval with minReplicaCount >= 1: KEDA's webhook warns (it changes no scaling), and so does check
    warn = patched(lambda d: d["spec"].update(pollingInterval=15))
    r = check(warn, tmp_path)
    assert r.exit_code == 0 and "warning: changes no scaling here (KEDA's warning)" in r.stderr
    assert "-- document 1, spec.pollingInterval" in r.stderr
    assert check(warn, tmp_path).exit_code == 0 and backtest(warn, tmp_path).exit_code == 0
    # KEDA takes what is written out as it would: a formula outside the replay's subset passes check (KEDA's expr
    # compiles it); the replay says it cannot evaluate it
    expr_only = patched(_formula("float(ahead) ?? 0"))
    assert check(expr_only, tmp_path).exit_code == 0
    b = backtest(expr_only, tmp_path)
    assert b.exit_code == 2 and "scalingModifiers.formula" in b.output


def test_a_null_metadata_value_is_pruned_as_the_api_server_prunes_it(tmp_path):
    """``model: null`` in a forescale trigger: the API server drops the key before KEDA sees it, so the trigger is
    the one without it (the default model): check says ok and names the metric, as for GOOD, with no traceback
    (it crashed on the None: found by the Hypothesis test below, when it drew ``set model None``), and
    ``backtest --scaledobject`` replays it (it refused the model 'None')."""
    nulled = patched(lambda d: d["spec"]["triggers"][0]["metadata"].update(model=None))
    assert "model: null" in nulled
    r, good = check(nulled, tmp_path), check(GOOD, tmp_path)
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    assert r.stdout == good.stdout and "ok (KEDA asks for metric 's0-" in r.stdout
    assert backtest(nulled, tmp_path).exit_code == 0


def test_a_repeated_key_is_refused_by_both_naming_both_lines(tmp_path):
    lines = GOOD.splitlines(keepends=True)
    i = next(k for k, ln in enumerate(lines) if ln.strip().startswith("qpsPerReplica:"))
    text = "".join(lines[:i] + [lines[i].replace("'10'", "'20'")] + lines[i:])
    msg = f"line {i + 2}: key 'qpsPerReplica' appears twice in one mapping (first at line {i + 1})"
    r = check(text, tmp_path)
    assert r.exit_code == 2 and msg in r.stderr and "Traceback" not in r.output
    b = backtest(text, tmp_path)
    assert b.exit_code == 2 and msg in b.output


def test_a_fallback_on_a_value_metric_passes_check_and_the_replay_says_it_cannot_run_it(tmp_path):
    # KEDA v2.17+ falls back on Value metrics too (the fallback replicas over the ready ones): KEDA takes it;
    # the replay runs the fallback of AverageValue metrics only, so it refuses instead of replaying another thing
    text = patched(lambda d: (d["spec"].update(fallback={"failureThreshold": 3, "replicas": 4}),
                              d["spec"]["triggers"][0].update(metricType="Value")))
    assert check(text, tmp_path).exit_code == 0
    b = backtest(text, tmp_path)
    assert b.exit_code == 2 and "spec.fallback with spec.triggers[0].metricType Value cannot be replayed" in b.output


# ----------------------------------------------------------------------------- the rule: one validator

# every field of the ScaledObject the generator may touch, with a value KEDA takes there
LEAVES = {
    ("spec", "pollingInterval"): 30, ("spec", "cooldownPeriod"): 300, ("spec", "initialCooldownPeriod"): 0,
    ("spec", "minReplicaCount"): 1, ("spec", "maxReplicaCount"): 20, ("spec", "idleReplicaCount"): 0,
    ("spec", "scaleTargetRef", "name"): "llm", ("spec", "scaleTargetRef", "kind"): "Deployment",
    ("spec", "fallback"): {"failureThreshold": 3, "replicas": 4},
    ("spec", "advanced", "restoreToOriginalReplicaCount"): False,
    ("spec", "triggers", 0, "type"): "external", ("spec", "triggers", 0, "name"): "ahead",
    ("spec", "triggers", 0, "metricType"): "AverageValue", ("spec", "triggers", 0, "useCachedMetrics"): False,
    ("spec", "triggers", 0, "metadata", "model"): "naive", ("metadata", "name"): "llm",
    ("metadata", "labels"): {"app": "llm"},
}
ANY = st.recursive(st.none() | st.booleans() | st.integers(-3, 2 ** 33) | st.floats(allow_nan=False, width=32)
                   | st.text("abcXY -5s", max_size=6),
                   lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text("ab", max_size=2), inner,
                                                                               max_size=2), max_leaves=4)
MUTATION = st.one_of(
    st.tuples(st.just("set"), st.sampled_from(sorted(LEAVES, key=str)), ANY),
    st.tuples(st.just("keep"), st.sampled_from(sorted(LEAVES, key=str)), st.none()),
    st.tuples(st.just("unknown"), st.sampled_from([("spec",), ("spec", "scaleTargetRef"), ("spec", "triggers", 0),
                                                   (), ("metadata",)]), st.text("zqv", min_size=1, max_size=4)),
    st.tuples(st.just("drop"), st.sampled_from([("spec", "scaleTargetRef"), ("spec", "triggers"),
                                                ("spec", "triggers", 0, "metadata"), ("spec", "triggers", 0, "type"),
                                                ("metadata", "name")]), st.none()),
)


def mutate(doc: dict, kind: str, path: tuple, value) -> dict:
    """``doc`` with one change (the same ``doc`` when the path is not there any more)."""
    out = copy.deepcopy(doc)
    *parent, last = path if path else (None,)
    node = out
    try:
        for p in parent:  # a field set under a mapping the manifest leaves out: the mapping is made
            node = node.setdefault(p, {}) if kind in ("set", "keep") and isinstance(p, str) else node[p]
        if last is not None and kind == "unknown":
            node = node[last]
    except (KeyError, IndexError, TypeError):
        return doc
    if not isinstance(node, dict):
        return doc
    if kind == "set":
        node[last] = value
    elif kind == "keep":
        node[last] = copy.deepcopy(LEAVES[path])
    elif kind == "unknown":
        node["zz" + value] = 1
    else:
        node.pop(last, None)
    return out


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutations=st.lists(MUTATION, min_size=1, max_size=3))
def test_check_and_the_replay_refuse_the_same_set_with_the_same_messages(tmp_path, mutations):
    doc = yaml.safe_load(GOOD)
    for m in mutations:
        doc = mutate(doc, *m)
    errors = kedacheck.errors(doc)
    r = check(yaml.safe_dump(doc, sort_keys=False), tmp_path)
    assert "Traceback" not in r.output
    for p in errors:  # every refusal, at its path, in check's words
        assert f"{p.message} -- document 1, {p.path}" in r.stderr, (p, r.stderr)
    if not errors:
        return
    assert r.exit_code == 2
    with pytest.raises(manifestfields.ManifestError) as e:
        manifest.plans([("so.yaml document 1", doc)])
    assert str(e.value).splitlines() == [f"so.yaml document 1 (ScaledObject {_name(doc)!r}): {p}" for p in errors]


def _name(doc) -> str:
    meta = doc.get("metadata")
    return str(meta.get("name") or "") if isinstance(meta, dict) else ""


def _path(path: tuple) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else p)
    return out


def _wrong(v):
    """Values of another JSON type than ``v``'s (null is absent, not wrong)."""
    kinds = {bool: st.integers(0, 9) | st.text("ab", min_size=1, max_size=3),
             int: st.booleans() | st.text("5s", min_size=1, max_size=3) | st.floats(0.5, 9.5).filter(lambda x: x % 1),
             str: st.integers() | st.booleans() | st.lists(st.text("a", max_size=1), min_size=1, max_size=2),
             dict: st.text("ab", min_size=1, max_size=3) | st.integers() | st.lists(st.integers(), max_size=2)}
    return kinds[type(v)]


TYPED = sorted((k for k in LEAVES if k != ("metadata", "labels")), key=str)


@settings(max_examples=80, deadline=None, derandomize=True)
@given(data=st.data())
def test_keda_s_schema_refuses_a_wrong_type_or_an_unknown_field_at_its_own_path(data):
    path = data.draw(st.sampled_from(TYPED))
    bad = data.draw(_wrong(LEAVES[path]))
    errors = kedacheck.errors(mutate(yaml.safe_load(GOOD), "set", path, bad))
    assert any(p.path == _path(path) or p.path.startswith(_path(path) + ".") for p in errors), (path, bad, errors)
    where = data.draw(st.sampled_from([("spec",), ("spec", "scaleTargetRef"), ("spec", "triggers", 0), (),
                                       ("metadata",)]))
    key = data.draw(st.text("zqv", min_size=1, max_size=4))
    errors = kedacheck.errors(mutate(yaml.safe_load(GOOD), "unknown", where, key))
    assert [(p.path, "unknown field" in p.message) for p in errors] == [(_path((*where, "zz" + key)), True)]
