"""ScaledObjects for the tests of ``forescale check`` and ``backtest --scaledobject``, as plain data."""

from __future__ import annotations

import yaml

FORESCALE_METADATA = {"scalerAddress": "forescale.forescale.svc:6000", "serverAddress": "http://prometheus:9090",
                      "query": "sum(rate(x[2m]))", "qpsPerReplica": "10", "model": "naive"}


def scaled_object(name: str = "llm", namespace: str = "serving", *, trigger_name: str | None = None, **spec) -> dict:
    """A ScaledObject KEDA takes, with one forescale trigger (named ``trigger_name``) and ``spec``'s fields."""
    trigger = {"type": "external", **({"name": trigger_name} if trigger_name else {}),
               "metadata": dict(FORESCALE_METADATA)}
    return {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": name, "namespace": namespace},
            "spec": {"scaleTargetRef": {"name": "llm"}, **spec, "triggers": [trigger]}}


def as_yaml(doc: dict) -> str:
    return yaml.safe_dump(doc, sort_keys=False)
