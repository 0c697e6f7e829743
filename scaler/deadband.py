"""What the HPA makes of the value KEDA hands it: KEDA's milli-quantities and the HPA's tolerance band.

KEDA passes the planned value and the target to the HPA as milli-quantities (``to_milli``: ``"%.3f"``); the HPA
leaves the replica count alone while the usage ratio is inside its dead band (``Tolerance``), so the decision
pushes a value past the band below the replica count it asks for (``clear_dead_band``). ``scaler.policy`` applies it
to every decision; the replay's KEDA/HPA emulation (``scaler.replay.keda``, ``scaler.replay.hpa``) reads values and
bands the same way.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from .scaledobject import HPA_TOLERANCE



@dataclass(frozen=True, slots=True)
class Tolerance:
    """The HPA's dead band around a usage ratio of 1 (Kubernetes' ``tolerances.isWithin``).

    The HPA leaves the replica count alone while ``1 - down <= ratio <= 1 + up``
    (both edges inside). ``up`` is ``behavior.scaleUp.tolerance`` and ``down``
    ``behavior.scaleDown.tolerance`` (Kubernetes >= 1.33); both default to the
    controller's ``--horizontal-pod-autoscaler-tolerance``.
    """

    up: float
    down: float

    @property
    def high(self) -> float:
        """The upper edge: the largest ratio still inside the band."""
        return 1.0 + self.up

    @property
    def low(self) -> float:
        """The lower edge: the smallest ratio still inside the band."""
        return 1.0 - self.down

    def is_within(self, ratio: float) -> bool:
        return 1.0 - self.down <= ratio <= 1.0 + self.up


KUBERNETES_TOLERANCE = Tolerance(up=HPA_TOLERANCE, down=HPA_TOLERANCE)  # --horizontal-pod-autoscaler-tolerance


@functools.lru_cache(maxsize=64)
def scale_up_band(tolerance: float) -> Tolerance:
    """Kubernetes' band with ``behavior.scaleUp.tolerance`` = ``tolerance`` (cached: ``decide`` runs per poll)."""
    return Tolerance(up=tolerance, down=KUBERNETES_TOLERANCE.down)

MILLI_MAX = float(2 ** 50)  # milli-quantities are held here (rates above ~1.1e12 req/s): integers stay exact
MIN_TARGET = 0.001  # the smallest HPA target (qpsPerReplica): KEDA hands it over in thousandths, below it is 0


def target_refusal(target: float) -> str:
    """Why the HPA cannot take ``target`` as KEDA hands it over (a milli-quantity); "" when it can."""
    if target >= MIN_TARGET:
        return ""
    return (f"{target:g}: below {MIN_TARGET:g} req/s the HPA target is 0 (KEDA hands it over in thousandths); "
            f"accepted: >= {MIN_TARGET:g} (--qps-per-replica)")


def to_milli(value: float) -> int:
    """The value as KEDA hands it to the HPA: a milli-quantity of ``"%.3f"`` (NaN/Inf/negative -> 0).

    This is the definition; ``to_milli_array`` evaluates it on arrays.
    Values at or above ``MILLI_MAX`` milli are held there.
    """
    if not math.isfinite(value) or value <= 0:
        return 0
    if value * 1000.0 >= MILLI_MAX:
        return int(MILLI_MAX)
    return int(round(float(f"{value:.3f}") * 1000))


def to_milli_array(value: np.ndarray) -> np.ndarray:
    """``to_milli`` of every value, as floats (exact integers).

    ``"%.3f"`` rounds the exact binary value half to even, so ``rint(value x
    1000)`` is the same integer wherever the product is further than its own
    rounding error (half a unit in its last place) from a half: then the exact
    product and the rounded one lie on the same side of it. The few values
    that close to a tie go through ``to_milli`` itself.
    """
    x = np.asarray(value, dtype=np.float64)
    ok = np.isfinite(x) & (x > 0)
    p = np.where(ok, x, 0.0) * 1000.0
    out = np.where(ok, np.minimum(np.rint(p), MILLI_MAX), 0.0)
    near = ok & (np.abs(p - np.floor(p) - 0.5) <= 2 * np.spacing(p)) & (p < MILLI_MAX)
    if near.any():
        for i in np.flatnonzero(near):
            out.flat[i] = to_milli(float(x.flat[i]))
    return out


def clear_dead_band_array(value: np.ndarray, qps_per_replica: float, tolerance: float) -> np.ndarray:
    """Push each value past the HPA's tolerance band below the replica count it asks for.

    The HPA (AverageValue) wants ceil(value/target) replicas but does nothing
    while ``1 - tol <= value / (target * current) <= 1 + tol`` (Kubernetes >=
    1.33; KEDA passes value and target as milli-quantities). A value that
    needs r replicas while r-1 run is inside the band whenever value <=
    (1+tol)(r-1) target; the value returned is the smallest milli-quantity
    outside it. At r-1 >= 10 (tolerance 0.1) that value itself rounds to more
    than r replicas: a +1 step cannot exist, the HPA jumps by two, which is the
    price of not missing. Values <= 0 (and NaN), a tolerance <= 0 or a target
    below one milli leave the values as they are.
    """
    v = np.asarray(value, dtype=np.float64)
    t_m = float(to_milli(qps_per_replica))
    if tolerance <= 0 or t_m <= 0:
        return v
    band = scale_up_band(tolerance)
    v_m = to_milli_array(v)
    r = np.ceil(v_m / t_m)
    below = t_m * (r - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = v_m / below  # > 1 where r > 1: only the upper edge matters
    inside = (v > 0) & (r > 1) & (band.low <= ratio) & (ratio <= band.high)
    pushed = (np.floor(band.high * t_m * (r - 1) + 1e-6) + 1) / 1000.0
    return np.where(inside & (pushed > v), pushed, v)


def clear_dead_band(value: float, qps_per_replica: float, tolerance: float) -> float:
    """``clear_dead_band_array`` of one value."""
    return float(clear_dead_band_array(np.array([value], dtype=np.float64), qps_per_replica, tolerance)[0])
