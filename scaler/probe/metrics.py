"""Prometheus metrics of one probe, on its own registry (safe to embed in a server).

    forescale_cold_start_seconds{model,device,phase}          one per phase, plus
                                                             phase="image_pull", "scheduling" (given) and "total" (T_cold)
    forescale_cold_start_predicted_seconds{model,device,eta}  T_cold predicted for page-cache hit ratio eta
    forescale_probe_throughput_bytes_per_second{model,device,transfer}
                                                             transfer = weights_read | raw_read | weights_to_device
                                                             | h2d_pinned | h2d_pageable
    forescale_probe_load_vs_raw_read_ratio{model,device}      weights_read throughput / raw sequential read
    forescale_probe_weights_bytes{model,kind}                 kind = file | tensors
    forescale_probe_inference_seconds{model,device,stat}      stat = first | p50 | p95 (steady state, timed
                                                             after readiness: not part of T_cold)
    forescale_probe_first_request_penalty_ratio{model,device} first / steady p50
    forescale_probe_ready{model}                              1 once warm-up finished, else 0
    forescale_probe_state{model,forescale_probe_state}        the current state (one label value is 1)
    forescale_probe_info{model,device,device_name,dtype,torch_version,parameters}

Serving (``POST /v1/completions`` once ready):

    forescale_requests_total{model,code}                      requests answered, by HTTP status
    forescale_request_duration_seconds{model}                 histogram: arrival to last byte (successful requests)
    forescale_time_to_first_token_seconds{model}              histogram: arrival to the first token
    forescale_queue_depth{model}                              requests waiting for a batch slot
    forescale_capacity_qps{model}                             the measured qpsPerReplica (``--capacity-from``)
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import Enum as EnumMetric

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
STATES = ("pending", "validating", "preparing", "runtime_import", "device_init", "weights_read", "weights_to_device",
          "first_inference", "warmup_shallow", "warmup_deep", "warmup_concurrent", "ready",
          "failed", "stopping", "watch_health", "watch_completion")


class ProbeMetrics:
    def __init__(self, model: str, registry: CollectorRegistry | None = None) -> None:
        self.model = model
        self.device = "unknown"
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.cold = Gauge("forescale_cold_start_seconds", "Measured cold-start time per phase (phase=\"total\": T_cold)",
                          ["model", "device", "phase"], registry=r)
        self.predicted = Gauge("forescale_cold_start_predicted_seconds",
                               "T_cold predicted for a page-cache/node-cache hit ratio eta", ["model", "device", "eta"],
                               registry=r)
        self.throughput = Gauge("forescale_probe_throughput_bytes_per_second", "Measured transfer throughput",
                                ["model", "device", "transfer"], registry=r)
        self.ratio = Gauge("forescale_probe_load_vs_raw_read_ratio",
                           "Weights load throughput as a fraction of a raw sequential read of the same file",
                           ["model", "device"], registry=r)
        self.bytes = Gauge("forescale_probe_weights_bytes", "Size of the weights", ["model", "kind"], registry=r)
        self.inference = Gauge("forescale_probe_inference_seconds", "Latency of the probe request",
                               ["model", "device", "stat"], registry=r)
        self.penalty = Gauge("forescale_probe_first_request_penalty_ratio", "First request latency / steady p50",
                             ["model", "device"], registry=r)
        self.ready = Gauge("forescale_probe_ready", "1 once the model is loaded and warmed up", ["model"], registry=r)
        self.state = EnumMetric("forescale_probe_state", "Current probe state", ["model"], states=list(STATES),
                                registry=r)
        self.info = Gauge("forescale_probe_info", "Facts about the probed model and device (value 1)",
                          ["model", "device", "device_name", "dtype", "torch_version", "parameters"], registry=r)
        self.requests = Counter("forescale_requests", "Completion requests answered, by HTTP status",
                                ["model", "code"], registry=r)
        self.duration = Histogram("forescale_request_duration_seconds",
                                  "Completion latency, arrival to last byte (successful requests)", ["model"],
                                  buckets=LATENCY_BUCKETS, registry=r)
        self.ttft = Histogram("forescale_time_to_first_token_seconds", "Arrival to the first generated token",
                              ["model"], buckets=LATENCY_BUCKETS, registry=r)
        self.queue = Gauge("forescale_queue_depth", "Completion requests waiting for a batch slot", ["model"],
                           registry=r)
        self.capacity = Gauge("forescale_capacity_qps", "Measured sustainable req/s of one replica at the latency "
                              "SLO (forescale loadtest)", ["model"], registry=r)
        self.ready.labels(model).set(0)
        self.state.labels(model).state("pending")

    def set_state(self, state: str) -> None:
        self.state.labels(self.model).state(state)

    def set_ready(self, ready: bool) -> None:
        self.ready.labels(self.model).set(1 if ready else 0)

    def set_phase(self, phase: str, seconds: float) -> None:
        self.cold.labels(self.model, self.device, phase).set(seconds)

    def set_info(self, device: str, device_name: str, dtype: str, torch_version: str, parameters: int) -> None:
        self.device = device
        self.info.clear()  # one info series: the latest facts
        self.info.labels(self.model, device, device_name, dtype, torch_version, str(parameters)).set(1)

    def publish_report(self, report: dict) -> None:
        """Everything a finished report holds (idempotent)."""
        m, d = self.model, self.device
        for phase, seconds in report["phases"].items():
            self.cold.labels(m, d, phase).set(seconds)
        self.cold.labels(m, d, "image_pull").set(report["extras"]["image_pull_seconds"])
        self.cold.labels(m, d, "scheduling").set(report["extras"]["scheduling_seconds"])
        self.cold.labels(m, d, "total").set(report["t_cold_seconds"])
        for p in report["predictions"]:
            self.predicted.labels(m, d, f"{p['eta']:g}").set(p["t_cold_seconds"])
        tp = report["throughput"]
        for key in ("weights_read", "raw_read", "weights_to_device"):
            if tp.get(key):
                self.throughput.labels(m, d, key).set(tp[key]["bytes_per_second"])
        for mode, entry in (tp.get("h2d") or {}).items():
            self.throughput.labels(m, d, f"h2d_{mode}").set(entry["bytes_per_second"])
        if tp.get("load_vs_raw_ratio") is not None:
            self.ratio.labels(m, d).set(tp["load_vs_raw_ratio"])
        self.bytes.labels(m, "file").set(report["model"]["weights_file_bytes"])
        self.bytes.labels(m, "tensors").set(report["model"]["weights_tensor_bytes"])
        inf = report["inference"]
        self.inference.labels(m, d, "first").set(inf["first_seconds"])
        if inf.get("steady"):  # timed after readiness: absent until then
            self.inference.labels(m, d, "p50").set(inf["steady"]["p50_seconds"])
            self.inference.labels(m, d, "p95").set(inf["steady"]["p95_seconds"])
            self.penalty.labels(m, d).set(inf["first_request_penalty"])

    def observe_request(self, code: int, seconds: float | None = None, ttft: float | None = None) -> None:
        self.requests.labels(self.model, str(code)).inc()
        if seconds is not None:
            self.duration.labels(self.model).observe(seconds)
        if ttft is not None:
            self.ttft.labels(self.model).observe(ttft)

    def set_queue(self, depth: int) -> None:
        self.queue.labels(self.model).set(depth)

    def set_capacity(self, qps: float) -> None:
        self.capacity.labels(self.model).set(qps)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
