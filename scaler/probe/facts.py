"""The facts a probe report carries beyond its timings: the device, the version, and the report itself.

``build_report`` assembles the ``status: ok`` report (schema in :mod:`scaler.probe.report`) from
the phases the runner timed; ``device_facts`` describes the device the probe ran on.
"""

from __future__ import annotations

from .config import ProbeConfig
from .plan import Plan
from .report import PHASES, SCHEMA, FORMULA, host_facts, now_iso, percentile, predictions, t_cold, throughput


def build_report(cfg: ProbeConfig, plan: Plan, *, phases_timed: dict, details: dict, started_at: str | None,
                 model_facts: dict, device_facts: dict, eviction, first_seconds: float, req_tokens: int,
                 shallow_tokens: int) -> dict:
    """The successful report at readiness; ``phases_timed``/``details`` are the runner's per-phase seconds and
    details. The steady-state figures come after readiness (:func:`steady_facts`)."""
    phases = {name: phases_timed[name] for name in PHASES}
    total = t_cold(phases, cfg.image_pull_seconds, cfg.scheduling_seconds)
    read = throughput(details["weights_read"]["bytes"], phases["weights_read"])
    h2d = throughput(details["weights_to_device"]["bytes"], phases["weights_to_device"])
    preds = predictions(total, phases, plan.info.file_bytes, read["bytes_per_second"], h2d["bytes_per_second"])
    disk_source = ("cold read (evicted from the page cache)" if eviction.evicted else
                   "page cache (not evicted: this is not a cold-disk figure)")
    return {
        "schema": SCHEMA, "status": "ok", "reason": None, "forescale_version": forescale_version(),
        "started_at": started_at, "finished_at": now_iso(),
        "model": model_facts, "device": device_facts, "host": host_facts(),
        "phases": phases,
        "phase_details": {k: dict(details.get(k, {})) for k in PHASES},
        "extras": {"image_pull_seconds": float(cfg.image_pull_seconds),
                   "scheduling_seconds": float(cfg.scheduling_seconds)},
        "t_cold_seconds": total,
        "throughput": {"weights_read": read, "weights_to_device": h2d, "raw_read": None,
                       "load_vs_raw_ratio": None, "h2d": None},
        "page_cache": {"weights_read": eviction.as_dict(), "raw_read": None, "comparable": None},
        "inference": {"request_tokens": req_tokens, "first_seconds": first_seconds, "steady": None,
                      "first_request_penalty": None},
        "warmup": {"shallow": {"requests": cfg.warmup.shallow_requests, "tokens": shallow_tokens},
                   "deep": plan.deep.describe(),
                   "concurrent": {"threads": cfg.warmup.concurrency, "tokens": req_tokens}},
        "predictions": preds,
        "prediction_basis": {"size_bytes": plan.info.file_bytes, "disk_bytes_per_second": read["bytes_per_second"],
                             "h2d_bytes_per_second": h2d["bytes_per_second"], "disk_source": disk_source,
                             "formula": FORMULA},
    }


def steady_facts(latencies: list[float]) -> dict:
    """The report's ``inference.steady``: requests timed one by one after readiness."""
    return {"requests": len(latencies), "seconds": sum(latencies), "p50_seconds": percentile(latencies, 0.5),
            "p95_seconds": percentile(latencies, 0.95), "mean_seconds": sum(latencies) / len(latencies),
            "min_seconds": min(latencies), "max_seconds": max(latencies)}


def device_facts(torch, device) -> dict:
    """The report's ``device`` section: type, index, name, memory_bytes, cuda_version."""
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return {"type": "cuda", "index": device.index, "name": props.name, "memory_bytes": props.total_memory,
                "cuda_version": torch.version.cuda}
    return {"type": "cpu", "index": None, "name": cpu_name(), "memory_bytes": host_facts()["memory_bytes"],
            "cuda_version": None}


def cpu_name() -> str:
    """The CPU model name (from /proc/cpuinfo where there is one)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "cpu"


def forescale_version() -> str:
    """The installed forescale version, or "unknown"."""
    try:
        from importlib.metadata import version

        return version("forescale")
    except Exception:
        return "unknown"
