"""The trigger metadata's vocabulary: every key forescale reads, its documented default and its meaning.

``KEYS`` is the single table of it: ``scaler.spec`` parses by it, the generated reference
(docs/reference.md, ``python -m scaler.cli.docref``) is made from it and checked against it by a test.
Each default is declared here once (``DEFAULTS``).
"""

from __future__ import annotations

from dataclasses import dataclass

from forecaster.models import BUILTINS, DEFAULT as DEFAULT_MODEL, NAMES

from .deadband import KUBERNETES_TOLERANCE
from .scaledobject import GRPC_PORT  # noqa: F401 (re-exported: the vocabulary's callers import it from here)

MODES = ("forecastAndScale", "forecastOnly", "reactive")
MODELS = NAMES  # the forecaster's registry (forecaster.models.NAMES: the built-ins and the plugins accepted), no copy


@dataclass(frozen=True)
class Key:
    name: str
    default: str | None  # as the reference shows it; None = required or derived
    doc: str


# The vocabulary, in the reference's order. ``default`` is the documented default.
# The history `holidays` wants: one that holds the earlier holidays the similar-day rule learns from (most US
# holidays are under two months apart); 86,400 steps at the default step, within MAX_HISTORY_STEPS
HOLIDAY_HISTORY = "60d"

KEYS: tuple[Key, ...] = (
    Key("serverAddress", None, "Prometheus base URL, http(s)://host:port[/path] (required)"),
    Key("query", None, "PromQL whose single result is the workload's request rate in requests/s (required)"),
    Key("qpsPerReplica", None, "sustainable requests/s of one ready replica; the HPA target (required, in [0.001, 1e9])"),
    Key("threshold", None, "alias of qpsPerReplica, as in KEDA's Prometheus scaler"),
    Key("tokenQuery", "", "PromQL whose single result is the workload's weighted token rate in tokens/s (vLLM: "
                          "rate(vllm:generation_tokens_total[2m]) + 0.02 * rate(vllm:prompt_tokens_total[2m])); with "
                          "tokensPerReplica the scaler observes, forecasts and acts on the binding load "
                          "max(query, qpsPerReplica x tokenQuery / tokensPerReplica), in requests/s"),
    Key("tokensPerReplica", "", "with tokenQuery (and only with it): the weighted tokens/s one ready replica "
                                "sustains, in [0.001, 1e12]"),
    Key("queueQuery", "", "PromQL whose single result is the requests waiting, summed over the workload's replicas "
                          "(vLLM: sum(vllm:num_requests_waiting{model_name=\"m\"})); observed in the background, "
                          "and with queueTarget the closed loop's queue signal"),
    Key("readyReplicasQuery", "", "PromQL whose single result is the workload's ready replicas (kube-state-metrics: "
                                  "kube_deployment_status_replicas_ready{deployment=\"d\",namespace=\"n\"}, or "
                                  "count(vllm:num_requests_waiting{...})); absent: the queue is divided by the "
                                  "replicas the last answer asked for, ceil(value / qpsPerReplica)"),
    Key("queueTarget", "", "with queueQuery: the waiting requests per ready replica the closed loop holds the "
                           "workload under (in [0.001, 1e6]); over it the answer rises, never below the forecast "
                           "plan (scaler.feedback)"),
    Key("ttftQuery", "", "PromQL whose single result is a time-to-first-token percentile in seconds (vLLM: "
                         "histogram_quantile(0.95, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[2m]))))"),
    Key("ttftTarget", "", "with ttftQuery: the TTFT in seconds the closed loop holds the workload under "
                          "(in [0.001, 3600])"),
    Key("itlQuery", "", "PromQL whose single result is an inter-token latency percentile in seconds (vLLM: "
                        "histogram_quantile(0.95, sum by (le) (rate(vllm:inter_token_latency_seconds_bucket[2m]))); "
                        "older vLLM: vllm:time_per_output_token_seconds)"),
    Key("itlTarget", "", "with itlQuery: the inter-token latency in seconds the closed loop holds the workload "
                         "under (in [0.001, 3600])"),
    Key("capacityModel", "", "path of a capacity model file (forescale loadtest --grid-input ... --capacity-model; a "
                             "mounted ConfigMap under --capacity-dir, JSON, at most 1 MiB), re-read on change: the "
                             "load is max(query x qpsPerReplica / its qps, qpsPerReplica x (w x inputTokenQuery + "
                             "outputTokenQuery) / its token budget), its figures x (1 - margin); a mix outside the "
                             "lengths it was measured on is clamped to them, and said; instead of tokenQuery and "
                             "tokensPerReplica; until it is read, the request rate alone"),
    Key("inputTokenQuery", "", "with capacityModel: PromQL whose single result is the prompt tokens/s (vLLM: "
                               "sum(rate(vllm:prompt_tokens_total[2m])))"),
    Key("outputTokenQuery", "", "with capacityModel: PromQL whose single result is the generated tokens/s (vLLM: "
                                "sum(rate(vllm:generation_tokens_total[2m])))"),
    Key("servedModel", "", "with capacityModel: the model the workload serves; a capacity file measured on another "
                           "is not used (its trigger says why)"),
    Key("capacity", "configured", "configured | learned: the per-replica capacity the value is planned on: "
                                  "qpsPerReplica (and capacityModel) as given, or the one learned online (the load "
                                  "served per ready replica while the queue is non-empty, settled 2 min; its median "
                                  "over a day), bounded to [0.5, 2] x the configured and moved only when it differs "
                                  "by more than 10 %; needs queueQuery and readyReplicasQuery, with which the "
                                  "learned ratio is exported either way"),
    Key("activationThreshold", "0", "IsActive is true when the planned rate is strictly greater than this (in [0, 1e12])"),
    Key("ignoreNullValues", "true", "no usable value (no series, NaN) reads 0 req/s where there was no series or an "
                                    "idle one (at most activationThreshold) before; after an active series it is "
                                    "missing data: held on the forecast, then UNAVAILABLE; false makes it an error"),
    Key("queryParameters", "", "extra HTTP query parameters for Prometheus, key1=value1,key2=value2"),
    Key("customHeaders", "", "extra HTTP headers for Prometheus, key1=value1,key2=value2 (never logged)"),
    Key("unsafeSsl", "false", "skip TLS certificate verification of Prometheus"),
    Key("timeout", "5000", "Prometheus HTTP timeout in milliseconds (or a duration such as 5s); at most 60000 (60s)"),
    Key("credentials", "", "name of a credential set held by the scaler (bearer, basic or TLS client cert files)"),
    Key("metricName", "", "metric name sent to KEDA (lower-cased); default forescale-<namespace>-<name>"),
    Key("coldStartSeconds", "180", "T_cold: seconds from pod creation to a ready, warmed replica (in [0, 86400])"),
    Key("coldStartQuery", "", "PromQL returning T_cold in seconds (the probe's metric); overrides coldStartSeconds; "
                             "a value making the lead exceed 1d is FAILED_PRECONDITION"),
    Key("coldStartFrom", "metadata", "metadata (coldStartQuery, else coldStartSeconds) | cluster: the pods' start-ups, else those"),
    Key("coldStartWorkload", "", "with coldStartFrom cluster: Deployment/NAME or StatefulSet/NAME in the ScaledObject's namespace"),
    Key("coldStartSelector", "", "with coldStartFrom cluster, instead of coldStartWorkload: label matchers on kube_pod_labels"),
    Key("coldStartQuantile", "0.9", "with coldStartFrom cluster: T_cold is this quantile of created->ready, in (0, 1)"),
    Key("coldStartWindow", "7d", "with coldStartFrom cluster: the start-ups looked at (duration, 1h to 30d)"),
    Key("coldStartMinSamples", "10", "with coldStartFrom cluster: starts needed, else the fallback with its reason (1 to 10000)"),
    Key("bufferSeconds", "", "T_buffer in one number (in [0, 86400]); else the sum of the three parts below"),
    Key("forecastErrorSeconds", "30", "part of T_buffer: slack for forecast timing error (in [0, 86400]), or auto: "
                                      "measured from the live scores, the lead slack the provisioned quantile needed "
                                      "to cover its share over the last 24 h, with 30 s as its prior (scaler.leaderror; "
                                      "in [0, 600])"),
    Key("schedulingSeconds", "60", "part of T_buffer: KEDA polling (30 s) + HPA sync (15 s) + pod scheduling (in [0, 86400])"),
    Key("readinessSeconds", "15", "part of T_buffer: readiness probe delay after warm-up (in [0, 86400]); the lead "
                                                "L = T_cold + T_buffer is at most 1d"),
    Key("mode", "forecastAndScale", "forecastAndScale | forecastOnly (shadow: act on observed) | reactive"),
    Key("model", DEFAULT_MODEL, " | ".join(BUILTINS) + " | an installed model plugin's name (entry point group "
                                     "forescale.models)"),
    Key("levelCorrection", "4h", "half-life of the current forecast residual carried over the horizon (duration, at most 30d; 0 = off)"),
    Key("quantile", "0.8", "forecast quantile to provision for, in (0, 1)"),
    Key("history", "14d", "history window fitted (duration: 90s, 15m, 6h, 14d, 2w; at most 90d and 100,000 steps)"),
    Key("step", "60s", "resolution of the history and the forecast (duration, 1s to 1h)"),
    Key("refitInterval", "30m", "how often the forecast is refitted (duration, 10s to 1d); the forecast horizon, 2 x refitInterval + "
                                      "the lead, is at most 50,000 steps"),
    Key("minHistory", "1d", "history needed before forecasts are trusted (duration, at most history)"),
    Key("headroom", "1.0", "multiplier on the planned rate, in [1, 100]"),
    Key("floorReplicas", "0", "always-warm replicas under the forecast (hybrid): floorReplicas x qpsPerReplica is added to the "
                              "observed rate and to the forecast (in [0, 10000]); pair it with minReplicaCount of the same"),
    Key("hpaTolerance", f"{KUBERNETES_TOLERANCE.up:g}", "the HPA's tolerance; the value is pushed past its dead band (0 turns that off)"),
    Key("tuning", "auto", "off | auto: the scaler picks mode, model, quantile, levelCorrection, headroom, "
                          "hpaTolerance and floorReplicas itself from its own history (forescale tune's selection), on a slow schedule; "
                          "default auto, off when any of those keys is set"),
    Key("targetMiss", "0.25x", "with tuning auto: the largest acceptable fraction of requests above ready capacity "
                              "(0.005), or a multiple of reactive KEDA's on the same history (0.5x)"),
    Key("maxCostRatio", "1.3", "with tuning auto: the largest acceptable cost, replica-hours / a perfect-foresight "
                               "oracle's (in (0, 1000]; none: no cap)"),
    Key("tuningMinHistory", "7d", "with tuning auto: history needed before the first selection (duration, 4h to history)"),
    Key("refreshInterval", "", "how often the observed rate is queried (duration, 1s to 10m); default: the cadence "
                               "KEDA polls this ScaledObject, learned from its calls, at least 5s"),
    Key("holidays", "", "public holidays of a country, optionally with a subdivision (US, US-CA, GB, DE-BY; the "
                        "holidays package), calendar days of timezone; empty = off: holidays are not copied into "
                        "the next week and are forecast as holidayAs; learning from earlier holidays wants "
                        f"history {HOLIDAY_HISTORY} or more (forescale check warns)"),
    Key("timezone", "UTC", "with holidays: the IANA time zone whose calendar days the holidays are (America/New_York: "
                           "local midnight to local midnight, 23 or 25 h on a DST change)"),
    Key("holidayWindow", "0", "with holidays: days before and after each holiday treated as holidays too (0 to 7)"),
    Key("holidayAs", "learned", "with holidays: how a holiday ahead is forecast: learned (the effect of the past "
                               "holidays in the history; none: an ordinary day), ordinary, or as a weekday "
                               "(monday ... sunday)"),
    Key("eventsFile", "", "path of an events file (a mounted ConfigMap; CSV name,start,end,multiplier,floor_qps or "
                          "YAML; at most 256 KiB), re-read on change: a multiplier or a floor on the planned rate over "
                          "[start - L, end]"),
    Key("tuningInterval", "24h", "with tuning auto: how often the selection is re-run (duration, 10m to 30d)"),
    Key("gpuBudget", "", "the name of a GPU budget of the scaler's --budget-file that this workload draws on: its "
                         "answer is capped so that the replicas of the budget's members fit in its GPUs (reason "
                         "budget_capped); empty = no budget"),
    Key("gpusPerReplica", "", "with gpuBudget (required with it): GPUs one replica holds, in (0, 1024] (0.5: a "
                              "half-GPU slice)"),
    Key("valuePerRequest", "1", "with gpuBudget: what one lost request of this workload costs ($), in [0, 1e9]; "
                                "the same for all: the most requests per GPU go first"),
    Key("minReplicaCount", "0", "with gpuBudget: the ScaledObject's minReplicaCount (the scaler cannot read it): "
                                "the replicas the budget always leaves it, in [0, 10000]"),
)
DEFAULTS: dict[str, str] = {k.name: k.default for k in KEYS if k.default is not None}  # the one place
TUNING = ("off", "auto")
TUNED_KEYS = ("mode", "model", "quantile", "levelCorrection", "headroom", "hpaTolerance", "floorReplicas")  # what tuning replaces
KNOWN = {k.name for k in KEYS} | {"scalerAddress"}  # scalerAddress is KEDA's own key
