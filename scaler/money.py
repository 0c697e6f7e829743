"""Dollars: what a GPU node pool costs per hour, what a lost request is worth, and the break-even request rate.

The rates are inputs (a pool file's ``pricePerGpuHour``, ``spotPricePerGpuHour``; ``--lost-request-value``);
nothing here knows a cloud's price list. Clouds bill nodes, not pods: a node costs its GPUs x the price per
GPU-hour from the moment it is provisioned to the moment it is removed, whatever runs on it (a MIG-partitioned
GPU is billed whole), and a stopped node of a warm pool costs ``stoppedCostFraction`` of that (its disks; AWS bills
no instance hours for a stopped instance). Pure: no clock, no files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

CAPACITY_TYPES = ("on-demand", "spot")


class MoneyError(ValueError):
    """A price or value that cannot be used: the message names it and what is accepted."""


def check_rate(value: float, what: str) -> float:
    """A finite number of dollars >= 0, else ``MoneyError`` naming ``what``."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
        raise MoneyError(f"{what} {value!r}: accepted is a finite number of dollars >= 0")
    return float(value)


@dataclass(frozen=True)
class Price:
    """$ per GPU-hour of a pool: on demand, and on spot with its interruption rate (per node-hour)."""

    on_demand: float | None = None
    spot: float | None = None
    interruptions_per_node_hour: float = 0.0

    def __post_init__(self) -> None:
        for what, v in (("on-demand price", self.on_demand), ("spot price", self.spot)):
            if v is not None:
                check_rate(v, what)
        r = self.interruptions_per_node_hour
        if not (math.isfinite(r) and 0 <= r <= 1):
            raise MoneyError(f"spot interruptions per node-hour {r!r}: accepted is a number in [0, 1]")

    def per_gpu_hour(self, capacity_type: str) -> float | None:
        """The rate the pool runs at (``on-demand`` or ``spot``); None when that price was not given."""
        if capacity_type not in CAPACITY_TYPES:
            raise MoneyError(f"capacity type {capacity_type!r}: accepted are {', '.join(CAPACITY_TYPES)}")
        return self.on_demand if capacity_type == "on-demand" else self.spot


@dataclass(frozen=True)
class Billing:
    """How one pool turns node-time into dollars."""

    gpus_per_node: int
    per_gpu_hour: float  # $ while a node is provisioned (booting or up)
    stopped_fraction: float = 0.0  # of that while a warm-pool node is stopped

    @property
    def node_hour(self) -> float:
        return self.gpus_per_node * self.per_gpu_hour

    def dollars(self, node_hours: float, stopped_node_hours: float = 0.0) -> float:
        """Running node-hours at the full rate plus stopped ones at ``stopped_fraction`` of it."""
        return self.node_hour * (node_hours + self.stopped_fraction * stopped_node_hours)


def lost_value(missed_requests: float, value_per_request: float | None) -> float | None:
    """Dollars of the requests served late or not at all (None without a value per request)."""
    return None if value_per_request is None else float(missed_requests) * float(value_per_request)


@dataclass(frozen=True)
class BreakEven:
    """Below ``requests_per_hour`` a cold start per request is cheaper than one replica kept warm."""

    requests_per_hour: float
    warm_dollars_per_hour: float  # one replica kept warm
    wake_dollars: float  # one wake from zero: GPU time of the cold start and the idle tail, plus the request's value
    wake_seconds: float  # T_cold + the idle time before scale-to-zero (cooldownPeriod)

    @property
    def valid_below(self) -> float:
        """Requests per hour above which wakes overlap (a replica is up anyway): the formula holds below it."""
        return 3600.0 / self.wake_seconds if self.wake_seconds > 0 else math.inf


def break_even(replica_dollars_per_hour: float, cold_start_seconds: float, idle_seconds: float,
               value_per_request: float | None = None) -> BreakEven:
    """The request rate at which scale-to-zero and one warm replica cost the same.

    Keeping one replica warm costs ``P`` $/h. Scaled to zero, each request that finds no replica wakes one: it
    pays ``P x (T_cold + T_idle) / 3600`` of GPU time (the cold start, then ``idle_seconds`` before KEDA scales
    back to zero) and, with a value per request, the request itself is late by ``T_cold`` (counted as lost, ``V``).
    At ``r`` such requests per hour the cost is ``r x (P (T_cold + T_idle) / 3600 + V)``; equal to ``P`` at
    ``r* = P / (P (T_cold + T_idle) / 3600 + V)``. Valid while wakes do not overlap (``r* < 3600 / (T_cold +
    T_idle)``): above that a replica is up most of the time either way.
    """
    p = check_rate(replica_dollars_per_hour, "replica price per hour")
    wake_s = max(0.0, float(cold_start_seconds)) + max(0.0, float(idle_seconds))
    wake = p * wake_s / 3600.0 + (0.0 if value_per_request is None else check_rate(value_per_request,
                                                                                 "value per lost request"))
    rate = p / wake if wake > 0 else math.inf
    return BreakEven(rate, p, wake, wake_s)
