"""All of a drill: the scenarios chosen, each run (replay, live run, judgement), ``report.json``, the acceptance
checks and the table printed at the end.

Acceptance (per scenario and cache mode): ``rule_mismatches`` 0, ``syncs`` > 0, ``within_one_share`` >= 0.95,
``pod_seconds_ratio`` in [0.97, 1.03]; and no connection off loopback.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from .cluster import Ports
from .procs import DrillError
from .run import prepare
from .scenarios import Scenario, builtins

WITHIN_ONE_MIN = 0.95
POD_SECONDS = (0.97, 1.03)


def choose(names: str, short: bool, user: Scenario | None = None) -> list[Scenario]:
    if user is not None:
        return [user]
    table = builtins(short=short)
    wanted = list(table) if names.strip() in ("", "all") else [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in table]
    if unknown:
        raise DrillError(f"unknown scenario {', '.join(repr(n) for n in unknown)}; accepted: {', '.join(table)} or all")
    return [table[n] for n in wanted]


def failures(row: dict) -> list[str]:
    out = []
    if row["syncs"] <= 0:
        out.append("no HPA sync observed")
    if row["rule_mismatches"]:
        out.append(f"{row['rule_mismatches']} rule mismatch(es)")
    if not row["within_one_share"] >= WITHIN_ONE_MIN:
        out.append(f"within one replica {row['within_one_share']:.3f} < {WITHIN_ONE_MIN}")
    lo, hi = POD_SECONDS
    if not lo <= row["pod_seconds_ratio"] <= hi:
        out.append(f"pod-seconds ratio {row['pod_seconds_ratio']:.3f} outside {lo}-{hi}")
    return out


def run_all(scenarios: list[Scenario], k: float, out: Path, bin_dir: Path, drill_dir: Path,
            port_base: int) -> tuple[dict, bool]:
    out.mkdir(parents=True, exist_ok=True)
    doc: dict = {"k": k, "versions": {}, "scenarios": [], "resources": {}, "failures": []}
    path = out / "report.json"
    for sc in scenarios:
        t0 = time.monotonic()
        run = prepare(sc, k, out / "runs" / sc.name, bin_dir, drill_dir, Ports(port_base))
        run.replay()
        live = run.live(run.initial_counts())
        wall = time.monotonic() - t0
        doc["versions"] = live["versions"]
        rss = live["peak_rss"]
        doc["resources"][sc.name] = {"wall_seconds": round(wall, 1), "peak_rss_bytes": rss,
                                     "control_plane_peak_rss_bytes": sum(v for n, v in rss.items() if n != "forescale"),
                                     "wildcard_listeners": live["wildcard"], "foreign_connections": live["foreign"]}
        for row in run.results:
            row["failures"] = failures(row)
            doc["scenarios"].append(row)
            doc["failures"] += [f"{row['scaledobject']}: {f}" for f in row["failures"]]
        if live["foreign"]:
            doc["failures"].append(f"{sc.name}: connection off loopback: {live['foreign'][0]}")
        path.write_text(json.dumps(doc, indent=1))  # after every scenario: a later failure keeps the earlier ones
    return doc, not doc["failures"]


def table(doc: dict) -> str:
    head = f"{'scenario':<22} {'cached':>6} {'syncs':>5} {'rule x':>6} {'within 1':>8} {'pod-s':>6} {'lag s':>6}  result"
    lines = [f"versions: {', '.join(f'{k} {v}' for k, v in doc['versions'].items())}; k = {doc['k']:g}", head,
             "-" * len(head)]
    for r in doc["scenarios"]:
        lag = "-" if r["scale_up_lag_s"] is None else f"{r['scale_up_lag_s']:.0f}"
        lines.append(f"{r['scaledobject']:<22} {str(r['use_cached_metrics']).lower():>6} {r['syncs']:>5} "
                     f"{r['rule_mismatches']:>6} {r['within_one_share']:>8.3f} {r['pod_seconds_ratio']:>6.3f} "
                     f"{lag:>6}  {'ok' if not r['failures'] else '; '.join(r['failures'])}")
    return "\n".join(lines)
