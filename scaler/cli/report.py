"""``forescale backtest|tune --report DIR``: an interactive index.html (``report_html``: plotly, offline,
self-contained) with the tables, and PNG plots (matplotlib, Agg: ``report_plots``) for terminals and documents:

* ``capacity.png``      demand vs ready capacity per policy over the simulated span
* ``capacity_zoom.png`` the same around the worst peak (most requests missed)
* ``forecast.png``      the model's forecast L ahead vs the actual rate, with its quantile band
* ``frontier.png``      each policy on the miss-vs-cost plane
* ``frontier_sweep.png`` with ``--sweep``/``tune``: every swept configuration, Pareto points joined
* ``checks.png``        with ``--scenario``: each scenario check per policy against its limit
"""

from __future__ import annotations

import html
from datetime import datetime, timezone
from pathlib import Path

from ..replay.engine import Result
from . import report_plots
from .render import format_table, frontier_json, to_json
from .render_world import format_world


def _sweep_html(r: Result, selection) -> str:
    rows = []
    for d in sorted(frontier_json(r), key=lambda d: (d["replica_hours"], d["underprovisioned_fraction"])):
        if not (d["pareto"] or d["reference"]):
            continue
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in (
            html.escape(d["label"]), f"{100 * d['underprovisioned_fraction']:.3f}", d["violation_minutes"],
            f"{d['replica_hours']:.1f}", "-" if d["cost_ratio"] is None else f"{d['cost_ratio']:.3f}")) + "</tr>")
    chosen = ""
    if selection is not None and selection.point is not None:
        chosen = (f"<p><b>{'Chosen' if selection.met else 'Target NOT met; closest'}:</b> "
                  f"{html.escape(selection.point.label)} -- {html.escape(selection.message)}.</p>")
    return f"""<h2>Frontier ({len(r.points)} configurations)</h2>
{chosen}<table><tr><th>Pareto-optimal configuration</th><th>missed %</th><th>violation min</th><th>replica-h</th>
<th>x oracle</th></tr>
{''.join(rows)}</table>
"""


def _starts_html(sample) -> str:
    if sample is None:
        return ""
    s = sample.summary()
    cells = "".join(f"<td>{c}</td>" for c in (s["starts"], s["new_node_starts"], f"{s['p50_seconds']:.0f}",
                                              f"{s['p90_seconds']:.0f}", f"{s['p99_seconds']:.0f}",
                                              f"{s['max_seconds']:.0f}", f"{s['t_cold_seconds']:.0f}"))
    return ("<h2>Pod start-ups (each simulated pod drew one)</h2>"
            "<table><tr><th>starts</th><th>on a new node</th><th>p50 s</th><th>p90 s</th><th>p99 s</th><th>max s</th>"
            f"<th>T_cold the scaler picks (p{100 * s['t_cold_quantile']:g}) s</th></tr><tr>{cells}</tr></table>"
            '<img src="cold_starts.png" alt="distribution of past start-ups and the T_cold picked">\n')


def write_report(r: Result, out_dir: str | Path, *, frontier: bool = False, selection=None,
                 verb: str = "backtest", metadata_yaml: str | None = None, cold_starts=None) -> Path:
    """Write the PNGs and index.html into ``out_dir`` (created); returns index.html's path.
    ``verb`` titles the page; ``metadata_yaml`` (tune) is shown ready to paste; ``cold_starts`` (a
    ``coldstart.StartSample``, backtest ``--cold-starts``) adds the start-up distribution."""
    from .report_html import accuracy_html, charts_html, yaml_html

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    window = report_plots.worst_window(r)
    report_plots.capacity_plot(r, out / "capacity.png", None)
    report_plots.capacity_plot(r, out / "capacity_zoom.png", window)
    report_plots.forecast_plot(r, out / "forecast.png", window)
    report_plots.frontier_plot(r, out / "frontier.png")
    sweep_html = ""
    if frontier:  # `backtest --sweep`, `tune`
        report_plots.sweep_plot(r, out / "frontier_sweep.png", selection)
        sweep_html = _sweep_html(r, selection)
    if cold_starts is not None:
        report_plots.starts_plot(cold_starts, out / "cold_starts.png")
    world_html = _starts_html(cold_starts)
    if r.settings.world.active:
        if r.checks:
            report_plots.checks_plot(r, out / "checks.png")
        world_html += ("<h2>Cluster, latency and scenario checks</h2>"
                      + ('<img src="checks.png" alt="scenario checks per policy">' if r.checks else "")
                      + f"<pre>{html.escape(format_world(r))}</pre>\n")
    doc = to_json(r)
    rows = []
    for name, p in doc["policies"].items():
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in (
            html.escape(name), f"{100 * p['underprovisioned_fraction']:.3f}", p["violation_minutes"],
            f"{p['replica_hours']:.1f}", "-" if p["cost_ratio"] is None else f"{p['cost_ratio']:.2f}",
            p["scale_ups"], p["peak_replicas"], f"{100 * (p['cold_start_request_fraction'] or 0):.1f}",
            html.escape(p.get("note", "")))) + "</tr>")
    st = doc["settings"]
    names = ["capacity.png", "capacity_zoom.png", "forecast.png", "frontier.png"] + (["frontier_sweep.png"] if frontier else [])
    pngs = ", ".join(f'<a href="{n}">{n}</a>' for n in names)
    made = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>forescale {verb}: {html.escape(doc['trace']['name'])}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }}
table {{ border-collapse: collapse; margin: 0.5em 0 1.5em; }}
td, th {{ border-bottom: 1px solid #ddd; padding: 4px 10px; text-align: right; font-variant-numeric: tabular-nums; }}
td:first-child, th:first-child, td:last-child {{ text-align: left; }}
tr.split td {{ color: #555; font-size: 0.92em; }}
#calendar td, #calendar th {{ text-align: left; }}
.js-plotly-plot {{ margin: 0.5em 0 1.5em; }}
pre {{ background: #f7f7f7; padding: 1em; overflow-x: auto; font-size: 12px; }}
</style></head><body>
<h1>forescale {verb}</h1>
{yaml_html(metadata_yaml)}
<p><b>{html.escape(doc['trace']['name'])}</b>: simulated {st['simulated_start']} .. {st['simulated_end']}
({st['simulated_days']:.2f} d); {st['qps_per_replica']:g} req/s per replica ({html.escape(st['qps_per_replica_source'])});
T_cold {st['cold_start_seconds']:g} s, lead {st['lead_seconds']:g} s; model {html.escape(st['model'])} q{st['quantile']:g},
refit every {st['refit_seconds'] / 60:g} min on {st['history_seconds'] / 86400:g} d; HPA tolerance {st['hpa_tolerance']:g}.</p>
<h2>Scaling outcome</h2>
<table><tr><th>policy</th><th>missed %</th><th>violation min</th><th>replica-h</th><th>x oracle</th><th>scale-ups</th>
<th>peak</th><th>in cold start %</th><th>what it does</th></tr>
{''.join(rows)}</table>
{world_html}{sweep_html}{charts_html(r, selection, frontier)}
{accuracy_html(doc)}<p>Static images of the same (for terminals and documents): {pngs}.</p>
<h2>Terminal output</h2>
<pre>{html.escape(format_table(r))}</pre>
<p><small>Generated {made} by forescale {verb}. {html.escape(r.trace.attribution)}</small></p>
</body></html>
"""
    index = out / "index.html"
    index.write_text(page, encoding="utf-8")
    return index
