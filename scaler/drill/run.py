"""One drill run: a scenario's trace, the control plane, Prometheus, forescale, both cache modes, the events, the
record; then the replay of the same manifests on the same trace, and the comparisons.

Timeline (trace time; the drill runs it ``k`` times faster): forescale's clock starts ``lead_in`` before the
span, the Deployments are created at the count the replay starts from (their pods Ready at once), the
ScaledObjects are applied, and at the span's start everything has settled; the drill then runs to the span's end,
doing the scenario's events on time.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..scaledobject import MIN_REPLICAS
from . import manifests as mf
from . import prometheus as pm
from .cluster import ControlPlane, Ports, check_binaries, check_ports
from .kube import KubeError
from .procs import DrillError, Supervisor, python
from .scenarios import Scenario, place

SAMPLE_SECONDS = 1.0  # the supervisor's look at memory and connections (wall)
KEDA_MODULE = "github.com/kedacore/keda/v2"


@dataclass
class Clock:
    """Trace time of the wall clock: ``origin + k (wall - wall0)``."""

    origin: float
    wall0: float
    k: float

    def now(self) -> float:
        return self.origin + self.k * (time.time() - self.wall0)

    def wall_at(self, t: float) -> float:
        return self.wall0 + (t - self.origin) / self.k


@dataclass
class Run:
    sc: Scenario
    k: float
    work: Path
    bins: dict[str, Path]
    drill_dir: Path
    ports: Ports = field(default_factory=Ports)
    lead_in: float = 300.0
    sup: Supervisor | None = None
    clock: Clock | None = None
    scaler_proc = None
    log: list[str] = field(default_factory=list)
    results: list[dict] = field(default_factory=list)

    def say(self, msg: str) -> None:
        line = f"[{self.sc.name}] {msg}"
        self.log.append(line)
        print(line, file=sys.stderr, flush=True)

    # ------------------------------------------------------------------ the replay first: its starting counts

    def replay(self) -> dict:
        trace = mf.write_trace(self.sc, self.work / "trace.csv")
        manifest = mf.write_replay_manifest(self.sc, self.work / "replay-scaledobjects.yaml")
        argv = [python(), "-m", "scaler.cli", "backtest",
                *mf.backtest_argv(self.sc, trace, manifest, self.work / "replay.json", self.work / "replay.csv")]
        out = subprocess.run(argv, capture_output=True, text=True)
        (self.work / "replay.log").write_text(out.stdout + out.stderr)
        if out.returncode != 0:
            raise DrillError(f"the replay (forescale backtest) failed: {(out.stderr or out.stdout).strip()[-800:]}")
        return json.loads((self.work / "replay.json").read_text())

    def initial_counts(self) -> dict[str, int]:
        import csv

        with open(self.work / "replay.csv", newline="") as f:
            first = next(csv.DictReader(f))
        out = {}
        for mode in mf.MODES:
            name = f"{self.sc.manifest['metadata']['name']}-{mode}"
            out[name] = int(float(first[f"{name}_ready"]) + float(first[f"{name}_starting"]))
        return out

    # ------------------------------------------------------------------ the live run

    def start_scaler(self) -> None:
        assert self.sup is not None and self.clock is not None
        now = time.time()
        self.scaler_proc = self.sup.start("forescale", [
            python(), "-m", "scaler.drill.scaler", f"--grpc-port={self.ports.scaler_grpc}",
            f"--http-port={self.ports.scaler_http}", f"--state-dir={self.work / 'forescale-state'}",
            f"--record={self.work / 'answers.jsonl'}", f"--origin={self.clock.origin + self.clock.k * (now - self.clock.wall0)}",
            f"--wall-origin={now}", f"--k={self.k:g}"])
        import urllib.request

        def up() -> bool:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ports.scaler_http}/healthz", timeout=3) as r:
                return r.status == 200

        self.sup.wait_ready(self.scaler_proc, up, 60, "serving")

    def observed_rates(self) -> dict[str, float]:
        """The exporter's gauge: the trace's mean rate over the last 2 min of trace time, now."""
        assert self.clock is not None
        t = self.clock.now()
        sc = self.sc
        knots = np.concatenate([sc.times, [sc.times[-1] + 60.0]])
        cum = np.concatenate([[0.0], np.cumsum(np.nan_to_num(sc.rates, nan=0.0) * 60.0)])
        lo = max(t - pm.RATE_WINDOW, float(knots[0]))
        hi = min(t, float(knots[-1]))
        v = (np.interp(hi, knots, cum) - np.interp(lo, knots, cum)) / max(hi - lo, 1e-9) if hi > lo else 0.0
        return {sc.name: float(v)}

    def live(self, counts: dict[str, int]) -> dict:
        self.sup = Supervisor(self.work / "logs")
        cp = ControlPlane(self.bins, self.work / "cluster", self.sup, k=self.k, ports=self.ports,
                          keda_crds=lambda: keda_crds(go_module_dir(self.drill_dir, "keda", KEDA_MODULE)))
        exporter = None
        try:
            t_start = time.time()
            cp.start()
            self.say(f"control plane up in {time.time() - t_start:.1f} s: {cp.versions}")
            self.clock = Clock(self.sc.span_start - self.lead_in, time.time(), self.k)
            exporter = pm.Exporter(self.ports.exporter, self.observed_rates).start()
            ts, vs = pm.counter(self.sc.times, self.sc.rates, 60.0)
            prom = pm.start(self.sup, self.work, self.ports.prometheus, self.ports.exporter, {self.sc.name: (ts, vs)})
            self.start_scaler()
            kube = cp.kube
            assert kube is not None
            for name, n in counts.items():
                kube.apply(mf.deployment(name, n, self.sc.cold_start_seconds, self.k))
            for so in mf.applied(self.sc, self.k, f"127.0.0.1:{self.ports.scaler_grpc}", prom):
                kube.apply(so)
            self.say(f"applied at trace {self.clock.now() - self.sc.span_start:+.0f} s; span "
                     f"{self.sc.span_seconds:.0f} s = {self.sc.span_seconds / self.k:.0f} s of wall time")
            self.drive(kube)
            self.results = self.judge(cp, prom, counts)
            return {"versions": cp.versions, "clock": self.clock.__dict__,
                    "peak_rss": _peaks(self.sup.procs + self.sup.retired),
                    "foreign": list(self.sup.foreign), "wildcard": sorted(self.sup.wildcard),
                    "audit": str(cp.audit_log), "answers": str(self.work / "answers.jsonl")}
        finally:
            if exporter is not None:
                exporter.stop()
            cp.stop()

    def drive(self, kube) -> None:
        """Until the span's end: the supervisor's samples and the scenario's events, on trace time."""
        assert self.clock is not None and self.sup is not None
        pending = sorted(self.sc.events, key=lambda e: e.at)
        restart_at: float | None = None
        end = self.sc.span_start + self.sc.span_seconds
        status = open(self.work / "status.jsonl", "a", encoding="utf-8")
        while (now := self.clock.now()) < end:
            self.sup.sample()
            self.sample_status(status, now)
            if self.sup.foreign:
                raise DrillError(f"a connection left 127.0.0.0/8: {self.sup.foreign[0]}")
            for proc in self.sup.procs:
                if not proc.alive() and proc is not self.scaler_proc:
                    raise DrillError(f"{proc.name} exited with {proc.popen.returncode}; the end of its log:\n"
                                     f"{proc.tail()}")
            while pending and now >= self.sc.span_start + pending[0].at:
                ev = pending.pop(0)
                if ev.kind == "kill-pods":
                    self.kill_pods(kube, ev.count)
                elif ev.kind == "stop-scaler":
                    self.say(f"stopping forescale for {ev.seconds:.0f} s of trace time")
                    assert self.scaler_proc is not None  # started before the drive
                    self.sup.retire(self.scaler_proc)
                    restart_at = self.sc.span_start + ev.at + ev.seconds
            if restart_at is not None and now >= restart_at:
                self.say("starting forescale again")
                restart_at = None
                self.start_scaler()
            time.sleep(min(SAMPLE_SECONDS, max(0.05, (end - now) / self.k)))
        status.close()

    def sample_status(self, out, now: float) -> None:
        """forescale's own view (observed, forecast peak, planned, reason per trigger), one line a second of wall
        time, for reading a run afterwards (status.jsonl)."""
        import urllib.request

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ports.scaler_http}/status.json", timeout=2) as r:
                doc = json.loads(r.read())
        except (OSError, ValueError):
            return
        out.write(json.dumps({"wall": time.time(), "t": now, "status": doc}, separators=(",", ":")) + "\n")

    def judge(self, cp: ControlPlane, prom: str, counts: dict[str, int]) -> list[dict]:
        """Both comparisons for each cache mode's ScaledObject (Prometheus still up: KEDA's own prometheus
        trigger's answers are asked of it at the HPA's sync times)."""
        from . import audit, judge
        from .cluster import HPA_LEGACY_DOWNSCALE_SECONDS

        assert cp.audit_log is not None and self.clock is not None
        tl = audit.read(cp.audit_log, self.work / "answers.jsonl")
        at = judge.PromAt(prom)
        clock = self.clock
        out = []
        for so in mf.applied(self.sc, self.k, f"127.0.0.1:{self.ports.scaler_grpc}", prom):
            name = so["metadata"]["name"]
            trigs = {i: judge.Trig(i, t["type"], bool(t.get("useCachedMetrics")), t.get("metadata", {}).get("query", ""))
                     for i, t in enumerate(so["spec"]["triggers"])}
            fid = judge.fidelity(tl, name, trigs, at, so["spec"].get("fallback"), HPA_LEGACY_DOWNSCALE_SECONDS / self.k)
            e2e = judge.end_to_end(tl, name, counts[name], self.work / "replay.csv",
                                   lambda t: clock.wall0 + (np.asarray(t) - clock.origin) / clock.k, self.k)
            checked = [c for c in fid.syncs if c.live is not None]
            spec = so["spec"]
            loop = (judge.keda_loop(tl, name, name, counts[name], float(spec["cooldownPeriod"]),
                                    float(spec["pollingInterval"])) if int(spec.get("minReplicaCount", MIN_REPLICAS)) == 0 else [])
            bad_loop = [c for c in loop if not c.ok]
            out.append({"name": self.sc.name, "scaledobject": name, "k": self.k,
                        "use_cached_metrics": all(t.cached for t in trigs.values()),
                        "syncs": len(checked), "rule_mismatches": len(fid.mismatches) + len(bad_loop),
                        "hpa_mismatches": len(fid.mismatches), "keda_checks": len(loop),
                        "keda_mismatches": [c.__dict__ for c in bad_loop[:20]],
                        "within_one_share": e2e.within_one_share, "pod_seconds_ratio": e2e.pod_seconds_ratio,
                        "scale_up_lag_s": e2e.scale_up_lag_s, "replay_pod_seconds": e2e.replay_pod_seconds,
                        "live_pod_seconds": e2e.live_pod_seconds,
                        "mismatched_syncs": [c.__dict__ for c in fid.mismatches[:20]]})
            (self.work / f"syncs-{name}.json").write_text(json.dumps([c.__dict__ for c in fid.syncs], indent=0))
        return out

    def kill_pods(self, kube, count: int) -> None:
        for mode in mf.MODES:
            name = f"{self.sc.manifest['metadata']['name']}-{mode}"
            pods = kube.get("Pod", namespace=mf.NAMESPACE, labelSelector=f"app={name}")["items"]
            ready = [p for p in pods if any(c["type"] == "Ready" and c["status"] == "True"
                                            for c in p.get("status", {}).get("conditions", []))
                     and not p["metadata"].get("deletionTimestamp")]
            ready.sort(key=lambda p: p["metadata"]["creationTimestamp"])
            for p in ready[:count]:
                try:
                    kube.delete("Pod", p["metadata"]["name"], mf.NAMESPACE, grace=0)
                except KubeError as e:
                    self.say(f"could not delete pod {p['metadata']['name']}: {e}")
            self.say(f"killed {min(count, len(ready))} ready pod(s) of {name}")


def _peaks(procs) -> dict[str, int]:
    out: dict[str, int] = {}
    for p in procs:
        out[p.name] = max(out.get(p.name, 0), p.peak_rss)
    return out


def keda_crds(keda_module_dir: Path) -> Path:
    return keda_module_dir / "config" / "crd" / "bases"


def go_module_dir(drill_dir: Path, component: str, module: str) -> Path:
    """The directory of ``module`` in Go's module cache, as the wrapper module ``drill/<component>`` resolves it."""
    try:
        out = subprocess.run(["go", "list", "-m", "-f", "{{.Dir}}", module], cwd=drill_dir / component,
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise DrillError(f"cannot ask Go where {module} is ({e}): the drill needs Go and `make drill-build`") from None
    if out.returncode != 0 or not out.stdout.strip():
        raise DrillError(f"{module} is not in Go's module cache ({out.stderr.strip()[:200]}): run `make drill-build`")
    return Path(out.stdout.strip())


def prepare(sc: Scenario, k: float, work: Path, bin_dir: Path, drill_dir: Path, ports: Ports,
            lead_in: float = 300.0) -> Run:
    bins = check_binaries(bin_dir)
    check_ports(ports)
    if work.exists():  # a run's files are its own: no audit log or record of an earlier run appended to
        shutil.rmtree(work)
    work.mkdir(parents=True)
    return Run(place(sc, time.time(), k, lead_in), k, work, bins, drill_dir, ports, lead_in=lead_in)


def cold(x: float) -> int:
    return int(math.ceil(x))
