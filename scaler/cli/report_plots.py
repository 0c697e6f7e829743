"""The report's PNG plots (matplotlib, Agg), for terminals and documents; ``scaler.cli.report`` writes them beside
index.html:

* ``capacity_plot``   demand vs ready capacity per policy over the simulated span (and around the worst peak:
                      ``worst_window``)
* ``forecast_plot``   the model's forecast L ahead vs the actual rate, with its quantile band
* ``frontier_plot``   each policy on the miss-vs-cost plane
* ``sweep_plot``      with ``--sweep``/``tune``: every swept configuration, Pareto points joined
* ``checks_plot``     with ``--scenario``: each scenario check per policy against its limit
* ``starts_plot``     with ``--cold-starts``: the past start-ups the simulated pods drew from
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..replay.engine import Result
from ..replay.frontier import Point, pareto_flags
from .render import COLORS, pool

MAX_POINTS = 3000  # per line in the overview plots


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    return plt, mdates


def _dates(t: np.ndarray) -> np.ndarray:
    return (np.asarray(t, dtype="float64") * 1e6).astype("datetime64[us]")


def worst_window(r: Result, half_width: float = 75 * 60.0) -> tuple[float, float]:
    """The window around the worst peak: most requests missed (30 min smoothed) by the HPA policies, else peak demand."""
    sc = r.scenario
    cap_missing = np.zeros(sc.n)
    for name, p in r.policies.items():
        if name in ("oracle", "keep_alive"):
            continue
        cap_missing += np.maximum(sc.demand - p.timeline.ready * sc.qps_per_replica, 0.0)
    w = max(1, int(1800 / sc.tick))
    smooth = np.convolve(cap_missing, np.ones(w), mode="same")
    i = int(np.argmax(smooth)) if smooth.max() > 0 else int(np.argmax(sc.demand))
    t = sc.t0 + i * sc.tick
    lo = max(sc.t0, t - half_width)
    hi = min(sc.t0 + sc.n * sc.tick, lo + 2 * half_width)
    return lo, hi


def capacity_plot(r: Result, path: Path, window: tuple[float, float] | None) -> None:
    plt, mdates = _plt()
    sc = r.scenario
    names = list(r.policies)
    t = sc.times
    if window is not None:
        keep = (t >= window[0]) & (t < window[1])
    else:
        keep = np.ones(sc.n, dtype=bool)
    k = max(1, int(math.ceil(keep.sum() / MAX_POINTS)))
    tt = _dates(t[keep][::k])
    demand = pool(sc.demand[keep], k, "max")
    fig, axes = plt.subplots(len(names), 1, figsize=(13, 1.9 * len(names) + 0.8), sharex=True, squeeze=False)
    top = max(float(np.nanmax(demand)), max(float((p.timeline.replicas[keep] * sc.qps_per_replica).max())
                                            for p in r.policies.values())) * 1.3
    for ax, name in zip(axes[:, 0], names):
        p = r.policies[name]
        ready = pool(p.timeline.ready[keep] * sc.qps_per_replica, k, "min")
        total = pool(p.timeline.replicas[keep] * sc.qps_per_replica, k, "max")
        c = COLORS.get(name, "#1f77b4")
        ax.fill_between(tt, 0, total, step="post", color=c, alpha=0.12, lw=0, label="starting + ready")
        ax.step(tt, ready, where="post", color=c, lw=1.3, label="ready capacity")
        ax.plot(tt, demand, color="black", lw=0.8, label="demand")
        ax.fill_between(tt, ready, demand, where=demand > ready, step="post", color="#ff7f0e", alpha=0.6, lw=0,
                        label="missed")
        o = p.outcome
        ax.set_ylim(0, top)
        ax.set_ylabel("req/s")
        ax.text(0.005, 0.93, f"{name}: missed {100 * o.underprovisioned_fraction:.2f} %, "
                              f"{o.violation_minutes} violation min, {o.replica_hours:.0f} replica-h"
                              + (f" ({o.replica_hours / r.oracle_hours:.2f}x oracle)" if r.oracle_hours else ""),
                transform=ax.transAxes, va="top", fontsize=9.5, weight="bold",
                bbox=dict(facecolor="white", alpha=0.8, lw=0, pad=1.5))
        ax.grid(alpha=0.25)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper right", ncol=4, fontsize=9, frameon=False)
    ax = axes[-1, 0]
    loc = mdates.AutoDateLocator()
    ax.xaxis.set_major_locator(loc)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(loc))
    what = "worst peak" if window is not None else "simulated span"
    fig.suptitle(f"Demand vs ready capacity per policy, {what} (UTC) -- T_cold {r.lead.cold_start_seconds:g}s, "
                 f"{r.qps_per_replica:g} req/s per replica", x=0.01, ha="left", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def forecast_plot(r: Result, path: Path, window: tuple[float, float]) -> None:
    plt, mdates = _plt()
    s = r.settings
    mr = r.models.get(s.model)
    fig, axes = plt.subplots(2, 1, figsize=(13, 7.5), squeeze=False)
    if mr is None:
        fig.text(0.5, 0.5, "no forecast", ha="center")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return
    series = r.trace.series
    lo_q, hi_q = round(1 - s.quantile, 6), s.quantile
    for ax, win in zip(axes[:, 0], (None, window)):
        t0, t1 = (r.sim_start, r.sim_end) if win is None else win
        a = int(np.searchsorted(series.t, t0))
        b = int(np.searchsorted(series.t, t1))
        keep = (mr.target_t >= t0) & (mr.target_t < t1)
        k = max(1, int(math.ceil(max(b - a, keep.sum()) / MAX_POINTS)))
        ta = _dates(series.t[a:b][::k])
        tf = _dates(mr.target_t[keep][::k])
        ax.fill_between(tf, pool(mr.lo_at_l[keep], k, "min"), pool(mr.hi_at_l[keep], k, "max"), color="#1f77b4",
                        alpha=0.22, lw=0, label=f"q{lo_q:g} .. q{hi_q:g} band")
        ax.plot(tf, pool(mr.mean_at_l[keep], k, "max"), color="#1f77b4", lw=1.0, label=f"{mr.model} forecast")
        ax.plot(ta, pool(series.y[a:b], k, "max"), color="black", lw=0.8, label="actual")
        _mark_calendar(ax, r, t0, t1)
        ax.set_ylabel("req/s")
        ax.grid(alpha=0.25)
        loc = mdates.AutoDateLocator()
        ax.xaxis.set_major_locator(loc)
        ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(loc))
        ax.set_title("simulated span" if win is None else "worst peak", loc="left", fontsize=10)
    axes[0, 0].legend(loc="upper left", fontsize=9, ncol=3)
    sc = mr.scores
    fig.suptitle(f"{mr.model}: forecast {sc['horizon_steps']} step(s) = L ahead vs actual (level-corrected, as the "
                 f"policy uses it) -- MASE {sc['mase']:.3f}, WAPE {sc['wape']:.3f}, coverage of q{hi_q:g} "
                 f"{sc['coverage']:.3f}", x=0.01, ha="left", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _mark_calendar(ax, r: Result, t0: float, t1: float) -> None:
    """Shade the holidays (--holidays) and events (--events) within [t0, t1)."""
    spans = []
    if r.settings.holidays:
        from forecaster.calendar import holiday_periods

        spans += [(a, b, "#ff7f0e") for a, b, _ in holiday_periods(r.settings.holidays, t0, t1 - 1e-6,
                                                                   r.settings.holiday_window, r.settings.timezone)]
    spans += [(e.start, e.end, "#2ca02c") for e in r.settings.events]
    for a, b, color in spans:
        if b > t0 and a < t1:
            ax.axvspan(_dates(np.array([max(a, t0)]))[0], _dates(np.array([min(b, t1)]))[0], color=color, alpha=0.12,
                       lw=0)


def frontier_plot(r: Result, path: Path) -> None:
    plt, _ = _plt()
    from matplotlib.ticker import FuncFormatter

    fig, ax = plt.subplots(figsize=(9, 6))
    oh = r.oracle_hours or 1.0
    pts = []
    for name, p in r.policies.items():
        o = p.outcome
        pts.append((name, o.replica_hours / oh, 100 * o.underprovisioned_fraction))
    for name, x, y in pts:
        ax.scatter([x], [y], s=80, color=COLORS.get(name, "#1f77b4"), zorder=3, label=name)
    ax.set_xscale("log")
    ax.set_yscale("symlog", linthresh=0.1, linscale=1.0)
    xs = [x for _, x, _ in pts if x > 0]
    lo, hi = min(xs + [1.0]) / 1.1, max(xs + [1.0]) * 1.15
    ax.set_xlim(lo, hi)
    ax.set_xticks([v for v in (0.5, 0.6, 0.7, 0.8, 0.9, 1, 1.1, 1.25, 1.5, 2, 3, 4, 5, 7, 10, 15, 20, 30, 50)
                   if lo <= v <= hi])
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g} %"))
    ax.set_ylim(-0.02, max(1.0, max(y for _, _, y in pts)) * 2)
    ax.set_xlabel("cost: replica-hours / oracle (log scale)")
    ax.set_ylabel("requests missed (symlog scale)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(loc="upper right", fontsize=9, frameon=True)
    for name, x, y in pts:
        ax.annotate(f"{name}\n{y:.2f} %, {x:.2f}x", (x, y), textcoords="offset points", xytext=(6, 6), fontsize=8.5,
                    color=COLORS.get(name, "#333"))
    ax.set_title("Miss vs cost per policy: lower-left is better; judge by position, not by one number",
                 fontsize=11, loc="left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


FAMILY_COLORS = {**COLORS, "seasonal_naive": "#e377c2", "oracle": "#000000"}


def _selection_marks(ax, selection) -> None:
    """The target (and the cost cap) as lines, the chosen configuration as a star with its label."""
    ax.axhline(100 * selection.target_miss, color="#d62728", ls="--", lw=1.0, zorder=1)
    ax.text(0.995, 100 * selection.target_miss, f"target {100 * selection.target_miss:g} % ", color="#d62728",
            transform=ax.get_yaxis_transform(), ha="right", va="bottom", fontsize=9)
    if selection.max_cost_ratio is not None:
        ax.axvline(selection.max_cost_ratio, color="#d62728", ls=":", lw=1.0, zorder=1)
    p = selection.point
    if p is not None and p.cost_ratio is not None:
        ax.scatter([p.cost_ratio], [100 * p.miss], marker="*", s=380, color="gold", edgecolors="black",
                   lw=0.8, zorder=6)
        ax.annotate(f"chosen: {p.label}\n{100 * p.miss:.3f} % missed, {p.cost_ratio:.3f}x oracle",
                    (p.cost_ratio, 100 * p.miss), textcoords="offset points", xytext=(18, 28), fontsize=9,
                    weight="bold", arrowprops=dict(arrowstyle="-", color="#555555", lw=0.7),
                    bbox=dict(facecolor="white", alpha=0.85, lw=0, pad=1.5))


def _cost(p: Point) -> float:
    """A point's cost ratio, where it has one (``sweep_plot`` draws only those)."""
    assert p.cost_ratio is not None
    return p.cost_ratio


def sweep_plot(r: Result, path: Path, selection=None) -> None:
    """The swept configurations on the miss-vs-cost plane: one colour per family, Pareto points joined."""
    plt, _ = _plt()
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter, NullFormatter

    pts = [p for p in r.points if p.cost_ratio is not None]
    floor = 1e-3  # % : below this (and 0) the axis is linear, so a zero miss is drawn, at the bottom
    fig, ax = plt.subplots(figsize=(11, 7))
    fams = list(dict.fromkeys(p.policy for p in pts))
    for fam in fams:
        c = FAMILY_COLORS.get(fam, "#333333")
        mine = [p for p in pts if p.policy == fam]
        if fam == "oracle":
            p = mine[0]
            ax.scatter([p.cost_ratio], [100 * p.miss], marker="D", s=90, color=c, zorder=5)
            ax.annotate("oracle: perfect foresight,\nthe cost reference", (p.cost_ratio, 100 * p.miss),
                        textcoords="offset points", xytext=(-4, 52), ha="center", fontsize=9,
                        arrowprops=dict(arrowstyle="-", color="#555555", lw=0.7),
                        bbox=dict(facecolor="white", alpha=0.85, lw=0, pad=1.5))
            continue
        par = [p for p in mine if p.pareto]
        rest = [p for p in mine if not p.pareto]
        ax.scatter([p.cost_ratio for p in rest], [100 * p.miss for p in rest], s=28, facecolors="none",
                   edgecolors=c, alpha=0.55, lw=1.0, zorder=2)
        ax.scatter([p.cost_ratio for p in par], [100 * p.miss for p in par], s=60, color=c, edgecolors="black",
                   lw=0.6, zorder=4)
        own = [p for p, f in zip(mine, pareto_flags([p.miss for p in mine], [p.cost for p in mine])) if f]
        own.sort(key=_cost)  # the family as a curve: its own best points, grid and searched
        if len(own) > 1:
            ax.plot([p.cost_ratio for p in own], [100 * p.miss for p in own], color=c, lw=1.0, alpha=0.8, zorder=3,
                    label=fam)
    front = sorted((p for p in pts if p.pareto), key=_cost)
    if front:
        ax.step([p.cost_ratio for p in front], [100 * p.miss for p in front], where="post", color="#444444",
                lw=0.9, alpha=0.6, zorder=3)
    if selection is not None:
        _selection_marks(ax, selection)
    for p in pts:  # name each family's default configuration (what `forescale backtest` runs)
        if p.default and p.policy != "oracle" and (selection is None or p is not selection.point):
            ax.annotate(p.policy, (p.cost_ratio, 100 * p.miss), textcoords="offset points", xytext=(5, -11),
                        fontsize=8, color=FAMILY_COLORS.get(p.policy, "#333333"))
    ax.set_xscale("log")
    ax.set_yscale("symlog", linthresh=floor, linscale=0.4)
    xs = [_cost(p) for p in pts]
    lo = min(xs + [1.0]) / 1.04
    # far-out points (keep_alive at 4x...) would squeeze the interesting part: the axis ends past the
    # Pareto front (and the choice), and what lies beyond is drawn on the edge with its ratio
    keep = [_cost(p) for p in pts if p.pareto or p.policy == "oracle"]
    if selection is not None and selection.point is not None and selection.point.cost_ratio is not None:
        keep.append(selection.point.cost_ratio)
    hi = min(max(xs + [1.0]) * 1.06, max(max(keep + [1.0]) * 1.25, 1.6))
    beyond = sorted((p for p in pts if _cost(p) > hi), key=_cost)
    for p in beyond:
        ax.scatter([hi / 1.012], [100 * p.miss], marker=">", s=40, color=FAMILY_COLORS.get(p.policy, "#333"),
                   zorder=3, clip_on=False)
    if beyond:
        ax.text(0.99, 0.09, "beyond the axis (>):\n" + "\n".join(
                f"{p.label}: {p.cost_ratio:.2f}x, {100 * p.miss:.3g} %" for p in beyond[:8])
                + (f"\n... {len(beyond) - 8} more" if len(beyond) > 8 else ""),
                transform=ax.transAxes, ha="right", va="bottom", fontsize=7.5, color="#444444",
                bbox=dict(facecolor="white", alpha=0.85, lw=0, pad=2))
    ax.set_xlim(lo, hi)
    ticks: list[float] = []
    gap = 0.07 * math.log10(hi / lo)
    for v in (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1, 1.05, 1.1, 1.2, 1.3, 1.4, 1.5, 1.75, 2, 2.5, 3, 4, 5, 7, 10):
        if lo <= v <= hi and (not ticks or math.log10(v / ticks[-1]) >= gap or v == 1):
            if ticks and math.log10(v / ticks[-1]) < gap:  # keep 1x, drop its crowded neighbour
                ticks.pop()
            ticks.append(v)
    ax.set_xticks(ticks)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    top = max([100 * p.miss for p in pts] + [1.0])
    ax.set_ylim(-floor * 0.3, top * 2.5)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: "0" if v == 0 else f"{v:g} %"))
    ax.set_xlabel("cost: replica-hours / oracle's (log scale)")
    ax.set_ylabel("requests missed (log scale; 0 at the bottom)")
    ax.grid(alpha=0.3, which="major")
    handles = [Line2D([], [], marker="o", ls="", color=FAMILY_COLORS.get(f, "#333333"), label=f)
               for f in fams if f != "oracle"]
    handles += [Line2D([], [], marker="o", ls="", color="#999999", markeredgecolor="black", label="Pareto-optimal"),
                Line2D([], [], marker="o", ls="", markerfacecolor="none", color="#999999", label="dominated")]
    ax.legend(handles=handles, loc="upper right", fontsize=9, frameon=True, ncol=2)
    ax.set_title(f"Miss vs cost of {len(pts)} configurations on {r.trace.name[:60]}\n"
                 f"{(r.sim_end - r.sim_start) / 86400:.1f} d simulated, T_cold {r.lead.cold_start_seconds:g} s, "
                 f"{r.qps_per_replica:g} req/s per replica; lower-left is better", fontsize=11, loc="left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def checks_plot(r: Result, path: Path) -> None:
    """The scenario checks: value / limit per policy and check (1 = at the limit; right of it failed)."""
    plt, _ = _plt()
    cs = r.checks
    fig, ax = plt.subplots(figsize=(10, 0.32 * len(cs) + 1.5))
    ys = np.arange(len(cs))[::-1]
    vals = [c["value_seconds"] / c["limit_seconds"] if c["value_seconds"] is not None else math.nan for c in cs]
    top = max([v for v in vals if math.isfinite(v)] + [2.0]) * 1.1
    for y, c, v in zip(ys, cs, vals):
        shown = top if not math.isfinite(v) else max(v, 0.0)
        ax.barh([y], [shown], color="#2ca02c" if c["passed"] else "#d62728", alpha=0.8)
        if c["value_seconds"] is not None and c["value_seconds"] < 0:
            ax.annotate(f"ready {-c['value_seconds']:g} s before", (0, y), xytext=(4, -3),
                        textcoords="offset points", fontsize=7.5)
    ax.axvline(1.0, color="#333", lw=1, ls="--")
    ax.set_yticks(ys)
    ax.set_yticklabels([f"{c['policy']}: {c['check'][:60]}" for c in cs], fontsize=7.5)
    ax.set_xlabel("value / limit (the dashed line is the limit; never = the full bar)")
    ax.set_title("Before you go live: scenario checks per policy (green passed)", fontsize=11, loc="left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def starts_plot(sample, path: Path) -> None:
    """The past start-ups each simulated pod drew from (``--cold-starts``), with the T_cold the scaler picks."""
    plt, _ = _plt()
    fig, ax = plt.subplots(figsize=(8, 3.2))
    ax.hist(sample.total, bins=min(40, max(5, len(sample.total) // 5)), color="#1f77b4", alpha=0.8,
            label=f"created -> ready ({len(sample.total)} starts, {len(sample.new_node)} on a new node)")
    ax.axvline(sample.t_cold, color="#d62728", label=f"T_cold = p{100 * sample.quantile:g} = {sample.t_cold:.0f} s")
    ax.set_xlabel("seconds")
    ax.set_ylabel("pods")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
