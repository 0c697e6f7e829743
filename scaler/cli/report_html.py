"""The interactive report: one self-contained ``index.html`` (plotly.js inlined, no CDN) and the per-tick CSV.

Charts (zoom with the range slider or a drag, toggle a policy by clicking its legend entry):

* ``chart-capacity``  demand vs ready capacity per policy over the simulated span
* ``chart-misses``    requests missed so far (cumulative %) per policy
* ``chart-frontier``  each policy (and with ``--sweep``/``tune`` every swept configuration) on the
                      miss-vs-cost plane, hover for the knobs
* ``chart-forecast``  the forecast L ahead vs the actual rate, with its quantile band

``tune`` adds the paste-ready trigger metadata (YAML) it selected.
"""

from __future__ import annotations

import csv
import html
import math
from pathlib import Path

import numpy as np

from ..replay.engine import Result
from .render import pool

MAX_POINTS = 4000  # per line: keeps the page small on long spans (max/min pooling keeps the peaks)


def _iso(t: np.ndarray) -> list[str]:
    return [str(x) for x in (np.asarray(t, dtype="float64") * 1e3).astype("datetime64[ms]")]


def _figures(r: Result, selection=None, sweep: bool = False) -> list[tuple[str, str, object]]:
    import plotly.graph_objects as go

    from .report import COLORS as colors  # the PNGs' colours: one colour per policy everywhere

    sc = r.scenario
    k = max(1, math.ceil(sc.n / MAX_POINTS))
    tt = _iso(sc.times[::k])
    figs = []
    cap = go.Figure()
    cap.add_trace(go.Scatter(x=tt, y=pool(sc.demand, k, "max"), name="demand", line=dict(color="black", width=1)))
    for name, p in r.policies.items():
        cap.add_trace(go.Scatter(x=tt, y=pool(p.timeline.ready * sc.qps_per_replica, k, "min"), name=f"{name} ready",
                                 line=dict(shape="hv", width=1.2, color=colors.get(name)), visible=True if name in ("predictive", "reactive",
                                                                                            "oracle") else "legendonly"))
    cap.update_layout(title="Demand vs ready capacity (req/s); click the legend to show or hide a policy",
                      xaxis=dict(rangeslider=dict(visible=True)), yaxis_title="req/s", height=520)
    figs.append(("chart-capacity", "Demand vs ready capacity", cap))

    miss = go.Figure()
    total = float(np.sum(sc.demand)) or 1.0
    for name, p in r.policies.items():
        missed = np.maximum(sc.demand - p.timeline.ready * sc.qps_per_replica, 0.0)
        miss.add_trace(go.Scatter(x=tt, y=(100 * np.cumsum(missed) / total)[::k], name=name,
                                  line=dict(width=1.3, color=colors.get(name))))
    miss.update_layout(title="Requests missed so far (% of all requests in the span)", yaxis_title="% missed",
                       height=420)
    figs.append(("chart-misses", "Misses over time", miss))

    fr = go.Figure()
    oh = r.oracle_hours or 1.0
    if sweep and r.points:
        pts = [p for p in r.points if p.cost_ratio is not None]
        for pareto in (False, True):
            sel = [p for p in pts if p.pareto == pareto]
            fr.add_trace(go.Scatter(
                x=[p.cost_ratio for p in sel], y=[100 * p.miss for p in sel], mode="markers",
                name="Pareto-optimal" if pareto else "dominated",
                marker=dict(size=11 if pareto else 7, symbol="circle" if pareto else "circle-open"),
                text=[f"{p.variant.label()}<br>missed {100 * p.miss:.3f} %<br>{p.cost_ratio:.3f}x oracle<br>"
                      f"{p.outcome.violation_minutes} violation min" for p in sel], hoverinfo="text"))
    for name, p in r.policies.items():
        o = p.outcome
        fr.add_trace(go.Scatter(x=[o.replica_hours / oh], y=[100 * o.underprovisioned_fraction], mode="markers+text",
                                name=name, text=[name], textposition="top center",
                                marker=dict(size=13, symbol="diamond", color=colors.get(name)),
                                hovertext=[f"{name}<br>missed {100 * o.underprovisioned_fraction:.3f} %<br>"
                                           f"{o.replica_hours:.1f} replica-h = {o.replica_hours / oh:.3f}x oracle<br>"
                                           f"{o.scale_ups} scale-ups, peak {o.peak_replicas}"], hoverinfo="text"))
    if selection is not None and selection.point is not None and selection.point.cost_ratio is not None:
        p = selection.point
        fr.add_trace(go.Scatter(x=[p.cost_ratio], y=[100 * p.miss], mode="markers", name="chosen",
                                marker=dict(size=20, symbol="star", color="gold", line=dict(width=1, color="black")),
                                hovertext=[f"chosen: {p.variant.label()}"], hoverinfo="text"))
    fr.update_layout(title="Miss vs cost: lower-left is better (hover for details)", height=520,
                     xaxis=dict(title="replica-hours / oracle's", type="log"), yaxis=dict(title="% of requests missed"))
    figs.append(("chart-frontier", "Miss vs cost", fr))

    mr = r.models.get(r.settings.model)
    if mr is not None and len(mr.target_t):
        kf = max(1, math.ceil(len(mr.target_t) / MAX_POINTS))
        tf = _iso(mr.target_t[::kf])
        fc = go.Figure()
        fc.add_trace(go.Scatter(x=tf, y=pool(mr.hi_at_l, kf, "max"), name=f"q{r.settings.quantile:g}",
                                line=dict(width=0), showlegend=False, hoverinfo="skip"))
        fc.add_trace(go.Scatter(x=tf, y=pool(mr.lo_at_l, kf, "min"), name="quantile band", fill="tonexty",
                                line=dict(width=0), fillcolor="rgba(31,119,180,0.25)"))
        fc.add_trace(go.Scatter(x=tf, y=pool(mr.mean_at_l, kf, "max"), name=f"{mr.model} forecast L ahead",
                                line=dict(color="#1f77b4", width=1)))
        s = r.trace.series
        a, b = int(np.searchsorted(s.t, r.sim_start)), int(np.searchsorted(s.t, r.sim_end))
        ka = max(1, math.ceil((b - a) / MAX_POINTS))
        fc.add_trace(go.Scatter(x=_iso(s.t[a:b][::ka]), y=pool(s.y[a:b], ka, "max"), name="actual",
                                line=dict(color="black", width=1)))
        fc.update_layout(title=f"{mr.model}: forecast at horizon L vs actual", yaxis_title="req/s", height=460,
                         xaxis=dict(rangeslider=dict(visible=True)))
        figs.append(("chart-forecast", "Forecast vs actual", fc))
    return figs


def charts_html(r: Result, selection=None, sweep: bool = False) -> str:
    """The charts as HTML divs, plotly.js inlined once (the page works offline, from a file)."""
    import plotly.io as pio

    parts = []
    for i, (div_id, title, fig) in enumerate(_figures(r, selection, sweep)):
        parts.append(f"<h2>{html.escape(title)}</h2>")
        parts.append(pio.to_html(fig, include_plotlyjs=(i == 0), full_html=False, div_id=div_id,
                                 config={"displaylogo": False, "responsive": True}))
    return "\n".join(parts)


def yaml_html(block: str | None) -> str:
    if not block:
        return ""
    return ("<h2>The ScaledObject to apply</h2><p>A whole KEDA ScaledObject: replace the names marked, "
            "<code>kubectl apply -f</code> it (check it first with <code>forescale check -</code>); it runs what was "
            "replayed (<code>backtest --scaledobject</code> replays it):</p>"
            f'<pre id="metadata-yaml">{html.escape(block)}</pre>')


def write_timeseries(r: Result, path: str | Path) -> None:
    """Per tick: time, demand, observed, then per policy planned (value KEDA held), ready, starting, missed."""
    sc = r.scenario
    names = list(r.policies)
    cols = ["timestamp", "demand_qps", "observed_qps"]
    for n in names:
        cols += [f"{n}_planned_qps", f"{n}_ready", f"{n}_starting", f"{n}_missed_qps"]
    series = []
    for n in names:
        tl = r.policies[n].timeline
        planned = tl.value if tl.value is not None else np.full(sc.n, np.nan)
        series += [planned, tl.ready, tl.replicas - tl.ready,
                   np.maximum(sc.demand - tl.ready * sc.qps_per_replica, 0.0)]
    iso = _iso(sc.times)

    def fmt(x: float) -> str:
        return "" if not np.isfinite(x) else f"{x:.6g}"

    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for i in range(sc.n):
            w.writerow([iso[i] + "Z", fmt(sc.demand[i]), fmt(sc.observed[i]), *(fmt(s[i]) for s in series)])
