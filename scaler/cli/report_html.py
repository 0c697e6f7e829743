"""The interactive report: one self-contained ``index.html`` (plotly.js inlined, no CDN) and the per-tick CSV.

Charts (zoom with the range slider or a drag, toggle a policy by clicking its legend entry):

* ``chart-capacity``  demand vs ready capacity per policy over the simulated span
* ``chart-misses``    requests missed so far (cumulative %) per policy
* ``chart-frontier``  each policy (and with ``--sweep``/``tune`` every swept configuration) on the
                      miss-vs-cost plane, hover for the knobs
* ``chart-forecast``  the forecast L ahead vs the actual rate, with its quantile band
* ``chart-tokens``    with a trace with shape and a token budget (``--tokens-per-replica``, ``--capacity-model``):
                      the token mix over the span (prompt and generated tokens/s; the weighted tokens per request,
                      with the lengths a capacity model was measured on)
* ``chart-used``      with tokens too: the capacity used per policy (the judged load / the ready capacity, %)

With ``--holidays``/``--events`` the time charts shade the holidays (orange) and events (green) of the span
(hover a shading's label for its name), the accuracy table is split into ordinary days and holidays/events, and
a table lists the holidays and events of the span.

``tune`` adds the paste-ready trigger metadata (YAML) it selected.
"""

from __future__ import annotations

import csv
import html
import math
import sys
from pathlib import Path

import numpy as np

from ..replay.engine import Result
from .render import COLORS as colors  # the PNGs' colours: one colour per policy everywhere
from .render import pool

MAX_POINTS = 4000  # per line: keeps the page small on long spans (max/min pooling keeps the peaks)


def _iso(t: np.ndarray) -> list[str]:
    return [str(x) for x in (np.asarray(t, dtype="float64") * 1e3).astype("datetime64[ms]")]


HOLIDAY_COLOR, EVENT_COLOR = "#ff7f0e", "#2ca02c"  # as forecast.png's shading (report_plots' calendar shading)


def calendar_periods(r: Result) -> list[tuple[float, float, str, str]]:
    """(start, end, kind, name) of the holidays and events within the simulated span, clipped to it."""
    s = r.settings
    out = []
    if s.holidays:
        from forecaster.calendar import holiday_periods

        out += [(a, b, "holiday", name)
                for a, b, name in holiday_periods(s.holidays, r.sim_start, r.sim_end - 1e-6, s.holiday_window, s.timezone)]
    out += [(e.start, e.end, "event", e.name) for e in s.events]
    return sorted((max(a, r.sim_start), min(b, r.sim_end), kind, name) for a, b, kind, name in out
                  if b > r.sim_start and a < r.sim_end)


def _shade(fig, periods) -> None:
    """Holidays and events behind a time chart's lines, each labelled (plotly reads labels as HTML: escaped)."""
    for a, b, kind, name in periods:
        x0, x1 = _iso(np.array([a, b]))
        fig.add_vrect(x0=x0, x1=x1, fillcolor=HOLIDAY_COLOR if kind == "holiday" else EVENT_COLOR, opacity=0.12,
                      layer="below", line_width=0, annotation_text=html.escape(name), annotation_position="top left",
                      annotation_font_size=9, name=f"{kind}: {html.escape(name)}")


def _figures(r: Result, selection=None, sweep: bool = False) -> list[tuple[str, str, object]]:
    import plotly.graph_objects as go


    sc = r.scenario
    periods = calendar_periods(r)
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
    _shade(cap, periods)
    figs.append(("chart-capacity", "Demand vs ready capacity", cap))

    miss = go.Figure()
    total = float(np.sum(sc.demand)) or 1.0
    for name, p in r.policies.items():
        missed = np.maximum(sc.demand - p.timeline.ready * sc.qps_per_replica, 0.0)
        miss.add_trace(go.Scatter(x=tt, y=(100 * np.cumsum(missed) / total)[::k], name=name,
                                  line=dict(width=1.3, color=colors.get(name))))
    miss.update_layout(title="Requests missed so far (% of all requests in the span)", yaxis_title="% missed",
                       height=420)
    _shade(miss, periods)
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
                text=[f"{p.label}<br>missed {100 * p.miss:.3f} %<br>{p.cost_ratio:.3f}x oracle<br>"
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
                                hovertext=[f"chosen: {p.label}"], hoverinfo="text"))
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
        _shade(fc, periods)
        figs.append(("chart-forecast", "Forecast vs actual", fc))
    return figs + token_figures(r, k, periods)


def token_figures(r: Result, k: int, periods) -> list[tuple[str, str, object]]:
    """A trace with shape judged on a token budget: its token mix over the span, and each policy's capacity used."""
    import plotly.graph_objects as go

    tr, cap = r.trace, r.settings.tokens
    if cap is None or not tr.has_tokens:
        return []
    s = tr.series
    a, b = int(np.searchsorted(s.t, r.sim_start)), int(np.searchsorted(s.t, r.sim_end))
    kt = max(1, math.ceil((b - a) / MAX_POINTS))
    t = _iso(s.t[a:b][::kt])
    i, o, req = (np.asarray(x, dtype=np.float64)[a:b] for x in (tr.input_tokens, tr.output_tokens, s.y))
    mix = go.Figure()
    mix.add_trace(go.Scatter(x=t, y=pool(i, kt, "max"), name="prompt tokens/s", line=dict(width=1)))
    mix.add_trace(go.Scatter(x=t, y=pool(o, kt, "max"), name="generated tokens/s", line=dict(width=1)))
    with np.errstate(divide="ignore", invalid="ignore"):
        per = np.where(req > 0, cap.weighted(i, o) / np.where(req > 0, req, 1.0), np.nan)
    mix.add_trace(go.Scatter(x=t, y=per[::kt], name=f"weighted tokens per request (w {cap.input_weight:g})",
                             yaxis="y2", mode="lines", line=dict(width=1, dash="dot", color="black")))
    if cap.lengths is not None:
        for v, what in zip(cap.lengths, ("shortest", "longest")):
            mix.add_hline(y=v, yref="y2", line=dict(color="#d62728", width=1, dash="dash"),
                          annotation_text=f"{what} measured ({v:.4g})", annotation_font_size=9)
    mix.update_layout(title="Token mix: prompt and generated tokens/s, and the weighted tokens per request",
                      yaxis=dict(title="tokens/s"), yaxis2=dict(title="weighted tokens / request", overlaying="y",
                                                                side="right"), height=460,
                      xaxis=dict(rangeslider=dict(visible=True)))
    _shade(mix, periods)
    sc = r.scenario
    used = go.Figure()
    for name, p in r.policies.items():
        ready = p.timeline.ready * sc.qps_per_replica
        with np.errstate(divide="ignore", invalid="ignore"):
            u = np.where(ready > 0, 100 * sc.demand / np.where(ready > 0, ready, 1.0), np.nan)
        used.add_trace(go.Scatter(x=_iso(sc.times[::k]), y=pool(u, k, "max"), name=name,
                                  line=dict(width=1.2, color=colors.get(name)),
                                  visible=True if name in ("predictive", "reactive", "oracle") else "legendonly"))
    used.add_hline(y=100, line=dict(color="black", width=1, dash="dash"))
    used.update_layout(title="Capacity used: the load (requests and tokens, binding) / the ready capacity, %; above "
                             "100 % requests wait", yaxis_title="% of ready capacity", height=420)
    _shade(used, periods)
    return [("chart-tokens", "Token mix", mix), ("chart-used", "Capacity used", used)]


def charts_html(r: Result, selection=None, sweep: bool = False) -> str:
    """The charts as HTML divs, plotly.js inlined once (the page works offline, from a file)."""
    import plotly.io as pio

    parts = []
    for i, (div_id, title, fig) in enumerate(_figures(r, selection, sweep)):
        parts.append(f"<h2>{html.escape(title)}</h2>")
        parts.append(pio.to_html(fig, include_plotlyjs=(i == 0), full_html=False, div_id=div_id,
                                 config={"displaylogo": False, "responsive": True}))
    return "\n".join(parts)


def accuracy_html(doc: dict) -> str:
    """The forecast accuracy table; with --holidays/--events each model's ordinary days and holidays/events too."""
    rows = []
    for m, f in doc["forecast"].items():
        parts = [(html.escape(m), f, "")] + [(f"&nbsp;&nbsp;{part.replace('_or_', ' / ').replace('_', ' ')} days", ps,
                                             ' class="split"') for part, ps in f.get("days", {}).items()]
        for name, sc, cls in parts:
            rows.append(f"<tr{cls}>" + "".join(f"<td>{c}</td>" for c in (
                name, _h(sc.get("mase"), 3), _h(sc.get("wape"), 3), _h(sc.get("pinball"), 2),
                _h(sc.get("coverage"), 3), sc.get("n", "") if cls else f.get("fits", ""))) + "</tr>")
    split = any("days" in f for f in doc["forecast"].values())
    return ('<h2>Forecast accuracy at horizon L</h2><table id="accuracy"><tr><th>model</th><th>MASE</th><th>WAPE</th>'
            f"<th>pinball</th><th>coverage</th><th>{'fits (points scored)' if split else 'fits'}</th></tr>"
            + "".join(rows) + "</table>\n" + calendar_html(doc))


def calendar_html(doc: dict) -> str:
    """The holidays and events of the simulated span (the JSON's ``calendar``), "" without them."""
    cal = doc.get("calendar")
    if not cal:
        return ""
    rows = [("holiday", d["name"], d["start"], d["end"], "-") for d in cal["holiday_days"]]
    rows += [("event", e["name"], e["start"], e["end"], ", ".join(
        x for x in (e["multiplier"] is not None and f"x{e['multiplier']:g}" or "",
                    e["floor_qps"] is not None and f"floor {e['floor_qps']:g} req/s" or "") if x))
             for e in cal["events"]]
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    what = (f"holidays {html.escape(cal['holidays'])} (window {cal['holiday_window']} d, forecast as "
            f"{html.escape(cal['holiday_as'])})" if cal["holidays"] else "no holidays")
    return (f'<h2>Holidays and events in the span</h2><p>{what}; shaded on the charts above (holidays orange, events '
            'green).</p><table id="calendar"><tr><th>kind</th><th>name</th><th>start</th><th>end</th><th>effect</th>'
            f"</tr>{body}</table>\n")


def _h(x, d: int) -> str:
    return "-" if x is None else f"{x:.{d}f}"


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

    def rows(f) -> None:
        w = csv.writer(f)
        w.writerow(cols)
        for i in range(sc.n):
            w.writerow([iso[i] + "Z", fmt(sc.demand[i]), fmt(sc.observed[i]), *(fmt(s[i]) for s in series)])

    if str(path) == "-":  # --timeseries -: standard output (the human output went to stderr)
        rows(sys.stdout)
        sys.stdout.flush()
        return
    with open(path, "w", newline="", encoding="utf-8") as f:
        rows(f)
