"""The fleet GPU budget, live: every member's claim, the one arbitration, and the claims shared between replicas.

KEDA asks each trigger separately, so the scaler holds the total. The budgets are the server's ``--budget-file``
(``read_budgets``: a name, the GPUs, the rule); a trigger joins one with ``gpuBudget: NAME`` and says its
``gpusPerReplica``, ``valuePerRequest`` and ``minReplicaCount`` (the ScaledObject's: the scaler cannot read it).

Each decision of a member (``Registry.decision``: GetMetrics and IsActive alike) records the member's claim (its
own planned value, read by ``scaler.budget.claim`` as the replicas it asks the HPA for), stamped with the wall time,
then arbitrates the budget over the newest fresh claim of every member (``scaler.budget.arbitrate``: the same
function the offline fleet replay uses) and answers ``scaler.budget.capped``: the member's own plan, or exactly its
grant x qpsPerReplica in KEDA's milli-units, with the reason ``budget_capped``. All of it is memory and arithmetic
under one lock: no I/O on an RPC. The grants of a claim set are kept until a claim changes.

**Replicas agree** by holding the same claims: each serves the claims it made at ``GET /budget/claims`` on its HTTP
port, and fetches its peers' (``--budget-peers``: URLs, or ``dns:NAME:PORT`` for every address of a headless
Service) every ``--budget-sync-seconds`` in a background thread. For each member the claim with the newest stamp
wins (ties: the larger replica id); a claim older than ``STALE_SECONDS`` (its member no longer polled, or its replica
gone) drops out. The arbitration is a pure function of the claim set (sorted by member), so replicas holding the
same claims give the same grants; between a member's new claim and the next sync they may differ by that claim.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import urllib.request
import uuid
from dataclasses import asdict, dataclass, replace
from typing import Callable, Mapping

from .. import budget as bud
from ..limits import BUDGET_SYNC_SECONDS, MAX_TRACKED
from ..policy import Decision, Reason
from .metrics import ScalerMetrics
from .workload import ScalerError, Workload

log = logging.getLogger(__name__)

STALE_SECONDS = 120.0  # a claim not renewed this long is out of the arbitration (KEDA polls every 30 s)
PEER_TIMEOUT = 2.0


class BudgetFileError(ValueError):
    """A --budget-file that cannot be used: the message names the field and what is accepted."""


@dataclass(frozen=True)
class Budget:
    name: str
    gpus: float
    rule: str = bud.DEFAULT_RULE


@dataclass(frozen=True)
class Held:
    """One member's claim as a replica made it (plain data: it travels between replicas as JSON)."""

    budget: str
    member: str  # namespace/name/trigger
    planned: float
    qps: float
    minimum: int
    gpus: float
    value: float
    stamp: float  # wall seconds when it was made
    origin: str  # the replica that made it

    def claim(self) -> bud.Claim:
        return bud.claim(self.member, self.planned, self.qps, minimum=self.minimum, gpus_per_replica=self.gpus,
                         value_per_request=self.value)

    def content(self) -> tuple:
        return self.planned, self.qps, self.minimum, self.gpus, self.value


def read_budgets(doc) -> dict[str, Budget]:
    """``{budgets: [{name, gpus, rule}]}`` (a parsed YAML document) -> budgets by name; ``BudgetFileError``."""
    if not isinstance(doc, Mapping) or set(doc) - {"budgets"} or not isinstance(doc.get("budgets"), list):
        raise BudgetFileError("expected one mapping with the key budgets: a list of {name, gpus, rule}")
    out: dict[str, Budget] = {}
    for i, b in enumerate(doc["budgets"]):
        where = f"budgets[{i}]"
        if not isinstance(b, Mapping) or set(b) - {"name", "gpus", "rule"}:
            raise BudgetFileError(f"{where}: expected a mapping with name, gpus and rule (optional)")
        name = b.get("name")
        if not isinstance(name, str) or not bud_name_ok(name) or name in out:
            raise BudgetFileError(f"{where}.name {str(name)[:40]!r}: expected a unique DNS label (a-z, 0-9, '-')")
        gpus = b.get("gpus")
        if isinstance(gpus, bool) or not isinstance(gpus, (int, float)):
            raise BudgetFileError(f"{where}.gpus {str(gpus)[:40]!r}: expected a number of GPUs >= 0")
        rule = b.get("rule", bud.DEFAULT_RULE)
        if rule not in bud.RULES:
            raise BudgetFileError(f"{where}.rule {str(rule)[:40]!r}: accepted are {', '.join(bud.RULES)}")
        try:
            out[name] = Budget(name, bud.check_budget(float(gpus)), rule)
        except bud.BudgetError as e:
            raise BudgetFileError(f"{where}.gpus: {e}") from None
    if not out:
        raise BudgetFileError("budgets: empty; expected at least one {name, gpus}")
    return out


def bud_name_ok(name: str) -> bool:
    import re

    return bool(re.fullmatch(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", name))


def member_id(wl: Workload) -> str:
    return f"{wl.namespace}/{wl.name}/{wl.trigger}"


class Ledger:
    def __init__(self, budgets: Mapping[str, Budget], clock: Callable[[], float], metrics: ScalerMetrics | None = None,
                 replica: str | None = None):
        self.budgets = dict(budgets)
        self.clock = clock  # wall: the stamps compare across replicas
        self.metrics = metrics
        self.replica = replica or uuid.uuid4().hex[:16]
        self._held: dict[str, Held] = {}  # by member
        self._version = 0
        self._cache: dict[str, tuple] = {}  # budget -> (key, grants by member)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if metrics is not None:
            for b in self.budgets.values():
                metrics.budget_limit.labels(b.name).set(b.gpus)

    # -- RPC threads: memory only ---------------------------------------------------------------------------
    def check(self, name: str) -> None:
        """A trigger's gpuBudget names one of this scaler's budgets (ScalerError INVALID_ARGUMENT otherwise)."""
        if name not in self.budgets:
            raise ScalerError("INVALID_ARGUMENT", f"gpuBudget {name[:63]!r}: this scaler holds no such budget; "
                                                  f"accepted: {', '.join(sorted(self.budgets))} (--budget-file)")

    def cap(self, wl: Workload, d: Decision) -> Decision:
        """``d`` within the member's budget: its claim recorded, the budget arbitrated over every fresh claim."""
        spec, key = wl.spec, member_id(wl)
        now = self.clock()
        mine = Held(spec.gpu_budget, key, d.planned, spec.qps_per_replica, spec.min_replica_count,
                    spec.gpus_per_replica, spec.value_per_request, now, self.replica)
        with self._lock:
            self._put(mine)
            grants = self._grants(spec.gpu_budget, now)
        # the grant of the claim in force (a peer's, if newer), judged against this answer's own ask
        g = replace(grants[key], desired=bud.desired_replicas(d.planned, spec.qps_per_replica))
        if self.metrics is not None:
            self.metrics.budget_gpus.labels(*wl.labels, spec.gpu_budget, "asked").set(g.desired * spec.gpus_per_replica)
            self.metrics.budget_gpus.labels(*wl.labels, spec.gpu_budget, "granted").set(
                min(g.replicas, g.desired) * spec.gpus_per_replica)
        if not g.capped:
            return d
        return replace(d, planned=bud.capped(d.planned, g, spec.qps_per_replica), reason=Reason.BUDGET_CAPPED)

    def _put(self, h: Held) -> bool:
        """Caller holds the lock: ``h`` kept if it is newer than the member's claim held; True when kept."""
        old = self._held.get(h.member)
        if old is not None and (old.stamp, old.origin) >= (h.stamp, h.origin):
            return False
        self._held[h.member] = h
        if old is None or old.content() != h.content() or old.budget != h.budget:
            self._version += 1
        return True

    def _grants(self, name: str, now: float) -> dict[str, bud.Grant]:
        """Caller holds the lock: the budget's grants over its fresh claims, sorted by member (kept per claim set)."""
        fresh = sorted(m for m, h in self._held.items() if h.budget == name and now - h.stamp <= STALE_SECONDS)
        key = (self._version, tuple(fresh))
        hit = self._cache.get(name)
        if hit is not None and hit[0] == key:
            return hit[1]
        b = self.budgets[name]
        try:
            grants = bud.arbitrate([self._held[m].claim() for m in fresh], b.gpus, b.rule)
        except bud.BudgetError as e:
            raise ScalerError("FAILED_PRECONDITION", f"gpuBudget {name!r}: {e}") from None
        out = {g.name: g for g in grants}
        self._cache[name] = (key, out)
        if self.metrics is not None:
            self.metrics.budget_members.labels(name).set(len(fresh))
        return out

    # -- sharing between replicas ---------------------------------------------------------------------------
    def claims(self) -> dict:
        """``GET /budget/claims``: the claims this replica made that are still fresh."""
        now = self.clock()
        with self._lock:
            mine = [asdict(h) for h in self._held.values()
                    if h.origin == self.replica and now - h.stamp <= STALE_SECONDS]
        return {"replica": self.replica, "claims": mine}

    def merge(self, doc) -> int:
        """A peer's ``claims()``: each claim of a budget held here kept where newer; malformed entries are skipped.
        Returns how many were kept."""
        if not isinstance(doc, Mapping) or doc.get("replica") == self.replica:
            return 0
        kept = 0
        with self._lock:
            for c in list(doc.get("claims") or [])[:MAX_TRACKED]:
                h = _held(c)
                if h is not None and h.budget in self.budgets and h.origin != self.replica:
                    kept += self._put(h)
        return kept

    def snapshot(self, name: str) -> dict:
        """A budget's state for the status page and tests: its claims in force and their grants."""
        now = self.clock()
        b = self.budgets[name]
        with self._lock:
            try:
                grants = self._grants(name, now) if any(h.budget == name for h in self._held.values()) else {}
            except ScalerError as e:
                return {"name": name, "gpus": b.gpus, "rule": b.rule, "error": str(e), "members": {}}
            held = {m: h for m, h in self._held.items() if m in grants}
        return {"name": name, "gpus": b.gpus, "rule": b.rule,
                "members": {m: {"asked": g.desired, "granted": g.replicas, "gpus": g.gpus, "capped": g.capped,
                                "stamp": held[m].stamp, "origin": held[m].origin} for m, g in grants.items()}}

    def start(self, peers: list[str], token: Callable[[], bytes] | None = None,
              every: float = BUDGET_SYNC_SECONDS) -> None:
        """Fetch the peers' claims every ``every`` seconds in a daemon thread (nothing to do without peers)."""
        if not peers:
            return

        def loop() -> None:
            while not self._stop.wait(every):
                for url in resolve(peers):
                    try:
                        self.merge(fetch(url, token))
                    except (OSError, ValueError) as e:
                        log.debug("budget claims of %s: %s", url, e)

        self._thread = threading.Thread(target=loop, name="budget-sync", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=PEER_TIMEOUT + 1.0)


def _held(c) -> Held | None:
    try:
        h = Held(str(c["budget"]), str(c["member"]), float(c["planned"]), float(c["qps"]), int(c["minimum"]),
                 float(c["gpus"]), float(c["value"]), float(c["stamp"]), str(c["origin"]))
        h.claim().check()
        return h
    except (KeyError, TypeError, ValueError):
        return None


def resolve(peers: list[str]) -> list[str]:
    """The peers' base URLs: each ``http(s)://...`` as it is, each ``dns:NAME:PORT`` as every address of NAME."""
    out = []
    for p in peers:
        if not p.startswith("dns:"):
            out.append(p.rstrip("/"))
            continue
        host, _, port = p[4:].rpartition(":")
        try:
            infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
        except (OSError, ValueError):
            continue
        for fam, _, _, _, addr in infos:
            a = f"[{addr[0]}]" if fam == socket.AF_INET6 else addr[0]
            out.append(f"http://{a}:{port}")
    return list(dict.fromkeys(out))


def fetch(url: str, token: Callable[[], bytes] | None) -> dict:
    req = urllib.request.Request(url + "/budget/claims")
    if token is not None:
        req.add_header("Authorization", "Bearer " + token().decode())
    with urllib.request.urlopen(req, timeout=PEER_TIMEOUT) as r:
        return json.loads(r.read(8 << 20))


def check_peers(peers: list[str]) -> list[str]:
    """--budget-peers as given: http(s) URLs or dns:NAME:PORT (ValueError naming the one that is neither)."""
    for p in peers:
        ok = p.startswith(("http://", "https://")) or (p.startswith("dns:") and p[4:].rpartition(":")[2].isdigit())
        if not ok:
            raise ValueError(f"--budget-peers {p[:80]!r}: accepted are http(s)://HOST:PORT (a peer's HTTP port) or "
                             "dns:NAME:PORT (every address of a headless Service)")
    return peers
