"""A KEDA ScaledObject as forescale reads and writes it: every default KEDA and Kubernetes fill in, declared once,
and the one writer of the ScaledObject forescale prints.

The replay's manifest reader (``scaler.replay.manifest``), its KEDA/HPA settings (``scaler.replay.hpa.Hpa``),
``forescale check`` and the writer below (``scaled_object``: ``forescale tune``, the fleet, ``backtest --advise``)
all take these values from here, so a printed ScaledObject is replayed with the very defaults it was written with.
Plain data, no imports: the core (``scaler.policy``, ``scaler.keys``) builds on it.
"""

from __future__ import annotations

from typing import Mapping

# ---------------------------------------------------------------- forescale's own side of the trigger

GRPC_PORT = 6000  # the scaler's gRPC port: serve --port, the chart, the printed scalerAddress (not 9090: Prometheus')
DEFAULT_SCALER_ADDRESS = f"forescale.forescale.svc.cluster.local:{GRPC_PORT}"  # the scalerAddress printed
# the stand-ins of a printed ScaledObject where the user has not said (replace them before applying it)
PLACEHOLDER_SERVER = "http://prometheus-server.monitoring.svc.cluster.local:80"
PLACEHOLDER_QUERY = "sum(rate(http_requests_total[2m]))"
PLACEHOLDER_NAME = "my-model"  # the ScaledObject's and its Deployment's name when none is given
# the Helm chart's default mTLS: KEDA presents the client certificate of this ClusterTriggerAuthentication
AUTHENTICATION_REF = {"name": "forescale-mtls", "kind": "ClusterTriggerAuthentication"}
AUTHENTICATION_NOTE = (
    "authenticationRef forescale-mtls: the Helm chart's default mTLS (KEDA's client certificate; "
    "<release>-mtls for another release name); drop it if the scaler runs without TLS"
)
# metadata.annotations of a printed ScaledObject: the world it was ranked in, as `forescale backtest` flags
# (``scaler.cli.replayflags``), so that ``backtest --scaledobject`` replays it there without being told again
REPLAY_ANNOTATION = "forescale.io/replay"
REPLAY_NOTE = (
    f"{REPLAY_ANNOTATION}: the world tune replayed (span, replica capacity, T_cold...): `forescale backtest "
    "TRACE --scaledobject FILE` reads it and gives the figures above; a flag given there wins, with a warning"
)
PASTE_NOTE = (
    "tuning: \"off\" runs these knobs as replayed; \"auto\" lets the scaler re-choose them from its own "
    "history after tuningMinHistory (these run until then)"
)

# ---------------------------------------------------------------- KEDA's defaults (ScaledObject spec)

POLLING_SECONDS = 30  # spec.pollingInterval
COOLDOWN_SECONDS = 300  # spec.cooldownPeriod: inactive this long before scaling to zero
MIN_REPLICAS = 0  # spec.minReplicaCount
MAX_REPLICAS = 100  # spec.maxReplicaCount
METRIC_TYPES = ("AverageValue", "Value")  # triggers[].metricType, KEDA's default first

# ---------------------------------------------------------------- Kubernetes' HPA defaults (controller flags, behavior)

SYNC_SECONDS = 15  # --horizontal-pod-autoscaler-sync-period
HPA_TOLERANCE = 0.1  # --horizontal-pod-autoscaler-tolerance (both directions; scaler.deadband.KUBERNETES_TOLERANCE)
SELECT_DEFAULT = "Max"  # behavior.*.selectPolicy
UP_WINDOW_SECONDS = 0  # behavior.scaleUp.stabilizationWindowSeconds
UP_PODS, UP_PERCENT, UP_PERIOD_SECONDS = 4, 100, 15  # behavior.scaleUp.policies: +max(4 pods, 100 %) per 15 s
DOWN_WINDOW_SECONDS = 300  # behavior.scaleDown.stabilizationWindowSeconds (--horizontal-pod-autoscaler-downscale-...)
DOWN_PERCENT, DOWN_PERIOD_SECONDS = 100, 15  # behavior.scaleDown.policies: -100 % per 15 s
# the same policies as (type, value, periodSeconds), as a manifest spells them
UP_DEFAULT = (("Pods", UP_PODS, UP_PERIOD_SECONDS), ("Percent", UP_PERCENT, UP_PERIOD_SECONDS))
DOWN_DEFAULT = (("Percent", DOWN_PERCENT, DOWN_PERIOD_SECONDS),)


def scaled_object(
    md: Mapping[str, str],
    *,
    name: str,
    namespace: str = "",
    min_replicas: int = MIN_REPLICAS,
    max_replicas: int = MAX_REPLICAS,
    tolerance: float | None = None,
    replay: str = "",
) -> dict:
    """A whole ScaledObject (plain data, KEDA's schema) with one forescale trigger of metadata ``md``.

    It spells out the HPA behaviour the replay runs (Kubernetes' defaults above: +max(4 pods, 100 %) per 15 s up
    without stabilisation, -100 % per 15 s down after a 300 s stabilisation window), so that
    ``backtest --scaledobject`` and a cluster run what was ranked; ``tolerance``: the HPA's scale-up tolerance,
    written when it is not Kubernetes' default (a beta field; the replay's default is the cluster's); ``replay``:
    the world it was replayed in, as the annotation ``REPLAY_ANNOTATION`` (backtest flags; "" for none).
    """

    def rules(window: int, policies: tuple) -> dict:
        return {
            "stabilizationWindowSeconds": window,
            "selectPolicy": SELECT_DEFAULT,
            "policies": [{"type": k, "value": int(v), "periodSeconds": int(p)} for k, v, p in policies],
        }

    up = rules(UP_WINDOW_SECONDS, UP_DEFAULT)
    if tolerance is not None and abs(tolerance - HPA_TOLERANCE) > 1e-12:
        up["tolerance"] = format(float(tolerance), "g")
    spec: dict = {
        "scaleTargetRef": {"name": name},
        "minReplicaCount": int(min_replicas),
        "maxReplicaCount": int(max_replicas),
        "advanced": {
            "horizontalPodAutoscalerConfig": {
                "behavior": {"scaleUp": up, "scaleDown": rules(DOWN_WINDOW_SECONDS, DOWN_DEFAULT)}
            }
        },
        "triggers": [{"type": "external", "metadata": dict(md)}],
    }
    meta: dict = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    if replay:
        meta["annotations"] = {REPLAY_ANNOTATION: replay}
    return {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": meta, "spec": spec}
