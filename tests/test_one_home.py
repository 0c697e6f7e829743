"""Each concept has one home: a second copy of a default, of the model list or of the spec -> parameters translation
fails here.

* KEDA's and Kubernetes' defaults live in ``scaler.scaledobject``; no other product module declares a constant of
  the same name, gives a KEDA/HPA field a literal default, or reads a ScaledObject field with a literal fallback;
  the manifest reader, the HPA settings and the writer agree on them (a written ScaledObject reads back as the
  default ``Hpa``).
* ``scaler.keys.MODELS`` is the forecaster's registry, and no product module spells out the whole model list.
* ``ScalerSpec -> PolicyParams`` is ``scaler.params.policy_params``: the server and the replay of a ScaledObject
  both call it, and give the same parameters for any metadata (Hypothesis); ``PolicyParams`` is built elsewhere
  only from a family's configuration, in the modules listed with their reason.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from hypothesis import given, settings, strategies as st

import forecaster.models
from scaler import keys, scaledobject as so
from scaler.params import policy_params
from scaler.deadband import KUBERNETES_TOLERANCE
from scaler.replay import manifest
from scaler.replay.hpa import Hpa
from scaler.replay.triggers import trigger_params
from scaler.spec import parse_metadata

REPO = Path(__file__).resolve().parent.parent
HOME = "scaler/scaledobject.py"


def product_files() -> list[str]:
    out = [p.relative_to(REPO).as_posix() for pkg in ("scaler", "forecaster") for p in (REPO / pkg).rglob("*.py")]
    return sorted(f for f in out if not f.startswith("scaler/_proto/"))


def tree(rel: str) -> ast.Module:
    return ast.parse((REPO / rel).read_text(encoding="utf-8"), filename=rel)


def is_number(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool)


# fields and arguments that carry a KEDA/HPA default wherever they are declared
KEDA_FIELDS = {"min_replicas", "max_replicas", "polling_seconds", "cooldown_seconds", "sync_seconds",
               "scale_up_pods", "scale_up_percent", "scale_up_period_seconds", "scale_up_window_seconds",
               "scale_down_window_seconds", "scale_down_percent", "scale_down_period_seconds"}
# ScaledObject fields whose absent value is a KEDA default
MANIFEST_FIELDS = {"minReplicaCount", "maxReplicaCount", "pollingInterval", "cooldownPeriod",
                   "stabilizationWindowSeconds"}


def home_names() -> set[str]:
    return {n.id for node in tree(HOME).body if isinstance(node, ast.Assign) for n in node.targets
            if isinstance(n, ast.Name) and n.id.isupper()}


def default_copies(rel: str, t: ast.AST, names: set[str]) -> list[str]:
    out = []
    for node in ast.walk(t):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for n in targets:
                if isinstance(n, ast.Name) and n.id in names:
                    out.append(f"{rel}:{node.lineno}: {n.id} declared again (its home is {HOME})")
                if (isinstance(n, ast.Name) and n.id in KEDA_FIELDS and is_number(node.value)):
                    out.append(f"{rel}:{node.lineno}: field {n.id} = {ast.unparse(node.value)}: a KEDA/HPA default "
                               f"written as a literal (use {HOME})")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            pos = a.posonlyargs + a.args
            pairs = list(zip(pos[len(pos) - len(a.defaults):], a.defaults)) + list(zip(a.kwonlyargs, a.kw_defaults))
            for arg, d in pairs:
                if arg.arg in KEDA_FIELDS and is_number(d):
                    out.append(f"{rel}:{node.lineno}: argument {arg.arg}={ast.unparse(d)} of {node.name}: a KEDA/HPA "
                               f"default written as a literal (use {HOME})")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
              and len(node.args) == 2 and isinstance(node.args[0], ast.Constant)
              and node.args[0].value in MANIFEST_FIELDS and is_number(node.args[1])):
            out.append(f"{rel}:{node.lineno}: {ast.unparse(node)}: a ScaledObject default written as a literal "
                       f"(use {HOME})")
    return out


def test_keda_defaults_have_one_home():
    names = home_names()
    assert {"POLLING_SECONDS", "COOLDOWN_SECONDS", "MAX_REPLICAS", "DOWN_WINDOW_SECONDS", "UP_DEFAULT"} <= names
    v = [x for f in product_files() if f != HOME for x in default_copies(f, tree(f), names)]
    assert not v, "\n".join(v)


def test_the_checker_finds_copies():
    names = home_names()
    for src in ("POLLING_SECONDS = 30", "class H:\n    max_replicas: int = 100",
                "def f(*, cooldown_seconds=300.0): pass", "lo = spec.get('minReplicaCount', 0)"):
        assert default_copies("scaler/x.py", ast.parse(src), names), src
    clean = ("from .scaledobject import MAX_REPLICAS\nclass H:\n    max_replicas: int = MAX_REPLICAS\n"
             "def f(max_replicas=MAX_REPLICAS): pass\nx = spec.get('maxReplicaCount', MAX_REPLICAS)")
    assert default_copies("scaler/x.py", ast.parse(clean), names) == []


def test_reader_writer_and_settings_agree():
    """A written ScaledObject reads back as the default ``Hpa`` (behaviour written out in full: not legacy), and a
    ScaledObject that leaves everything out reads as the defaults too, with the legacy path."""
    md = {"serverAddress": "http://p:9090", "query": "q", "qpsPerReplica": "2"}
    written = manifest.plan("doc 1", so.scaled_object(md, name="w"))
    default = Hpa(target=2.0)
    assert dataclasses.replace(written.hpa, scale_up=None, scale_down=None) == default
    assert written.hpa.up_rules() == default.up_rules() and written.hpa.down_rules() == default.down_rules()
    bare = {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "b"},
            "spec": {"scaleTargetRef": {"name": "b"}, "triggers": [{"type": "external", "metadata": md}]}}
    read = manifest.plan("doc 2", bare).hpa
    assert read.legacy and dataclasses.replace(read, scale_up=None, scale_down=None, legacy=False) == default
    assert (read.polling_seconds, read.cooldown_seconds, read.max_replicas) == (30.0, 300.0, 100)
    assert KUBERNETES_TOLERANCE.up == KUBERNETES_TOLERANCE.down == so.HPA_TOLERANCE == 0.1


def test_models_are_the_forecasters_registry():
    assert keys.MODELS == forecaster.models.NAMES
    assert keys.DEFAULTS["model"] == forecaster.models.DEFAULT
    every = set(forecaster.models.NAMES)
    copies = []
    for f in product_files():
        if f == "forecaster/models/__init__.py":
            continue
        for node in ast.walk(tree(f)):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                words = {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
                if every <= words:
                    copies.append(f"{f}:{node.lineno}: the model list spelled out (use forecaster.models.NAMES)")
    assert not copies, "\n".join(copies)


# where PolicyParams is built, and from what: a ScalerSpec only in scaler/params.py
BUILDERS = {
    "scaler/params.py": "a trigger's ScalerSpec: the one translation",
    "scaler/replay/families/": "a policy family's configuration (a Variant), in the family's module",
    "scaler/replay/policies.py": "the stage-2 finish (headroom and dead-band compensation)",
    "scaler/replay/calibration.py": "the mean-only curve of the window-max band",
    "scaler/replay/world.py": "the placeholder pods' forecast at the long lead",
    "scaler/replay/drift.py": "the predictive family's default from the replay settings",
}


def test_policy_params_are_built_in_known_places():
    found = {}
    for f in product_files():
        for node in ast.walk(tree(f)):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "PolicyParams":
                found.setdefault(f, node.lineno)
    stray = {f: n for f, n in found.items() if not any(f == b or (b.endswith("/") and f.startswith(b)) for b in BUILDERS)}
    assert not stray, stray
    for rel in ("scaler/serve/workload.py", "scaler/replay/triggers.py"):
        calls = [n for n in ast.walk(tree(rel)) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "policy_params"]
        assert calls, f"{rel} no longer calls scaler.params.policy_params"


KNOBS = st.fixed_dictionaries({}, optional={
    "mode": st.sampled_from(keys.MODES),
    "quantile": st.sampled_from(["0.5", "0.8", "0.95"]),
    "headroom": st.sampled_from(["1", "1.1", "2.5"]),
    "hpaTolerance": st.sampled_from(["0", "0.05", "0.1"]),
    "levelCorrection": st.sampled_from(["0", "30m", "4h"]),
    "floorReplicas": st.sampled_from(["0", "1", "3"]),
    "coldStartSeconds": st.sampled_from(["0", "60", "240"]),
    "bufferSeconds": st.sampled_from(["0", "45"]),
    "schedulingSeconds": st.sampled_from(["10", "60"]),
    "qpsPerReplica": st.sampled_from(["0.5", "2", "10"]),
})


@settings(max_examples=60, deadline=None, derandomize=True)
@given(KNOBS)
def test_server_and_replay_read_the_same_parameters(knobs):
    """For any metadata, the server's ``Workload.params`` (T_cold from coldStartSeconds, no eventsFile) equals the
    parameters the replay of a ScaledObject with that trigger decides with."""
    from scaler.serve.workload import Workload

    md = {"serverAddress": "http://p:9090", "query": "q", "qpsPerReplica": "2", **knobs}
    spec, _ = parse_metadata(md, name="w", namespace="ns")
    wl = Workload("ns", "w", spec, client=None, created=0.0, last_polled=0.0)
    doc = so.scaled_object(md, name="w", namespace="ns")
    trig = manifest.plan("doc 1", doc).triggers[0]
    assert trig.spec == spec
    assert wl.params() == trigger_params(trig) == policy_params(spec)
    assert wl.params().floor_qps == spec.floor_replicas * spec.qps_per_replica
