"""What the drill's control plane is configured with: the apiserver's audit policy (what the judge reads) and
KWOK's stages (the fake GPU node, pods Ready exactly ``READY_ANNOTATION`` after KWOK sees them, deletions at
once)."""

from __future__ import annotations

import yaml

READY_ANNOTATION = "drill.forescale.dev/ready-after"  # KWOK's pod-ready stage waits this long (a Go duration)


AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
    "rules": [
        # the HPA's syncs: the scale it reads (spec.replicas), the metrics it asks for (proxied to KEDA's adapter:
        # the aggregator keeps no response body), the scale and status it writes
        {"level": "Metadata", "verbs": ["get", "list"], "resources": [{"group": "external.metrics.k8s.io"}]},
        {"level": "RequestResponse", "verbs": ["get", "update", "patch"],
         "resources": [{"group": "apps", "resources": ["deployments/scale"]}]},
        {"level": "RequestResponse", "verbs": ["update", "patch", "create"],
         "resources": [{"group": "autoscaling", "resources": ["horizontalpodautoscalers",
                                                               "horizontalpodautoscalers/status"]}]},
        # KEDA's fallback health (failures per metric) and conditions
        {"level": "RequestResponse", "verbs": ["update", "patch"],
         "resources": [{"group": "keda.sh", "resources": ["scaledobjects/status"]}]},
        # the pods' lives: created (the response names the generated pod), Ready (KWOK's status patch), deleted
        {"level": "RequestResponse", "verbs": ["create"], "resources": [{"group": "", "resources": ["pods"]}]},
        {"level": "Metadata", "verbs": ["update", "patch", "delete"],
         "resources": [{"group": "", "resources": ["pods", "pods/status"]}]},
        {"level": "None"},
    ],
}


def kwok_config(cidr: str = "10.240.0.0/16") -> str:
    """KWOK's stages: the node initialised as Ready with 8 GPUs; a pod Ready exactly ``READY_ANNOTATION`` after
    KWOK first sees it (no jitter); a deleted pod removed at once."""
    node = {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": "node-initialize"},
            "spec": {"resourceRef": {"apiGroup": "v1", "kind": "Node"},
                     "selector": {"matchExpressions": [
                         {"key": '.status.conditions.[] | select( .type == "Ready" ) | .status',
                          "operator": "NotIn", "values": ["True"]}]},
                     "next": {"statusTemplate": NODE_STATUS}}}
    ready = {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": "pod-ready"},
             "spec": {"resourceRef": {"apiGroup": "v1", "kind": "Pod"},
                      "selector": {"matchExpressions": [
                          {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                          {"key": ".status.podIP", "operator": "DoesNotExist"}]},
                      "delay": {"durationMilliseconds": 0,
                                "durationFrom": {"expressionFrom": f'.metadata.annotations["{READY_ANNOTATION}"]'}},
                      "next": {"statusTemplate": POD_READY_STATUS}}}
    delete = {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": "pod-delete"},
              "spec": {"resourceRef": {"apiGroup": "v1", "kind": "Pod"},
                       "selector": {"matchExpressions": [
                           {"key": ".metadata.deletionTimestamp", "operator": "Exists"}]},
                       "delay": {"durationMilliseconds": 0}, "next": {"finalizers": {"empty": True},
                                                                     "delete": True}}}
    return yaml.safe_dump_all([node, ready, delete], sort_keys=False)


NODE_STATUS = """\
{{ $now := Now }}
conditions:
- lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $now | Quote }}
  message: kwok
  reason: KubeletReady
  status: "True"
  type: Ready
addresses:
- address: {{ NodeIP | Quote }}
  type: InternalIP
allocatable:
  cpu: "64"
  memory: 512Gi
  nvidia.com/gpu: "8"
  pods: "256"
capacity:
  cpu: "64"
  memory: 512Gi
  nvidia.com/gpu: "8"
  pods: "256"
nodeInfo:
  architecture: amd64
  kubeletVersion: kwok
  operatingSystem: linux
phase: Running
"""

POD_READY_STATUS = """\
{{ $now := Now }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Initialized
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Ready
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: ContainersReady
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: PodScheduled
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: true
  restartCount: 0
  started: true
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ end }}
hostIP: {{ NodeIPWith .spec.nodeName | Quote }}
podIP: {{ PodIPWith .spec.nodeName false ( or .metadata.uid "" ) ( or .metadata.name "" ) ( or .metadata.namespace "" ) | Quote }}
phase: Running
startTime: {{ $now | Quote }}
"""
