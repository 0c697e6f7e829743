"""Workloads whose ``Watch`` entries are full: the memory test and ``bench_watch.py`` measure the same."""

from __future__ import annotations

from scaler.policy import Decision, Reason
from scaler.serve.watch import DECISIONS_KEPT, Watch
from scaler.serve.workload import Workload
from scaler.spec import parse_metadata

T0 = 1_700_000_400.0


def workloads(n: int) -> list[Workload]:
    spec, _ = parse_metadata({"serverAddress": "http://prom.test:9090", "query": "q", "qpsPerReplica": "10",
                              "coldStartSeconds": "300"}, name="so", namespace="bench")
    return [Workload("bench", f"so-{i}", spec, client=None, created=T0, last_polled=T0, digest=f"{i:064x}")
            for i in range(n)]


def fill(watch: Watch, wls: list[Workload], start: float = T0) -> None:
    """DECISIONS_KEPT decisions a minute apart per workload, forecast-driven, so every ring, bucket row and
    pending minute is in use."""
    for wl in wls:
        for k in range(DECISIONS_KEPT):
            d = Decision(planned=50.0, reason=Reason.FORECAST, observed=40.0 + (k % 7), forecast_peak=45.0, base=45.0)
            watch.record(wl, d, start + 60 * k, 300.0)
