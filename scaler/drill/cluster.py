"""The drill's control plane, every part on 127.0.0.1: etcd, kube-apiserver (with the aggregator's front-proxy PKI
and an audit log), kube-controller-manager (HPA, deployment, replicaset, garbage collector), KWOK with one fake
GPU node, and KEDA's operator and metrics adapter out of cluster, with KEDA's CRDs from its module.

``ControlPlane(...).start()`` brings them up in order, each waited for on its own health endpoint, and
``stop()`` takes everything down. The periods that the cluster itself holds are divided by ``k`` (time
compression): the HPA's sync period and its legacy downscale stabilisation. The rest (pollingInterval, cooldown,
behavior windows and periods, T_cold) is in the manifests the scenario applies (``compress``).
"""

from __future__ import annotations

import json
import shutil
import ssl
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import yaml

from .config import AUDIT_POLICY, kwok_config
from .kube import Kube, KubeError, write_kubeconfig
from .pki import ADAPTER_SERVICE, Pki, make_pki
from .procs import DrillError, Supervisor, port_free

KEDA_NAMESPACE = "keda"
NODE_NAME = "drill-gpu-0"
NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
GPU_NODE_LABELS = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "drill.forescale.dev/pool": "gpu"}
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kwok", "keda-operator", "keda-adapter")
HPA_SYNC_SECONDS = 15.0  # --horizontal-pod-autoscaler-sync-period's default
HPA_LEGACY_DOWNSCALE_SECONDS = 300.0  # --horizontal-pod-autoscaler-downscale-stabilization's default


@dataclass(frozen=True)
class Ports:
    """The control plane's ports on 127.0.0.1 (inside the drill's own network namespace they are always free)."""

    base: int = 16000

    def __getattr__(self, name: str) -> int:
        offsets = {"etcd": 0, "etcd_peer": 1, "apiserver": 2, "kcm": 3, "kwok": 4, "keda_metrics": 5,
                   "keda_probe": 6, "keda_grpc": 7, "adapter": 8, "adapter_metrics": 9, "prometheus": 10,
                   "scaler_grpc": 11, "scaler_http": 12, "exporter": 13}
        if name not in offsets:
            raise AttributeError(name)
        return self.base + offsets[name]

    def all(self) -> dict[str, int]:
        names = ("etcd", "etcd_peer", "apiserver", "kcm", "kwok", "keda_metrics", "keda_probe", "keda_grpc",
                 "adapter", "adapter_metrics", "prometheus", "scaler_grpc", "scaler_http", "exporter")
        return {n: getattr(self, n) for n in names}


def check_ports(ports: Ports) -> None:
    taken = [f"{n} {p}" for n, p in ports.all().items() if not port_free(p)]
    if taken:
        raise DrillError(f"port(s) already taken on 127.0.0.1: {', '.join(taken)}; stop what holds them or choose "
                         f"another --port-base (the drill uses {ports.base}..{ports.base + 13})")


def check_binaries(bin_dir: Path) -> dict[str, Path]:
    found = {b: bin_dir / b for b in BINARIES}
    missing = [b for b, p in found.items() if not p.is_file()]
    if missing:
        raise DrillError(f"missing drill binaries in {bin_dir}: {', '.join(missing)}; build them with "
                         f"`make drill-build` (Go and the Go module proxy)")
    return found


def _https_ok(url: str, ca: Path | None = None, cert=None) -> bool:
    ctx = ssl.create_default_context(cafile=str(ca)) if ca else ssl._create_unverified_context()  # noqa: S323
    if cert is not None:
        ctx.load_cert_chain(str(cert.cert), str(cert.key))
    with urllib.request.urlopen(url, context=ctx, timeout=3) as r:
        return r.status == 200


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=3) as r:
        return r.status == 200


@dataclass
class ControlPlane:
    bins: dict[str, Path]
    work: Path
    sup: Supervisor
    k: float = 5.0
    ports: Ports = field(default_factory=Ports)
    keda_crds: Callable[[], Path] | None = None  # where KEDA's CRDs are (asked when they are applied)
    pki: Pki | None = None
    kube: Kube | None = None
    audit_log: Path | None = None
    etcd_dir: Path | None = None
    versions: dict[str, str] = field(default_factory=dict)

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports.apiserver}"

    def kubeconfig(self, who: str) -> Path:
        assert self.pki is not None
        return write_kubeconfig(self.work / f"{who}.kubeconfig", self.server, self.pki.ca.cert, self.pki.clients[who], who)

    def start(self) -> "ControlPlane":
        self.work.mkdir(parents=True, exist_ok=True)
        self.pki = make_pki(self.work / "pki")
        self._etcd()
        self._apiserver()
        self.kube = Kube(self.server, self.pki.ca.cert, self.pki.clients["admin"])
        self._crds()
        self._controller_manager()
        self._kwok()
        self._keda()
        return self

    def stop(self) -> None:
        self.sup.stop_all()
        if self.etcd_dir is not None:
            shutil.rmtree(self.etcd_dir, ignore_errors=True)

    # ------------------------------------------------------------------ parts

    def _etcd(self) -> None:
        shm = Path("/dev/shm")
        self.etcd_dir = Path(tempfile.mkdtemp(prefix="forescale-drill-etcd-", dir=shm if shm.is_dir() else None))
        p = self.ports
        proc = self.sup.start("etcd", [str(self.bins["etcd"]), "--name=drill", f"--data-dir={self.etcd_dir}",
                                       "--unsafe-no-fsync", "--log-level=warn",
                                       f"--listen-client-urls=http://127.0.0.1:{p.etcd}",
                                       f"--advertise-client-urls=http://127.0.0.1:{p.etcd}",
                                       f"--listen-peer-urls=http://127.0.0.1:{p.etcd_peer}",
                                       f"--initial-advertise-peer-urls=http://127.0.0.1:{p.etcd_peer}",
                                       f"--initial-cluster=drill=http://127.0.0.1:{p.etcd_peer}"])
        self.sup.wait_ready(proc, lambda: _http_ok(f"http://127.0.0.1:{p.etcd}/health"), 60, "healthy")
        with urllib.request.urlopen(f"http://127.0.0.1:{p.etcd}/version", timeout=3) as r:
            self.versions["etcd"] = json.loads(r.read())["etcdserver"]

    def _apiserver(self) -> None:
        assert self.pki is not None
        k, p = self.pki, self.ports
        policy = self.work / "audit-policy.yaml"
        policy.write_text(yaml.safe_dump(AUDIT_POLICY, sort_keys=False))
        self.audit_log = self.work / "audit.log"
        argv = [str(self.bins["kube-apiserver"]), f"--etcd-servers=http://127.0.0.1:{p.etcd}",
                "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={p.apiserver}",
                f"--tls-cert-file={k.apiserver.cert}", f"--tls-private-key-file={k.apiserver.key}",
                f"--client-ca-file={k.ca.cert}", "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={k.service_account.cert}",
                f"--service-account-signing-key-file={k.service_account.key}",
                "--service-cluster-ip-range=10.96.0.0/16", "--disable-admission-plugins=ServiceAccount",
                "--endpoint-reconciler-type=none", "--enable-priority-and-fairness=false", "--profiling=false",
                f"--requestheader-client-ca-file={k.front_proxy_ca.cert}",
                "--requestheader-allowed-names=front-proxy-client", "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group", "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={k.front_proxy_client.cert}",
                f"--proxy-client-key-file={k.front_proxy_client.key}",
                f"--audit-policy-file={policy}", f"--audit-log-path={self.audit_log}", "--audit-log-format=json",
                "--audit-log-maxsize=0", "--audit-log-mode=blocking"]
        proc = self.sup.start("kube-apiserver", argv)
        self.sup.wait_ready(proc, lambda: _https_ok(f"{self.server}/readyz", k.ca.cert, k.clients["admin"]), 120, "ready")
        with urllib.request.urlopen(f"{self.server}/version", context=ssl.create_default_context(cafile=str(k.ca.cert)),
                                    timeout=3) as r:
            self.versions["kube-apiserver"] = json.loads(r.read())["gitVersion"]

    def _crds(self) -> None:
        assert self.kube is not None
        if self.keda_crds is None:
            raise DrillError("KEDA's CRDs were not found (the KEDA module in Go's module cache): run `make drill-build`")
        where = self.keda_crds()
        files = sorted(where.glob("*.yaml"))  # every CRD the operator watches (eventing's too)
        if not any(f.name == "keda.sh_scaledobjects.yaml" for f in files):
            raise DrillError(f"{where} holds no keda.sh_scaledobjects.yaml: is it KEDA's config/crd/bases?")
        for f in files:
            for doc in yaml.safe_load_all(f.read_text()):
                if doc:
                    self.kube.apply(doc)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                crd = self.kube.get("CustomResourceDefinition", "scaledobjects.keda.sh")
                if any(c["type"] == "Established" and c["status"] == "True"
                       for c in (crd.get("status") or {}).get("conditions") or ()):
                    break
            except KubeError:
                pass
            time.sleep(0.2)
        for ns in (KEDA_NAMESPACE, "drill"):
            self.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})

    def _controller_manager(self) -> None:
        assert self.pki is not None
        kc = self.kubeconfig("controller-manager")
        argv = [str(self.bins["kube-controller-manager"]), f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}",
                f"--authorization-kubeconfig={kc}", "--bind-address=127.0.0.1", f"--secure-port={self.ports.kcm}",
                f"--cert-dir={self.work / 'kcm-certs'}", "--leader-elect=false",
                "--use-service-account-credentials=false",
                "--controllers=deployment-controller,replicaset-controller,horizontal-pod-autoscaler-controller,"
                "garbage-collector-controller",
                f"--horizontal-pod-autoscaler-sync-period={HPA_SYNC_SECONDS / self.k:g}s",
                f"--horizontal-pod-autoscaler-downscale-stabilization={HPA_LEGACY_DOWNSCALE_SECONDS / self.k:g}s",
                "--kube-api-qps=200", "--kube-api-burst=400"]
        proc = self.sup.start("kube-controller-manager", argv)
        self.sup.wait_ready(proc, lambda: _https_ok(f"https://127.0.0.1:{self.ports.kcm}/healthz"), 60, "healthy")

    def _kwok(self) -> None:
        assert self.kube is not None
        cfg = self.work / "kwok.yaml"
        cfg.write_text(kwok_config())
        key, value = NODE_ANNOTATION
        argv = [str(self.bins["kwok"]), f"--kubeconfig={self.kubeconfig('kwok')}", f"--config={cfg}",
                "--manage-all-nodes=false", f"--manage-nodes-with-annotation-selector={key}={value}",
                f"--server-address=127.0.0.1:{self.ports.kwok}", "--node-ip=10.250.0.1", "--cidr=10.240.0.0/16"]
        proc = self.sup.start("kwok", argv)
        self.sup.wait_ready(proc, lambda: _http_ok(f"http://127.0.0.1:{self.ports.kwok}/healthz"), 60, "healthy")
        self.kube.apply({"apiVersion": "v1", "kind": "Node",
                         "metadata": {"name": NODE_NAME, "annotations": {key: value},
                                      "labels": {"kubernetes.io/hostname": NODE_NAME, "type": "kwok",
                                                 **GPU_NODE_LABELS}},
                         "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]}})

        def node_ready() -> bool:
            node = self.kube.get("Node", NODE_NAME)  # type: ignore[union-attr]
            return any(c["type"] == "Ready" and c["status"] == "True" for c in (node.get("status") or {}).get("conditions") or ())

        self.sup.wait_ready(proc, node_ready, 60, "managing its node")
        words = _first_line(self.bins["kwok"], "--version").split()  # "kwok version v0.8.0 go1.26.8 (linux/amd64)"
        self.versions["kwok"] = words[2] if len(words) > 2 and words[1] == "version" else " ".join(words)

    def _keda(self) -> None:
        assert self.pki is not None and self.kube is not None
        p, k = self.ports, self.pki
        env = {"WATCH_NAMESPACE": "", "KEDA_CLUSTER_OBJECT_NAMESPACE": KEDA_NAMESPACE, "POD_NAMESPACE": KEDA_NAMESPACE}
        op = self.sup.start("keda-operator", [
            str(self.bins["keda-operator"]), f"--metrics-bind-address=127.0.0.1:{p.keda_metrics}",
            f"--health-probe-bind-address=127.0.0.1:{p.keda_probe}",
            f"--metrics-service-bind-address=127.0.0.1:{p.keda_grpc}", f"--cert-dir={k.keda_grpc_dir}",
            "--leader-elect=false", "--zap-log-level=info", "--zap-encoder=json"],
            env={**env, "KUBECONFIG": str(self.kubeconfig("keda-operator"))})
        self.sup.wait_ready(op, lambda: _http_ok(f"http://127.0.0.1:{p.keda_probe}/readyz"), 90, "ready")
        kc = self.kubeconfig("keda-adapter")
        ad = self.sup.start("keda-adapter", [
            str(self.bins["keda-adapter"]), f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
            f"--lister-kubeconfig={kc}", "--bind-address=127.0.0.1", f"--secure-port={p.adapter}",
            f"--cert-dir={k.keda_grpc_dir}", f"--tls-cert-file={k.adapter_serving.cert}",
            f"--tls-private-key-file={k.adapter_serving.key}", f"--metrics-service-address=127.0.0.1:{p.keda_grpc}",
            "--metrics-service-grpc-authority=localhost", f"--port={p.adapter_metrics}", "--zap-log-level=info",
            "--zap-encoder=json"], env={**env, "KUBECONFIG": str(kc)})
        self.sup.wait_ready(ad, lambda: _https_ok(f"https://127.0.0.1:{p.adapter}/healthz", k.ca.cert), 90, "healthy")
        svc, ns = ADAPTER_SERVICE
        ca_bundle = __import__("base64").b64encode(k.ca.cert.read_bytes()).decode()
        self.kube.apply({"apiVersion": "v1", "kind": "Service", "metadata": {"name": svc, "namespace": ns},
                         "spec": {"type": "ExternalName", "externalName": "localhost",
                                  "ports": [{"name": "https", "port": p.adapter}]}})
        self.kube.apply({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                         "metadata": {"name": "v1beta1.external.metrics.k8s.io"},
                         "spec": {"group": "external.metrics.k8s.io", "version": "v1beta1", "groupPriorityMinimum": 100,
                                  "versionPriority": 100, "caBundle": ca_bundle,
                                  "service": {"name": svc, "namespace": ns, "port": p.adapter}}})

        def available() -> bool:
            a = self.kube.get("APIService", "v1beta1.external.metrics.k8s.io")  # type: ignore[union-attr]
            return any(c["type"] == "Available" and c["status"] == "True" for c in (a.get("status") or {}).get("conditions") or ())

        self.sup.wait_ready(ad, available, 90, "reachable through the aggregator (APIService Available)")
        self.versions["keda"] = _build_info(f"http://127.0.0.1:{p.keda_metrics}/metrics")


def _build_info(url: str) -> str:
    """KEDA's operator's own answer: ``keda_build_info{version=...}`` on its metrics endpoint."""
    import re

    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            text = r.read().decode("utf-8", "replace")
    except OSError:
        return "unknown"
    m = re.search(r'^keda_build_info\{[^}]*version="([^"]+)"', text, re.M)
    return m.group(1) if m else "unknown"


def _first_line(binary: Path, *args: str, default: str | None = None) -> str:
    import subprocess

    try:
        out = subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return default or "unknown"
    text = (out.stdout or out.stderr).strip().splitlines()
    return text[0] if text else (default or "unknown")
