"""The chart deploy/helm/forescale rendered by a real Helm engine: helm-python-sdk (Helm's Go SDK as a shared
library, a PyPI wheel: offline, no helm binary), as ``helm template`` renders it.

``api_versions`` are the cluster's API versions Helm's ``--api-versions`` would add (Argo CD passes the cluster's;
``helm install`` asks the cluster): None is the offline default set. The wheel's ``Chart.render`` does not take
them, so ``render`` hands its options to the engine's ``helm_render`` itself (the same call, one key more).
"""

from __future__ import annotations

import json

import pytest
import yaml

from support.paths import REPO

CHART = REPO / "deploy" / "helm" / "forescale"
# a cluster that serves what the chart's defaults need: KEDA, cert-manager (and, as every cluster, the aggregator)
CLUSTER_APIS = ("apiregistration.k8s.io/v1", "keda.sh/v1alpha1", "cert-manager.io/v1")


def helm():
    try:
        import helm_python
    except ImportError:
        pytest.fail("helm-python-sdk is not installed: `pip install -e '.[test]'` (the Helm engine of the chart "
                    "tests; never skipped)", pytrace=False)
    return helm_python


def render_files(values: dict | None = None, *, name: str = "forescale", namespace: str = "forescale",
                 api_versions: tuple[str, ...] | None = None) -> dict[str, str]:
    """Template path -> rendered text; raises the engine's HelmValuesError / HelmRenderError."""
    h = helm()
    with h.Chart.load(str(CHART)) as chart:
        if api_versions is None:
            return chart.render(values or {}, name=name, namespace=namespace)
        from helm_python import _native

        opts = {"name": name, "namespace": namespace, "api_versions": list(api_versions)}
        return json.loads(_native.call_string("helm_render", chart._raw(), json.dumps(values or {}), json.dumps(opts)))


def render(values: dict | None = None, *, name: str = "forescale", namespace: str = "forescale",
           api_versions: tuple[str, ...] | None = None) -> list[dict]:
    """The rendered objects, each with metadata.namespace set as ``helm install -n`` does."""
    out = render_files(values, name=name, namespace=namespace, api_versions=api_versions)
    objs = []
    for path, text in sorted(out.items()):
        if path.endswith(".yaml"):
            objs += [o for o in yaml.safe_load_all(text) if o]
    for o in objs:  # helm template leaves metadata.namespace to the client: set it as `helm install -n` does
        o["metadata"].setdefault("namespace", namespace)
    return objs
