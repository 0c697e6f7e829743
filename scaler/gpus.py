"""GPU types, MIG slices and GPU node pools: the pool file (``--pools FILE``) read into plain data.

A pool file (YAML, read by ``scaler.manifest_yaml`` at the edge) describes the cluster's GPU node pools and the
workload's replica on each GPU type::

    pools:
      - name: h100
        gpu: H100                      # a type of CATALOGUE
        gpusPerNode: 8
        nodeBootSeconds: 420           # Pending noticed + node boot (drivers, device plugin)
        maxNodes: 4
        pricePerGpuHour: 6.88          # $ on demand
        spotPricePerGpuHour: 2.9       # optional; capacityType: spot runs the pool at it
        spotInterruptionsPerNodeHour: 0.005
        mig: [3g.40gb]                 # optional: the MIG profiles this pool may be partitioned into
        warm: {nodes: 2, bootSeconds: 60, stoppedCostFraction: 0.02}   # optional: a stopped warm pool
        nodeSelector: {...}            # optional; default nvidia.com/gpu.product of the type
        tolerations: [...]             # optional; default the nvidia.com/gpu NoSchedule taint
    replica:
      memoryGB: 30                     # optional: a slice or GPU must hold the model
      capacity: {H100: 1, L4: 0.25, H100/3g.40gb: 0.45}   # req/s of one replica, x qpsPerReplica
      coldStartSeconds: {H100: 180, L4: 240}                # T_cold per type (default: the run's)
      gpusPerReplica: {L4: 2}                               # optional (default 1; a slice is one)
    placement: [h100, l4]              # the rule deployed: one pool (a nodeSelector) or a priority list

A **choice** is where one replica runs: a pool's whole GPU(s) or one MIG slice of its GPUs (``choices``). Every
error names the field and what is accepted (``PoolError``). Pure: no files, no clock.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from .money import CAPACITY_TYPES, MoneyError, Price, check_rate


class PoolError(ValueError):
    """A pool file the replay cannot use: names the field and what is accepted."""


@dataclass(frozen=True)
class MigProfile:
    name: str  # 3g.40gb
    sevenths: int  # compute slices of 7
    memory_gb: float
    per_gpu: int  # instances of this profile one GPU holds


def _profiles(mem: tuple[float, ...], names: tuple[str, ...]) -> dict[str, MigProfile]:
    per = {1: 7, 2: 3, 3: 2, 4: 1, 7: 1}
    out: dict[str, MigProfile] = {}
    for n, m in zip(names, mem):
        g = int(n.split("g.")[0])
        out[n] = MigProfile(n, g, m, 4 if (g == 1 and n != names[0]) else per[g])
    return out


@dataclass(frozen=True)
class GpuType:
    name: str
    memory_gb: float
    product: str  # the GPU feature discovery label nvidia.com/gpu.product
    mig: Mapping[str, MigProfile] = field(default_factory=dict)


# NVIDIA's MIG profiles (MIG User Guide, "Supported MIG Profiles"): 1g (7 per GPU; the double-memory 1g: 4),
# 2g (3), 3g (2), 4g (1), 7g (1); the memory in the name. Types without MIG have none.
_A100_40 = _profiles((5, 10, 10, 20, 20, 40), ("1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"))
_80 = _profiles((10, 20, 20, 40, 40, 80), ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"))
_H200 = _profiles((18, 35, 35, 71, 71, 141), ("1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"))
CATALOGUE: dict[str, GpuType] = {g.name: g for g in (
    GpuType("H100", 80, "NVIDIA-H100-80GB-HBM3", _80),
    GpuType("H200", 141, "NVIDIA-H200", _H200),
    GpuType("A100-80GB", 80, "NVIDIA-A100-SXM4-80GB", _80),
    GpuType("A100-40GB", 40, "NVIDIA-A100-SXM4-40GB", _A100_40),
    GpuType("L40S", 48, "NVIDIA-L40S"),
    GpuType("L4", 24, "NVIDIA-L4"),
    GpuType("A10G", 24, "NVIDIA-A10G"),
    GpuType("T4", 16, "Tesla-T4"),
)}
GPU_RESOURCE = "nvidia.com/gpu"
DEFAULT_TOLERATIONS = ({"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"},)
NAME_FORM = "a lower-case DNS label ([a-z0-9-], 1-40 characters)"


@dataclass(frozen=True)
class Warm:
    """A warm pool: ``nodes`` stopped nodes kept ready to start in ``boot_seconds`` (instead of a new node's
    boot), costing ``stopped_fraction`` of a running node while stopped."""

    nodes: int
    boot_seconds: float
    stopped_fraction: float


@dataclass(frozen=True)
class PoolSpec:
    name: str
    gpu: str
    gpus_per_node: int
    node_boot_seconds: float
    max_nodes: int
    idle_seconds: float | None
    price: Price
    capacity_type: str
    mig: tuple[str, ...]
    warm: Warm | None
    node_selector: tuple[tuple[str, str], ...]
    tolerations: tuple[Mapping[str, Any], ...]

    @property
    def type(self) -> GpuType:
        return CATALOGUE[self.gpu]

    def per_gpu_hour(self) -> float | None:
        return self.price.per_gpu_hour(self.capacity_type)


@dataclass(frozen=True)
class ReplicaSpec:
    memory_gb: float | None
    capacity: Mapping[str, float]  # "H100" or "H100/3g.40gb" -> x qpsPerReplica
    cold_start: Mapping[str, float]  # GPU type (or type/profile) -> seconds
    gpus: Mapping[str, int]  # GPU type -> GPUs per replica


@dataclass(frozen=True)
class Choice:
    """Where one replica runs: ``pool``'s whole GPUs, or one ``slice`` (a MIG profile) of a GPU."""

    pool: PoolSpec
    slice: str | None
    capacity: float  # x qpsPerReplica
    cold_start_seconds: float | None  # None: the run's T_cold
    gpus: int  # GPUs per replica (1 for a slice)

    @property
    def key(self) -> str:
        return self.pool.name if self.slice is None else f"{self.pool.name}/{self.slice}"

    @property
    def resource(self) -> str:
        """The extended resource a replica requests (the GPU operator's mixed MIG strategy names slices)."""
        return GPU_RESOURCE if self.slice is None else f"nvidia.com/mig-{self.slice}"

    @property
    def slots_per_node(self) -> int:
        """Replicas one node holds."""
        if self.slice is None:
            return self.pool.gpus_per_node // self.gpus
        return self.pool.gpus_per_node * self.pool.type.mig[self.slice].per_gpu

    @property
    def gpu_fraction(self) -> float:
        """GPUs one replica holds (a slice: its share of a GPU, 1/per_gpu)."""
        return float(self.gpus) if self.slice is None else 1.0 / self.pool.type.mig[self.slice].per_gpu


@dataclass(frozen=True)
class PoolFile:
    pools: tuple[PoolSpec, ...]
    replica: ReplicaSpec
    placement: tuple[str, ...]  # pool names, preferred first; () = not given

    def pool(self, name: str) -> PoolSpec:
        for p in self.pools:
            if p.name == name:
                return p
        raise PoolError(f"no pool named {name!r}; the pool file has {', '.join(p.name for p in self.pools)}")

    def choice(self, key: str) -> Choice:
        """``h100`` or ``h100/3g.40gb`` as a ``Choice``."""
        name, _, sl = key.partition("/")
        return make_choice(self.pool(name), sl or None, self.replica)


def _number(m: Mapping, key: str, where: str, *, lo: float = 0.0, integer: bool = False, default=None,
            open_lo: bool = False):
    v = m.get(key, default)
    if v is None:
        raise PoolError(f"{where}.{key} is missing: accepted is a number >= {lo:g}")
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and (v > lo if open_lo else v >= lo)
    if integer:
        ok = ok and float(v).is_integer()
    if not ok:
        kind = "a whole number" if integer else "a finite number"
        raise PoolError(f"{where}.{key} {repr(v)[:40]}: accepted is {kind} {'>' if open_lo else '>='} {lo:g}")
    return int(v) if integer else float(v)


def _known(m: Mapping, keys: set[str], where: str) -> None:
    bad = sorted(str(k) for k in m if k not in keys)
    if bad:
        raise PoolError(f"{where}: unknown field(s) {', '.join(bad)}; accepted: {', '.join(sorted(keys))}")


POOL_KEYS = {"name", "gpu", "gpusPerNode", "nodeBootSeconds", "maxNodes", "nodeIdleSeconds", "pricePerGpuHour",
             "spotPricePerGpuHour", "spotInterruptionsPerNodeHour", "capacityType", "mig", "warm", "nodeSelector",
             "tolerations"}


def _gpu_type(v: Any, where: str) -> GpuType:
    g = CATALOGUE.get(str(v)) if isinstance(v, str) else None
    if g is None:
        raise PoolError(f"{where} {str(v)[:40]!r}: unknown GPU type; accepted: {', '.join(CATALOGUE)}")
    return g


def _pool(raw: Any, i: int) -> PoolSpec:
    where = f"pools[{i}]"
    if not isinstance(raw, Mapping):
        raise PoolError(f"{where}: accepted is a mapping with name, gpu, gpusPerNode, nodeBootSeconds, maxNodes")
    _known(raw, POOL_KEYS, where)
    name = raw.get("name")
    if not (isinstance(name, str) and re.fullmatch(r"[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?", name)):
        raise PoolError(f"{where}.name {str(name)[:40]!r}: accepted is {NAME_FORM}")
    g = _gpu_type(raw.get("gpu"), f"{where}.gpu")
    try:
        price = Price(_opt_rate(raw, "pricePerGpuHour", where), _opt_rate(raw, "spotPricePerGpuHour", where),
                      _number(raw, "spotInterruptionsPerNodeHour", where, default=0.0))
    except MoneyError as e:
        raise PoolError(f"{where}: {e}") from None
    cap_type = raw.get("capacityType", CAPACITY_TYPES[0])
    if cap_type not in CAPACITY_TYPES:
        raise PoolError(f"{where}.capacityType {str(cap_type)[:40]!r}: accepted are {', '.join(CAPACITY_TYPES)}")
    if cap_type == "spot" and price.spot is None:
        raise PoolError(f"{where}.capacityType spot needs spotPricePerGpuHour ($ per GPU-hour on spot)")
    mig = raw.get("mig", [])
    if isinstance(mig, str):
        mig = [mig]
    if not isinstance(mig, list) or any(not isinstance(x, str) for x in mig):
        raise PoolError(f"{where}.mig: accepted is a list of MIG profiles of {g.name}")
    for prof in mig:
        if prof not in g.mig:
            raise PoolError(f"{where}.mig {prof[:40]!r}: not a MIG profile of {g.name}; accepted: "
                            f"{', '.join(g.mig) or f'none ({g.name} has no MIG)'}")
    idle = raw.get("nodeIdleSeconds")
    return PoolSpec(name, g.name, _number(raw, "gpusPerNode", where, lo=1, integer=True),
                    _number(raw, "nodeBootSeconds", where), _number(raw, "maxNodes", where, lo=1, integer=True),
                    None if idle is None else _number(raw, "nodeIdleSeconds", where), price, str(cap_type),
                    tuple(mig), _warm(raw.get("warm"), where), _selector(raw.get("nodeSelector"), g, where),
                    _tolerations(raw.get("tolerations"), where))


def _opt_rate(raw: Mapping, key: str, where: str) -> float | None:
    v = raw.get(key)
    if v is None:
        return None
    try:
        return check_rate(v, f"{where}.{key}")
    except MoneyError as e:
        raise PoolError(str(e)) from None


def _warm(raw: Any, where: str) -> Warm | None:
    if raw is None:
        return None
    w = f"{where}.warm"
    if not isinstance(raw, Mapping):
        raise PoolError(f"{w}: accepted is a mapping with nodes, bootSeconds, stoppedCostFraction")
    _known(raw, {"nodes", "bootSeconds", "stoppedCostFraction"}, w)
    frac = _number(raw, "stoppedCostFraction", w, default=0.0)
    if frac > 1:
        raise PoolError(f"{w}.stoppedCostFraction {frac:g}: accepted is a fraction in [0, 1]")
    return Warm(_number(raw, "nodes", w, lo=1, integer=True), _number(raw, "bootSeconds", w), frac)


def _selector(raw: Any, g: GpuType, where: str) -> tuple[tuple[str, str], ...]:
    if raw is None:
        return (("nvidia.com/gpu.product", g.product),)
    if not isinstance(raw, Mapping) or not raw or any(not isinstance(v, (str, int, float, bool)) for v in raw.values()):
        raise PoolError(f"{where}.nodeSelector: accepted is a non-empty mapping of node label -> value")
    return tuple((str(k), str(v).lower() if isinstance(v, bool) else str(v)) for k, v in raw.items())


def _tolerations(raw: Any, where: str) -> tuple[Mapping[str, Any], ...]:
    if raw is None:
        return DEFAULT_TOLERATIONS
    if not isinstance(raw, list) or any(not isinstance(t, Mapping) for t in raw):
        raise PoolError(f"{where}.tolerations: accepted is a list of Kubernetes tolerations (mappings)")
    allowed = {"key", "operator", "value", "effect", "tolerationSeconds"}
    for j, t in enumerate(raw):
        _known(t, allowed, f"{where}.tolerations[{j}]")
    return tuple(dict(t) for t in raw)


def _replica(raw: Any) -> ReplicaSpec:
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise PoolError("replica: accepted is a mapping with capacity, coldStartSeconds, memoryGB, gpusPerReplica")
    _known(raw, {"memoryGB", "capacity", "coldStartSeconds", "gpusPerReplica"}, "replica")
    mem = raw.get("memoryGB")
    tables = {}
    for key, integer, lo in (("capacity", False, 0.0), ("coldStartSeconds", False, 0.0), ("gpusPerReplica", True, 1)):
        t = raw.get(key, {})
        if not isinstance(t, Mapping):
            raise PoolError(f"replica.{key}: accepted is a mapping of GPU type (or TYPE/MIG-profile) -> number")
        for k in t:
            _type_key(str(k), f"replica.{key}", slices=key != "gpusPerReplica")
        tables[key] = {str(k): _number(t, k, f"replica.{key}", lo=lo, integer=integer, open_lo=key == "capacity")
                       for k in t}
    return ReplicaSpec(None if mem is None else _number(raw, "memoryGB", "replica", open_lo=True),
                       tables["capacity"], tables["coldStartSeconds"], tables["gpusPerReplica"])


def _type_key(k: str, where: str, *, slices: bool) -> None:
    t, _, prof = k.partition("/")
    g = _gpu_type(t, f"{where} key")
    if prof and (not slices or prof not in g.mig):
        raise PoolError(f"{where} key {k[:40]!r}: {prof[:20]!r} is not a MIG profile of {g.name}; accepted: "
                        f"{', '.join(g.mig) or 'none'}")


def make_choice(pool: PoolSpec, slice_: str | None, replica: ReplicaSpec) -> Choice:
    """A pool's whole GPU or one of its MIG slices, with the replica's capacity and T_cold there."""
    g = pool.type
    key = g.name if slice_ is None else f"{g.name}/{slice_}"
    if slice_ is not None and slice_ not in pool.mig:
        raise PoolError(f"pool {pool.name} is not partitioned into {slice_!r}; its mig: {', '.join(pool.mig) or 'none'}")
    if key not in replica.capacity:
        raise PoolError(f"replica.capacity has no {key}: the capacity of one replica on {key} (x qpsPerReplica; "
                        f"measure it with forescale loadtest there), e.g. {key}: 0.5")
    gpus = 1 if slice_ is not None else int(replica.gpus.get(g.name, 1))
    mem = g.mig[slice_].memory_gb if slice_ is not None else g.memory_gb * gpus
    if replica.memory_gb is not None and replica.memory_gb > mem + 1e-9:
        what = f"MIG slice {slice_} of {g.name}" if slice_ else f"{gpus} x {g.name}"
        raise PoolError(f"pool {pool.name}: a {what} ({mem:g} GB) cannot hold the model's {replica.memory_gb:g} GB "
                        f"(replica.memoryGB)" + ("" if slice_ else f"; set replica.gpusPerReplica.{g.name}"))
    if slice_ is None and gpus > pool.gpus_per_node:
        raise PoolError(f"pool {pool.name}: {gpus} GPUs per replica do not fit a node of {pool.gpus_per_node}")
    cold = replica.cold_start.get(key, replica.cold_start.get(g.name))
    return Choice(pool, slice_, float(replica.capacity[key]), cold, gpus)


def parse_pool_file(doc: Any) -> PoolFile:
    """The pool file's document (plain data) as a ``PoolFile``; ``PoolError`` naming what is wrong."""
    if not isinstance(doc, Mapping):
        raise PoolError("the pool file: accepted is a mapping with pools, replica, placement")
    _known(doc, {"pools", "replica", "placement"}, "the pool file")
    raw = doc.get("pools")
    if not isinstance(raw, list) or not raw:
        raise PoolError("pools: accepted is a non-empty list of GPU node pools")
    pools = tuple(_pool(p, i) for i, p in enumerate(raw))
    names = [p.name for p in pools]
    if len(set(names)) != len(names):
        raise PoolError(f"pools: names repeat ({', '.join(names)}); each pool needs its own name")
    pl = doc.get("placement", [])
    if isinstance(pl, str):
        pl = [pl]
    if not isinstance(pl, list) or any(x not in names for x in pl) or len(set(pl)) != len(pl):
        raise PoolError(f"placement {str(pl)[:60]!r}: accepted is a pool name or a priority list of distinct pool "
                        f"names among {', '.join(names)}")
    pf = PoolFile(pools, _replica(doc.get("replica")), tuple(pl))
    for name in pf.placement:  # the placement's pools must be runnable
        pf.choice(name)
    return pf


def choices(pf: PoolFile) -> list[Choice]:
    """Every place a replica can run: each pool's whole GPUs, then each of its MIG slices."""
    out = []
    for p in pf.pools:
        out.append(make_choice(p, None, pf.replica))
        out += [make_choice(p, s, pf.replica) for s in p.mig]
    return out


def require_prices(cs: list[Choice]) -> None:
    """Money was asked: every pool in ``cs`` needs the price its capacity type runs at."""
    for c in cs:
        if c.pool.per_gpu_hour() is None:
            key = "pricePerGpuHour" if c.pool.capacity_type == "on-demand" else "spotPricePerGpuHour"
            raise PoolError(f"pool {c.pool.name} has no {key}: dollars need the price of each pool ($ per GPU-hour)")
