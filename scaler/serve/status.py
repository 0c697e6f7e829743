"""The status page at ``/``: what the scaler is tracking, without PromQL.

One self-contained HTML page (inline CSS and script, no external asset; a
Content-Security-Policy that allows only them and requests to this origin)
that reads ``/status.json`` every 5 s and updates its table in place. The
data is the scaler's own metrics registry, read back: the page shows exactly
what ``/metrics`` exports.
"""

from __future__ import annotations

import base64
import hashlib
import json

from prometheus_client import CollectorRegistry

from .statusllm import HTML as LLM_HTML, SCRIPT as LLM_SCRIPT, STYLE as LLM_STYLE

REFRESH_SECONDS = 5

# gauges copied as they are: metric -> field
FIELDS = {
    "forescale_observed_qps": "observed",
    "forescale_planned_qps": "planned",
    "forescale_target_qps_per_replica": "qps_per_replica",
    "forescale_last_fit_timestamp_seconds": "last_fit",
}


def status_json(registry: CollectorRegistry, now: float, details: dict | None = None,
                budgets: list | None = None) -> bytes:
    """``{"now", "scaledobjects": [{namespace, name, trigger, reason, observed, forecast_peak, planned, lead_seconds,
    t_cold, t_cold_source (cluster | probe | config), t_cold_cluster, model, last_fit, fit_failures, prometheus_errors,
    decisions, event (a user event in force), and from ``details`` (``scaler.serve.view``) calendar (holidays and
    events: periods, active, coming), budget (a fleet GPU budget's member: its name, GPUs asked and granted), ...}],
    "budgets": [{name, gpus, rule, members: {namespace/name/trigger: {asked, granted, gpus, capped, stamp,
    origin}}}]}`` from the registry's samples (``budgets``: ``scaler.serve.ledger.Ledger.snapshot``)."""
    rows: dict[tuple[str, str, str], dict] = {}
    build = {}

    def row(labels: dict) -> dict:
        # one row per trigger (its series carry ``trigger``); the tuning series, per ScaledObject, carry none
        key = (labels.get("namespace", ""), labels.get("scaledobject", ""), labels.get("trigger", ""))
        return rows.setdefault(key, {"namespace": key[0], "name": key[1], "trigger": key[2], "reason": None,
                                     "observed": None,
                                     "forecast_peak": None, "forecast_quantile": None, "planned": None,
                                     "qps_per_replica": None, "lead_seconds": None, "model": None,
                                     "last_fit": None, "fit_failures": 0.0, "prometheus_errors": 0.0,
                                     "decisions": 0.0, "t_cold": None, "t_cold_source": None, "t_cold_cluster": None})

    for family in registry.collect():
        for s in family.samples:
            if s.name == "forescale_build_info":
                build = dict(s.labels)
            if "scaledobject" not in s.labels:
                continue
            if s.name in FIELDS:
                row(s.labels)[FIELDS[s.name]] = s.value
            elif s.name == "forescale_decision_reason" and s.value == 1:
                row(s.labels)["reason"] = s.labels["reason"]
            elif s.name == "forescale_event_active" and s.value == 1:
                row(s.labels)["event"] = s.labels["event"]  # a user event in force (eventsFile)
            elif s.name == "forescale_forecast_qps" and s.labels.get("quantile") != "mean":
                r = row(s.labels)
                r["forecast_peak"], r["forecast_quantile"] = s.value, s.labels.get("quantile")
            elif s.name == "forescale_lead_seconds" and s.labels.get("part") == "total":
                row(s.labels)["lead_seconds"] = s.value
            elif s.name == "forescale_cold_start_seconds" and s.labels.get("phase") == "total" \
                    and s.labels.get("source") in ("in_force", "cluster"):  # scaler.serve.coldstart
                row(s.labels)["t_cold" if s.labels["source"] == "in_force" else "t_cold_cluster"] = s.value
            elif s.name == "forescale_cold_start_in_force" and s.value == 1:
                row(s.labels)["t_cold_source"] = s.labels.get("source")
            elif s.name == "forescale_model_info" and s.value == 1:
                row(s.labels)["model"] = s.labels.get("model")
            elif s.name == "forescale_fit_failures_total":
                row(s.labels)["fit_failures"] += s.value
            elif s.name == "forescale_prometheus_errors_total":
                row(s.labels)["prometheus_errors"] += s.value
            elif s.name == "forescale_decisions_total":
                row(s.labels)["decisions"] += s.value
            elif s.name == "forescale_budget_gpus":  # a fleet GPU budget's member (scaler.serve.ledger)
                row(s.labels).setdefault("budget", {"name": s.labels.get("budget")})[s.labels.get("kind")] = s.value
    for key, extra in (details or {}).items():  # scaler.serve.view: last error, tuned choice, scores, the band
        if key in rows:
            rows[key].update(extra)
    doc = {"now": now, "refresh_seconds": REFRESH_SECONDS, "build": build,
           "scaledobjects": [rows[k] for k in sorted(rows)], "budgets": budgets or []}
    return json.dumps(doc, allow_nan=False, default=str).encode()


STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; margin: 0 0 .2em; }
#meta { color: #666; font-size: .9em; margin-bottom: 1em; }
table { border-collapse: collapse; }
th, td { border-bottom: 1px solid #ddd; padding: 4px 10px; text-align: right; font-variant-numeric: tabular-nums; }
th:nth-child(-n+4), td:nth-child(-n+4) { text-align: left; }
td.fallback { color: #b00020; font-weight: bold; }
td.err { color: #b00020; }
#empty { color: #666; }
td[data-col=name] { cursor: pointer; text-decoration: underline dotted; }
#detail { margin-top: 1.5em; border-top: 2px solid #ccc; padding-top: .5em; }
#detail dl { display: grid; grid-template-columns: max-content auto; gap: 2px 12px; margin: .5em 0; }
#detail dt { color: #666; }
#chart { border: 1px solid #ddd; background: #fcfcfc; }
#chart .obs { stroke: #222; fill: none; stroke-width: 1.5; }
#chart .plan { stroke: #1f77b4; fill: none; stroke-width: 1.5; }
#chart .band { fill: #ff7f0e; fill-opacity: .18; stroke: none; }
#chart .mid { stroke: #ff7f0e; fill: none; stroke-dasharray: 4 3; }
#chart .prov { stroke: #d62728; fill: none; stroke-width: 1.5; }
#chart .lead { stroke: #2ca02c; stroke-dasharray: 2 2; }
#chart .hol { fill: #f2c94c; fill-opacity: .25; }
#chart .evt { fill: #9467bd; fill-opacity: .18; }
#chart text { font-size: 11px; fill: #555; }
"""

SCRIPT = """
"use strict";
const COLS = ["namespace", "name", "reason", "event", "observed", "forecast_peak", "planned", "lead_seconds", "t_cold",
              "model", "capacity", "last_fit", "errors"];
function num(v, d) { return v === null || v === undefined ? "-" : Number(v).toFixed(d); }
function age(now, t) {
  if (t === null || t === undefined) return "never";
  const s = Math.max(0, now - t);
  if (s < 120) return Math.round(s) + " s ago";
  if (s < 7200) return Math.round(s / 60) + " min ago";
  return (s / 3600).toFixed(1) + " h ago";
}
function mins(s) { return s < 90 ? Math.round(s) + " s" : Math.round(s / 60) + " min"; }
function eventText(so) {  // the holidays and events in force now, else the one starting within the lead
  const c = so.calendar;
  if (!c) return so.event || "-";
  const on = c.active.slice();
  if (so.event && !on.includes(so.event) && !(c.coming && c.coming.name === so.event)) on.push(so.event);
  if (on.length) return on.join(", ");
  return c.coming ? c.coming.name + " in " + mins(c.coming.in_seconds) : "-";
}
function cells(so, now, several) {
  return {
    namespace: so.namespace, name: several && so.trigger ? so.name + " [" + so.trigger + "]" : so.name,
    reason: so.reason || "-", event: eventText(so),
    observed: num(so.observed, 2), planned: num(so.planned, 2),
    forecast_peak: so.forecast_peak === null ? "-" : num(so.forecast_peak, 2) + " (q" + so.forecast_quantile + ")",
    lead_seconds: so.lead_seconds === null ? "-" : num(so.lead_seconds, 0) + " s",
    t_cold: so.t_cold === null || so.t_cold === undefined ? "-" : num(so.t_cold, 0) + " s (" + so.t_cold_source + ")",
    model: so.model || "-", capacity: llmCell(so), last_fit: age(now, so.last_fit),
    errors: num(so.fit_failures + so.prometheus_errors, 0),
  };
}
let selected = null;
let last = null;  // the key of the ScaledObject shown in the detail view
const SVG = "http://www.w3.org/2000/svg";
function pct(v) { return v === null || v === undefined ? "-" : (100 * v).toFixed(1) + " %"; }
function scoreText(s) {
  if (!s || !s.scored) return "no minute scored yet";
  return "coverage " + pct(s.coverage) + ", pinball " + num(s.pinball, 3) + ", under-provisioned " +
    s.under_minutes + " min, demand above planned " + pct(s.demand_above_planned) + " (" + s.scored + " min)";
}
function chart(so) {
  const svg = document.getElementById("chart");
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const W = 760, H = 260, P = 40;
  const pts = [];  // [t, v] of every drawn value, for the scales
  const recent = (so.recent || []).filter(r => r[0] !== null);
  for (const r of recent) { pts.push([r[0], r[1]]); pts.push([r[0], r[2]]); }
  const b = so.band;
  if (b) b.t.forEach((t, i) => { for (const k of ["low", "mid", "provisioned"]) if (b[k] && b[k][i] !== null) pts.push([t, b[k][i]]); });
  svg.dataset.points = String(pts.length);
  if (!pts.length) return;
  const t0 = Math.min(...pts.map(p => p[0])), t1 = Math.max(...pts.map(p => p[0])) || t0 + 1;
  const v1 = Math.max(1e-9, ...pts.map(p => p[1]));
  const x = t => P + (W - 2 * P) * (t - t0) / Math.max(1, t1 - t0), y = v => H - P + (2 * P - H) * v / v1;
  for (const p of (so.calendar ? so.calendar.periods : [])) {  // holidays and events, behind the lines
    const a = Math.max(p.start, t0), z = Math.min(p.end, t1);
    if (!(z > a)) continue;
    const r = document.createElementNS(SVG, "rect"), tip = document.createElementNS(SVG, "title");
    r.setAttribute("class", p.kind === "holiday" ? "hol" : "evt");
    r.setAttribute("x", x(a).toFixed(1)); r.setAttribute("width", Math.max(1, x(z) - x(a)).toFixed(1));
    r.setAttribute("y", P / 2); r.setAttribute("height", H - P - P / 2);
    tip.textContent = p.kind + ": " + p.name;
    r.appendChild(tip);
    svg.appendChild(r);
  }
  function line(cls, xs) {
    const e = document.createElementNS(SVG, cls === "band" ? "polygon" : "polyline");
    e.setAttribute("class", cls);
    e.setAttribute("points", xs.map(p => x(p[0]).toFixed(1) + "," + y(p[1]).toFixed(1)).join(" "));
    svg.appendChild(e);
  }
  if (b && b.low && b.provisioned) {
    const up = b.t.map((t, i) => [t, b.provisioned[i]]).filter(p => p[1] !== null);
    const lo = b.t.map((t, i) => [t, b.low[i]]).filter(p => p[1] !== null).reverse();
    line("band", up.concat(lo));
  }
  if (b && b.mid) line("mid", b.t.map((t, i) => [t, b.mid[i]]).filter(p => p[1] !== null));
  if (b && b.provisioned) line("prov", b.t.map((t, i) => [t, b.provisioned[i]]).filter(p => p[1] !== null));
  if (recent.length) { line("obs", recent.map(r => [r[0], r[1]])); line("plan", recent.map(r => [r[0], r[2]])); }
  if (b && b.lead_seconds !== null && recent.length) {
    const tl = recent[recent.length - 1][0] + b.lead_seconds, m = document.createElementNS(SVG, "line");
    m.setAttribute("class", "lead");
    m.setAttribute("x1", x(tl)); m.setAttribute("x2", x(tl)); m.setAttribute("y1", P / 2); m.setAttribute("y2", H - P);
    svg.appendChild(m);
  }
  const lab = document.createElementNS(SVG, "text");
  lab.setAttribute("x", 4); lab.setAttribute("y", 14);
  lab.textContent = "req/s, max " + v1.toFixed(2) + "  - observed (black), planned (blue), forecast band and " +
    "provisioned quantile (orange, red), now + lead (green); shaded: holidays (yellow), events (purple)";
  svg.appendChild(lab);
}
function loopText(l) {  // the closed loop (scaler.feedback): signals against targets, its factor and last step
  if (!l) return "-";
  const g = l.signals, t = l.targets, parts = [];
  if ("waiting" in g) parts.push("waiting " + (g.waiting ?? "unknown") + (g.ready != null ? " over " + g.ready +
    " ready" : "") + (t.queue != null ? " (target " + t.queue + " per replica)" : ""));
  if ("ttft" in g) parts.push("TTFT " + (g.ttft == null ? "unknown" : num(g.ttft, 3) + " s") +
    (t.ttft != null ? " (target " + t.ttft + " s)" : ""));
  if ("itl" in g) parts.push("ITL " + (g.itl == null ? "unknown" : num(g.itl, 3) + " s") +
    (t.itl != null ? " (target " + t.itl + " s)" : ""));
  return parts.join("; ") + "; factor x" + num(l.factor, 3) + ": " + l.why;
}
function feText(f) {  // the lead's forecast-error part (scaler.leaderror)
  if (!f) return "-";
  return (f.in_force_seconds == null ? "bufferSeconds set" : num(f.in_force_seconds, 0) + " s in force" +
    (f.auto ? " (auto)" : "")) + "; measured " + (f.measured_seconds == null ? "- (nothing scored yet)" :
    num(f.measured_seconds, 0) + " s over " + f.scored_minutes + " scored min") + ", derived " +
    num(f.derived_seconds, 0) + " s";
}
function detail(doc) {
  const box = document.getElementById("detail");
  const so = doc.scaledobjects.find(s => "so:" + s.namespace + "/" + s.name + "/" + s.trigger === selected);
  box.hidden = !so;
  if (!so) return;
  const t = so.tuned;
  const fields = {
    d_title: so.namespace + "/" + so.name + (so.trigger ? " [" + so.trigger + "]" : ""),
    d_observed: num(so.observed, 2) + " req/s", d_planned: num(so.planned, 2) + " req/s",
    d_reason: so.reason || "-", d_event: eventText(so), d_mode: (so.mode || "-") + ", q" + (so.quantile ?? "-"),
    d_tuned: t ? t.chosen + " (chosen " + age(doc.now, t.at) + ", expected miss " + pct(t.expected_miss) + ")" : "-",
    d_scores1: scoreText(so.scores && so.scores["1h"]), d_scores24: scoreText(so.scores && so.scores["24h"]),
    d_drift: so.drift ? (so.drift.active ? "fallback_forecast_drift served" : "no drift") + ", " +
      so.drift.alarms + " alarm(s)" : "-",
    d_budget: so.budget ? so.budget.name + ": granted " + num(so.budget.granted, 1) + " of " +
      num(so.budget.asked, 1) + " GPUs asked" : "-",
    d_error: so.last_error || "none",
    d_loop: loopText(so.loop), d_fe: feText(so.forecast_error),
  };
  for (const k in fields) document.getElementById(k).textContent = fields[k];
  chart(so);
  llmDetail(so);
}
function render(doc) {
  const body = document.getElementById("rows");
  const seen = new Set();
  const triggers = {};  // a ScaledObject with several forescale triggers: one row each, named by its trigger
  for (const so of doc.scaledobjects) {
    const k = so.namespace + "/" + so.name;
    triggers[k] = (triggers[k] || 0) + 1;
  }
  for (const so of doc.scaledobjects) {
    const several = triggers[so.namespace + "/" + so.name] > 1;
    const id = "so:" + so.namespace + "/" + so.name + (several ? "/" + so.trigger : "");
    seen.add(id);
    let tr = document.getElementById(id);
    if (!tr) {
      tr = document.createElement("tr");
      tr.id = id;
      for (const c of COLS) { const td = document.createElement("td"); td.dataset.col = c; tr.appendChild(td); }
      const key = "so:" + so.namespace + "/" + so.name + "/" + so.trigger;
      tr.querySelector("td[data-col=name]").addEventListener("click", () => { selected = key; detail(last); });
      body.appendChild(tr);
    }
    const v = cells(so, doc.now, several);
    for (const td of tr.children) {
      td.textContent = v[td.dataset.col];
      if (td.dataset.col === "reason") td.className = (so.reason || "").startsWith("fallback") ? "fallback" : "";
      if (td.dataset.col === "errors") td.className = v.errors !== "0" ? "err" : "";
    }
  }
  for (const tr of Array.from(body.children)) { if (!seen.has(tr.id)) tr.remove(); }
  document.getElementById("empty").hidden = doc.scaledobjects.length > 0;
  last = doc;
  detail(doc);
  const b = doc.build || {};
  document.getElementById("meta").textContent = "forescale " + (b.version || "") + " - " +
    doc.scaledobjects.length + " ScaledObject(s) tracked - updated " + new Date(doc.now * 1000).toISOString() +
    " - refreshed every " + doc.refresh_seconds + " s";
}
async function refresh() {
  try {
    const r = await fetch("status.json", {cache: "no-store"});
    if (r.ok) render(await r.json());
    else document.getElementById("meta").textContent = "status.json: HTTP " + r.status;
  } catch (e) {
    document.getElementById("meta").textContent = "scaler unreachable: " + e;
  }
}
refresh();
setInterval(refresh, REFRESH_MS);
""".replace("REFRESH_MS", str(REFRESH_SECONDS * 1000)) + LLM_SCRIPT


def _sha(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


STYLE += LLM_STYLE
CSP = (f"default-src 'none'; script-src {_sha(SCRIPT)}; style-src {_sha(STYLE)}; connect-src 'self'; "
       "img-src 'self' data:; base-uri 'none'; form-action 'none'")

PAGE = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>forescale status</title>
<meta name="viewport" content="width=device-width, initial-scale=1"><link rel="icon" href="data:,">
<style>{STYLE}</style></head><body>
<h1>forescale: tracked ScaledObjects</h1>
<div id="meta">loading...</div>
<table><thead><tr><th>namespace</th><th>ScaledObject</th><th>reason</th><th>event / holiday</th><th>observed req/s</th>
<th>forecast peak req/s</th><th>planned req/s</th><th>lead</th><th>T_cold</th><th>model</th><th>capacity</th><th>last fit</th><th>errors</th>
</tr></thead><tbody id="rows"></tbody></table>
<p id="empty">No ScaledObject yet: KEDA has not called this scaler.</p>
<section id="detail" hidden><h2 id="d_title"></h2>
<dl><dt>observed</dt><dd id="d_observed"></dd><dt>planned</dt><dd id="d_planned"></dd><dt>reason</dt><dd id="d_reason"></dd><dt>event / holiday</dt><dd id="d_event"></dd>
<dt>mode</dt><dd id="d_mode"></dd><dt>tuned choice</dt><dd id="d_tuned"></dd><dt>scores, 1 h</dt><dd id="d_scores1"></dd>
<dt>scores, 24 h</dt><dd id="d_scores24"></dd><dt>drift</dt><dd id="d_drift"></dd><dt>GPU budget</dt><dd id="d_budget"></dd><dt>closed loop</dt><dd id="d_loop"></dd>
<dt>forecast error (lead)</dt><dd id="d_fe"></dd><dt>last error</dt><dd id="d_error"></dd></dl>
<svg id="chart" width="760" height="260" viewBox="0 0 760 260" role="img" aria-label="forecast chart"></svg>
{LLM_HTML}
</section>
<p><small>Click a ScaledObject's name for its detail view. The same figures as <a href="metrics">/metrics</a> (forescale_*); health: <a href="healthz">/healthz</a>.</small></p>
<script>{SCRIPT}</script>
</body></html>
""".encode()
