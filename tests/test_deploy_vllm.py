"""deploy/example/vllm: a vLLM Deployment with the `forescale probe --watch` sidecar and a ScaledObject
with coldStartFrom: cluster. Rendered with the real `kubectl kustomize`, validated against the Kubernetes
schemas (strict) and KEDA's CRD (unknown fields fail), the trigger through the scaler's parser, the sidecar's
arguments through the real CLI."""

from __future__ import annotations

import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

import click
import jsonschema
import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
VLLM = ROOT / "deploy" / "example" / "vllm"
CRD = Path(__file__).resolve().parent / "fixtures" / "keda" / "keda.sh_scaledobjects.yaml"


@lru_cache(maxsize=None)
def render(path: Path) -> tuple[dict, ...]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl not found: run tests/system-deps.sh", pytrace=False)
    proc = subprocess.run([kubectl, "kustomize", str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return tuple(o for o in yaml.safe_load_all(proc.stdout) if o)


def one(kind: str, name: str, objs=None) -> dict:
    found = [o for o in (objs or render(VLLM)) if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, (kind, name)
    return found[0]


def strict(schema):
    """Unknown fields forbidden wherever the CRD does not preserve them (the API server would prune them)."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    if "properties" in schema:
        out["properties"] = {k: strict(v) for k, v in schema["properties"].items()}
        if "additionalProperties" not in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            out[key] = strict(schema[key])
    return out


def test_renders_and_validates():
    objs = render(VLLM)
    assert sorted(o["kind"] for o in objs) == ["Deployment", "ScaledObject"]
    for version in ("1.30", "1.35"):
        kubernetes_validate.validate(one("Deployment", "vllm"), version, strict=True)
    schema = strict(yaml.safe_load(CRD.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    jsonschema.validate(one("ScaledObject", "vllm"), schema)
    bad = one("ScaledObject", "vllm") | {"spec": {**one("ScaledObject", "vllm")["spec"], "colStartFrom": "x"}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_the_image_is_the_users_value_and_the_sidecar_runs_probe_watch():
    dep = one("Deployment", "vllm")
    pod = dep["spec"]["template"]["spec"]
    model, side = pod["containers"]
    k = yaml.safe_load((VLLM / "kustomization.yaml").read_text())
    images = {i["name"]: f"{i['newName']}:{i['newTag']}" for i in k["images"]}
    assert model["image"] == images["vllm-server"] and not model["image"].endswith(":latest")
    assert side["image"] == images["forescale-probe"]
    # the example's probe image: the same build the torch example uses
    base = yaml.safe_load((ROOT / "deploy" / "example" / "kustomization.yaml").read_text())
    assert {i["name"]: i for i in base["images"]}["forescale-probe"] == {i["name"]: i for i in k["images"]}["forescale-probe"]
    from scaler.cli import main

    args = side["args"]
    assert args[0] == "probe"
    try:
        ctx = main.commands["probe"].make_context("probe", list(args[1:]))
    except click.ClickException as e:
        raise AssertionError(f"sidecar args rejected: {e.format_message()}") from None
    # it watches the model container's port, and serves where the model container's startupProbe looks
    port = {p["name"]: p["containerPort"] for p in model["ports"]}["http"]
    assert ctx.params["watch_url"] == f"http://127.0.0.1:{port}"
    assert model["startupProbe"]["httpGet"] == {"path": "/health/startup", "port": ctx.params["serve_port"]}
    assert {p["containerPort"] for p in side["ports"]} == {ctx.params["serve_port"]}
    for c in (model, side):  # hardened like every example pod
        sc = c["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"]["drop"] == ["ALL"] and c["resources"]["limits"]["memory"]
    assert pod["securityContext"]["runAsNonRoot"] is True and "replicas" not in dep["spec"]


def test_the_trigger_reads_the_cluster_and_the_sidecar():
    from scaler.spec import parse_metadata

    so, dep = one("ScaledObject", "vllm"), one("Deployment", "vllm")
    (trigger,) = so["spec"]["triggers"]
    md = trigger["metadata"]
    assert all(isinstance(v, str) for v in md.values())
    spec, unknown = parse_metadata(md, name="vllm", namespace=so["metadata"]["namespace"])
    assert unknown == ()
    src = spec.cold_start_cluster
    # the workload it measures is the one KEDA scales, in the ScaledObject's namespace
    assert (src.kind, src.name) == (so["spec"]["scaleTargetRef"]["kind"], so["spec"]["scaleTargetRef"]["name"])
    assert dep["metadata"]["name"] == src.name and dep["metadata"]["namespace"] == so["metadata"]["namespace"]
    # coldStartQuery reads the sidecar's metric by its --model-name
    side = dep["spec"]["template"]["spec"]["containers"][1]["args"]
    assert f'model="{side[side.index("--model-name") + 1]}"' in spec.cold_start_query
    # the same scaler address as the main example (the scaler Service)
    base = render(ROOT / "deploy" / "example")
    main_so = one("ScaledObject", "llm-inference", base)
    assert md["scalerAddress"] == main_so["spec"]["triggers"][0]["metadata"]["scalerAddress"]
    # the token load reads vLLM's own token counters of the same model, next to its request counter
    assert "vllm:generation_tokens_total" in spec.token_query and "vllm:prompt_tokens_total" in spec.token_query
    assert 'model_name="vllm"' in spec.token_query and spec.tokens_per_replica == 600.0
    # the closed loop on vLLM's queue (per ready replica of the Deployment KEDA scales) and its TTFT histogram
    lp = spec.loop
    assert "vllm:num_requests_waiting" in lp.queue_query and 'model_name="vllm"' in lp.queue_query
    assert f'deployment="{dep["metadata"]["name"]}"' in lp.ready_query and "replicas_ready" in lp.ready_query
    assert "vllm:time_to_first_token_seconds_bucket" in lp.ttft_query and "histogram_quantile(0.95" in lp.ttft_query
    assert (lp.queue_target, lp.ttft_target) == (2.0, 2.0) and spec.lead.forecast_error_auto
    # the startup budget covers 3 x the fallback T_cold
    startup = dep["spec"]["template"]["spec"]["containers"][0]["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 3 * spec.lead.cold_start_seconds
