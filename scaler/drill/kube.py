"""A small Kubernetes REST client for the drill (the standard library's HTTPS with a client certificate) and
kubeconfig files. Objects are applied server-side (``application/apply-patch+yaml``, field manager ``drill``), as
``kubectl apply --server-side`` does.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .pki import Pair

# kind -> (API prefix, plural, namespaced)
RESOURCES = {
    "Namespace": ("/api/v1", "namespaces", False),
    "Node": ("/api/v1", "nodes", False),
    "Pod": ("/api/v1", "pods", True),
    "Service": ("/api/v1", "services", True),
    "Deployment": ("/apis/apps/v1", "deployments", True),
    "HorizontalPodAutoscaler": ("/apis/autoscaling/v2", "horizontalpodautoscalers", True),
    "APIService": ("/apis/apiregistration.k8s.io/v1", "apiservices", False),
    "CustomResourceDefinition": ("/apis/apiextensions.k8s.io/v1", "customresourcedefinitions", False),
    "ScaledObject": ("/apis/keda.sh/v1alpha1", "scaledobjects", True),
}


class KubeError(RuntimeError):
    def __init__(self, status: int, message: str):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


def path_of(kind: str, name: str | None = None, namespace: str | None = None, sub: str | None = None) -> str:
    prefix, plural, namespaced = RESOURCES[kind]
    p = prefix + (f"/namespaces/{namespace}" if namespaced and namespace else "") + f"/{plural}"
    if name:
        p += f"/{urllib.parse.quote(name)}"
    if sub:
        p += f"/{sub}"
    return p


@dataclass
class Kube:
    server: str  # https://127.0.0.1:PORT
    ca: Path
    client: Pair
    timeout: float = 10.0

    def __post_init__(self) -> None:
        ctx = ssl.create_default_context(cafile=str(self.ca))
        ctx.load_cert_chain(str(self.client.cert), str(self.client.key))
        self._ctx = ctx

    def request(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json",
                params: dict[str, str] | None = None) -> Any:
        url = self.server + path + ("?" + urllib.parse.urlencode(params) if params else "")
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        req = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": content_type, "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, context=self._ctx, timeout=self.timeout) as r:
                raw = r.read()
        except urllib.error.HTTPError as e:
            text = e.read().decode("utf-8", "replace")
            try:
                text = json.loads(text).get("message", text)
            except (ValueError, AttributeError):
                pass
            raise KubeError(e.code, text[:500]) from None
        return json.loads(raw) if raw else None

    def get(self, kind: str, name: str | None = None, namespace: str | None = None, **params: str) -> Any:
        return self.request("GET", path_of(kind, name, namespace), params=params or None)

    def apply(self, obj: dict) -> Any:
        meta = obj["metadata"]
        p = path_of(obj["kind"], meta["name"], meta.get("namespace"))
        return self.request("PATCH", p, json.dumps(obj).encode(), content_type="application/apply-patch+yaml",
                            params={"fieldManager": "drill", "force": "true"})

    def delete(self, kind: str, name: str, namespace: str | None = None, grace: int | None = None) -> Any:
        body = None if grace is None else {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": grace}
        return self.request("DELETE", path_of(kind, name, namespace), body)

    def scale(self, name: str, namespace: str, replicas: int) -> Any:
        return self.request("PATCH", path_of("Deployment", name, namespace, "scale"), {"spec": {"replicas": replicas}},
                            content_type="application/merge-patch+json")


def write_kubeconfig(path: Path, server: str, ca: Path, client: Pair, user: str = "drill") -> Path:
    """A kubeconfig with one cluster, one user (the client certificate) and one current context."""
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "drill",
           "clusters": [{"name": "drill", "cluster": {"server": server, "certificate-authority": str(ca)}}],
           "users": [{"name": user, "user": {"client-certificate": str(client.cert), "client-key": str(client.key)}}],
           "contexts": [{"name": "drill", "context": {"cluster": "drill", "user": user}}]}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    path.chmod(0o600)
    return path
