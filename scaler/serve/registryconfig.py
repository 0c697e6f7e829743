"""The registry's settings (``RegistryConfig``) and which Prometheus errors are the configuration's fault."""

from __future__ import annotations

from dataclasses import dataclass

from ..learned import MIN_SAMPLES, SETTLE_SECONDS
from ..limits import MAX_TRACKED, MAX_TRACKED_PER_NAMESPACE
from ..prom import PromErrorKind

# Errors that mean the configuration is wrong: no amount of waiting fixes them.
PRECONDITION = {PromErrorKind.REJECTED, PromErrorKind.NO_DATA, PromErrorKind.MULTIPLE_SERIES,
                PromErrorKind.BAD_VALUE, PromErrorKind.CREDENTIALS, PromErrorKind.TOO_LARGE}


@dataclass(frozen=True)
class RegistryConfig:
    refresh_seconds: float = 5.0  # the floor of the refresh interval (KEDA's learned cadence, or refreshInterval)
    max_refresh_seconds: float = 60.0  # a learned cadence longer than this counts as this
    cold_start_refresh_seconds: float = 60.0
    stale_seconds: float = 120.0  # how long the last good observation stands in for an unreachable Prometheus
    forget_seconds: float = 900.0  # a ScaledObject not polled this long is forgotten; its files a sweep later
    retire_seconds: float = 60.0  # ... or this long (at least 3 polls) once its ScaledObject has a newer trigger
    stall_seconds: float = 30.0  # a scheduler tick this late means the process was frozen: silence is not counted
    max_tracked: int = MAX_TRACKED  # workloads (triggers) at most; a new one beyond evicts an unproven one, else
    # is RESOURCE_EXHAUSTED
    max_tracked_per_namespace: int = MAX_TRACKED_PER_NAMESPACE  # the same per namespace (one caller's share)
    first_wait_seconds: float = 2.5  # the first call may wait this long for the first refresh
    io_workers: int = 256  # threads made on demand; with per_target_refreshes 8, 32 hung host:ports before others wait
    per_target_refreshes: int = 8  # refreshes in flight per Prometheus host:port: a hung one holds at most these threads
    per_namespace_refreshes: int = 64  # refreshes in flight per namespace: one caller's hung targets hold at most these
    per_target_qps: float = 200.0  # refreshes started per second per host:port (2,000 triggers every 10 s)
    max_specs_cached: int = 4096
    max_spec_cache_bytes: int = 16 << 20  # metadata bytes behind the cached specs and errors
    log_interval_seconds: float = 60.0  # a repeated warning (same ScaledObject, same kind) at most this often
    capacity_settle_seconds: float = SETTLE_SECONDS  # capacity learned online: a saturated run counts from this age
    capacity_min_samples: int = MIN_SAMPLES  # ... and is estimated from this many samples on (scaler.learned)
