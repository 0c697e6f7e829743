"""``tune --by ... --out DIR --gpu-budget N``: the fleet GPU budget's options, inputs, table and report.

``--gpu-budget`` is ``N`` (GPUs), ``P%`` (of the unconstrained fleet peak, which the joint replay measures first) or,
with ``--pools``, ``TYPE=N,...`` per GPU type of the pool file (each workload's replica draws on its placement's
first pool's type); ``--budget-rule`` the rule the fleet runs (``value`` or ``equal``; both are measured);
``--value-per-request`` a number for every workload, or a CSV file ``workload,value_per_request[,gpus_per_replica]``
(``workload`` as fleet.json names it). Everything is checked before the run (``check``) and the file once the
workloads are known (``per_workload``); ``fleet.budgeted`` does the replay, ``lines`` and ``report`` show it.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import click

from .. import budget as bud
from .clitypes import fail

BUDGET_KEYS = ("gpu_budget", "budget_rule", "value_per_request")


def budget_options() -> list:
    return [
        click.option("--gpu-budget", metavar="N|P%|TYPE=N,...", default=None,
                     help="Fleet: the GPUs all workloads may hold at once: N GPUs, P% of the unconstrained fleet "
                          "peak, or with --pools per GPU type (H100=16,L4=40). The fleet is replayed jointly within "
                          "it (starting + ready pods hold a GPU) and fleet.json, the table and DIR/budget.md say who "
                          "gave way, when, and what it cost, by both rules."),
        click.option("--budget-rule", type=click.Choice(bud.RULES), default=None,
                     help="Fleet, with --gpu-budget: who gets the GPUs: value (the requests of most value per GPU "
                          "first) or equal (an equal share). [default: value]"),
        click.option("--value-per-request", metavar="VALUE|FILE", default=None,
                     help="Fleet, with --gpu-budget: what one lost request costs ($), for every workload, or a CSV "
                          "file workload,value_per_request[,gpus_per_replica]. [default: 1: requests per GPU decide]"),
    ]


@dataclass(frozen=True)
class BudgetArgs:
    budgets: dict[str, float] | None  # GPUs per key (``budget.ANY``: any type); None with ``percent``
    percent: float | None
    rule: str
    value: float | None  # one value for all, or
    value_file: Path | None  # the per-workload file
    types: dict[str, str] | None  # the pool file's pools and their GPU types (None: no --pools)


def check(gpu_budget: str | None, budget_rule: str | None, value_per_request: str | None, *, fleet: bool,
          pools_file: Path | None) -> BudgetArgs | None:
    """The budget options, read and checked before any work (``fail`` naming what is wrong); None: no budget."""
    if gpu_budget is None:
        for flag, v in (("--budget-rule", budget_rule), ("--value-per-request", value_per_request)):
            if v is not None:
                fail(f"{flag} goes with --gpu-budget (a fleet's GPU budget): add --gpu-budget N")
        return None
    if not fleet:
        fail("--gpu-budget is a fleet's budget: give --by LABELS (with --prometheus) or --series-column COLUMN "
             "(with a CSV), and --out DIR")
    types = pool_types(pools_file) if pools_file is not None else None
    type_names = None if types is None else list(dict.fromkeys(types.values()))
    text = gpu_budget.strip()
    budgets, percent = None, None
    try:
        if text.endswith("%"):
            percent = float(text[:-1])
            if not (math.isfinite(percent) and 0 < percent <= 100):
                raise bud.BudgetError(f"GPU budget {text[:40]!r}: accepted is a percentage in (0, 100]")
        else:
            budgets = bud.parse_budget(text, type_names)
    except ValueError as e:
        fail(f"--gpu-budget: {e}; or P% of the unconstrained fleet peak (70%)" if isinstance(e, bud.BudgetError) else
             f"--gpu-budget {text[:40]!r}: accepted is N GPUs, P% of the unconstrained fleet peak (70%) or TYPE=N,...")
    value, value_file = _value(value_per_request)
    return BudgetArgs(budgets, percent, budget_rule or bud.DEFAULT_RULE, value, value_file, types)


def pool_types(path: Path) -> dict[str, str]:
    """The pool file's pools and the GPU type of each."""
    from .pools import PoolOptionError, read_pool_file

    try:
        pf, _ = read_pool_file(path)
    except PoolOptionError as e:
        fail(str(e))
    return {p.name: p.gpu for p in pf.pools}


@dataclass(frozen=True)
class Plan:
    """The budget of a fleet run, every workload's inputs known: GPUs per key, the key the replicas draw on."""

    args: BudgetArgs
    key: str
    values: dict[str, float]
    gpus: dict[str, float]


def planned(args: BudgetArgs, ids: list[str], settings, gpus_per_replica: float, min_replicas: int) -> Plan:
    """The per-workload inputs and the budget's key, checked before the run: the key the workloads' replicas draw on
    (with --pools and a budget per type: the GPU type of the placement's first pool) and a budget that holds
    --min-replicas of every workload (a percentage is checked once the peak is known)."""
    placement = settings.world.placement
    gpus = gpus_per_replica if placement is None else placement.first.gpu_fraction
    key = bud.ANY
    if args.budgets is not None and set(args.budgets) != {bud.ANY}:
        assert args.types is not None and placement is not None
        key = args.types[placement.first.name.split("/")[0]]
        if key not in args.budgets:
            fail(f"--gpu-budget {bud.budget_text(args.budgets)}: no budget for {key}, the GPU type the replicas are "
                 f"placed on ({placement.first.name}); accepted: a budget for {key}, or N GPUs of any type")
    values, per = per_workload(args, ids, gpus)
    if args.budgets is not None:
        try:
            bud.arbitrate([bud.Claim(i, 0, min_replicas, per[i]) for i in ids], args.budgets[key])
        except bud.BudgetError as e:
            fail(f"--gpu-budget with --min-replicas {min_replicas}: {e}")
    return Plan(args, key, values, per)


BUDGET_NAME = "gpus"  # the budget's name in DIR/budgets.yaml and the triggers' gpuBudget


def trigger_keys(plan: Plan, fid: str, min_replicas: int) -> dict[str, str]:
    """A tuned workload's trigger metadata joining the budget the server holds (``serve --budget-file``)."""
    return {"gpuBudget": BUDGET_NAME, "gpusPerReplica": f"{plan.gpus[fid]:g}",
            "valuePerRequest": f"{plan.values[fid]:g}", "minReplicaCount": str(min_replicas)}


def budget_file(section: dict, key: str) -> str:
    """``DIR/budgets.yaml``: the budget as ``forescale serve --budget-file`` reads it."""
    return (f"# forescale tune (fleet): the GPU budget the ScaledObjects' gpuBudget names ({section['given']})\n"
            f"budgets:\n  - name: {BUDGET_NAME}\n    gpus: {section['gpus'][key]:g}\n    rule: {section['rule']}\n")


def run(plan: Plan, drives: list, out_dir: Path) -> dict:
    """The fleet replayed within the budget (``fleet.budgeted``); its section of fleet.json, ``DIR/budget.md``."""
    from ..fleet.budgeted import members, replay_budget

    a = plan.args
    ms = members(drives, plan.values, plan.gpus, plan.key)
    if not ms:
        return {"skipped": "no workload was tuned: nothing to replay within the budget"}
    budgets = None if a.budgets is None else {plan.key: a.budgets[plan.key]}
    try:
        section, _ = replay_budget(ms, budgets, a.rule, a.percent)
    except bud.BudgetError as e:
        fail(f"--gpu-budget {a.percent:g}%: {e}" if a.percent is not None else f"--gpu-budget: {e}")
    if a.budgets is not None and set(a.budgets) - {plan.key}:
        section["unused"] = {k: v for k, v in a.budgets.items() if k != plan.key}
    (out_dir / "budget.md").write_text(report(section), encoding="utf-8")
    (out_dir / "budgets.yaml").write_text(budget_file(section, plan.key), encoding="utf-8")
    return section


def _value(text: str | None) -> tuple[float | None, Path | None]:
    if text is None:
        return 1.0, None
    try:
        v = float(text)
    except ValueError:
        p = Path(text)
        if not p.is_file():
            fail(f"--value-per-request {text[:60]!r}: neither a number nor a readable file; accepted is a value >= 0 "
                 "($ per lost request) or a CSV file workload,value_per_request[,gpus_per_replica]")
        return None, p
    if not (math.isfinite(v) and v >= 0):
        fail(f"--value-per-request {text[:40]!r}: accepted is a finite value >= 0 ($ per lost request)")
    return v, None


def per_workload(args: BudgetArgs, ids: list[str], default_gpus: float) -> tuple[dict[str, float], dict[str, float]]:
    """The value of a lost request and the GPUs per replica of each workload (``ids``: fleet.json's names)."""
    if args.value_file is None:
        assert args.value is not None
        return {i: args.value for i in ids}, {i: default_gpus for i in ids}
    path = args.value_file
    form = "a CSV with the header workload,value_per_request[,gpus_per_replica] and a row per workload"
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            rows = list(csv.DictReader(fh))
            head = [h.strip() for h in (rows[0].keys() if rows else [])]
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        fail(f"--value-per-request {path}: cannot read ({getattr(e, 'strerror', None) or e}); expected {form}")
    if "workload" not in head or "value_per_request" not in head:
        fail(f"--value-per-request {path}: header {head[:5]!r}; expected {form}")
    values, gpus = {i: 1.0 for i in ids}, {i: default_gpus for i in ids}
    for n, row in enumerate(rows, start=2):
        w = (row.get("workload") or "").strip()
        if w not in values:
            fail(f"--value-per-request {path}: line {n}: workload {w[:60]!r} is not in the fleet; its workloads: "
                 f"{', '.join(ids[:10])}{' ...' if len(ids) > 10 else ''}")
        values[w] = _number(path, n, "value_per_request", row.get("value_per_request"), lo_open=False)
        if "gpus_per_replica" in head:
            gpus[w] = _number(path, n, "gpus_per_replica", row.get("gpus_per_replica"), lo_open=True)
    return values, gpus


def _number(path: Path, line: int, col: str, raw: str | None, *, lo_open: bool) -> float:
    text = (raw or "").strip()
    accepted = "a number > 0 (GPUs one replica holds)" if lo_open else "a number >= 0 ($ per lost request)"
    try:
        v = float(text)
    except ValueError:
        fail(f"--value-per-request {path}: line {line}: {col} {text[:30]!r} is missing or not a number; accepted "
             f"is {accepted}")
    if not math.isfinite(v) or v < 0 or (lo_open and v == 0):
        fail(f"--value-per-request {path}: line {line}: {col} {text[:30]!r}; accepted is {accepted}")
    return v


def lines(b: dict) -> list[str]:
    """The budget's table: per workload and rule, minutes given way, requests and value lost above the unconstrained
    replay; the fleet totals of both rules."""
    if "skipped" in b:
        return ["", f"GPU budget: {b['skipped']}"]
    head = (f"{'workload':<28}{'$/req':>8}{'GPU/rep':>8} | {'value: gave way min':>20}{'+lost req':>11}{'+lost $':>11}"
            f" | {'equal: gave way min':>20}{'+lost req':>11}{'+lost $':>11}")
    peak = ", ".join(f"{v:g} GPUs at {b['unconstrained']['peak_at'][k]}" for k, v in b["unconstrained"]["peak_gpus"].items())
    given = "" if b["given"] == bud.budget_text(b["gpus"]) else f"{b['given']}; "
    out = ["", f"GPU budget {bud.budget_text(b['gpus'])} ({given}unconstrained peak {peak}); the fleet runs "
               f"the {b['rule']} rule", head, "-" * len(head)]
    for w in b["workloads"]:
        cells = "".join(f" | {w[r]['gave_way_minutes']:>20.1f}{w[r]['extra_lost_requests']:>11.0f}"
                        f"{w[r]['extra_lost_value']:>11.2f}" for r in bud.RULES)
        out.append(f"{w['workload'][:27]:<28}{w['value_per_request']:>8.4g}{w['gpus_per_replica']:>8.3g}{cells}")
    tot = "".join(f" | {b['rules'][r]['gave_way_minutes']:>20.1f}{b['rules'][r]['extra_lost_requests']:>11.0f}"
                  f"{b['rules'][r]['extra_lost_value']:>11.2f}" for r in bud.RULES)
    out += [f"{'fleet':<44}{tot}",
            f"(lost above the unconstrained replay, which lost {b['unconstrained']['lost_requests']:.0f} requests = "
            f"${b['unconstrained']['lost_value']:.2f}; peak within the budget: value "
            f"{_peaks(b, 'value')}, equal {_peaks(b, 'equal')}; gave way: answer capped or a pod Pending for a GPU)"]
    v, e = b["rules"]["value"]["lost_value"], b["rules"]["equal"]["lost_value"]
    out.append(f"value-weighted loses ${v:.2f} in all, equal share ${e:.2f}"
               + (f": {100 * (1 - v / e):.1f} % less" if e > 0 and v <= e else ""))
    return out


def _peaks(b: dict, rule: str) -> str:
    return ", ".join(f"{v:g}" for v in b["rules"][rule]["peak_gpus"].values())


def report(b: dict) -> str:
    """``DIR/budget.md``: the table, and when each workload gave way (its longest periods) by each rule."""
    text = ["# GPU budget", "", "```", *lines(b)[1:], "```", ""]
    for w in b["workloads"]:
        text.append(f"## {w['workload']}")
        text.append("")
        for r in bud.RULES:
            f = w[r]
            text.append(f"- {r}: gave way {f['gave_way_minutes']:.1f} min (answer capped {f['capped_minutes']:.1f}, a "
                        f"pod Pending {f['pending_minutes']:.1f}); lost {f['lost_requests']:.0f} requests "
                        f"({f['extra_lost_requests']:+.0f} against unconstrained), ${f['lost_value']:.2f} "
                        f"({f['extra_lost_value']:+.2f}); {f['gpu_hours']:.1f} GPU-hours")
            for p in f["periods"]:
                text.append(f"  - {p['start']} .. {p['end']} ({p['minutes']:.1f} min)")
        text.append("")
    return "\n".join(text)
