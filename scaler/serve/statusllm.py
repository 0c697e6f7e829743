"""The status page's LLM part (``scaler.serve.status`` includes it): per LLM trigger a table cell with its
capacity (learned ratio, the capacity file in force) and, in the detail view, its token mix over time, the
capacity used, the queue and TTFT/ITL against their targets, from ``/status.json``'s ``llm`` (``llmstate.view``).

Plain DOM and SVG built with textContent and attributes only (no innerHTML): names from files stay text.
"""

from __future__ import annotations

STYLE = """
#llm dl { display: grid; grid-template-columns: max-content auto; gap: 2px 12px; margin: .5em 0; }
#llm dt { color: #666; }
#llmchart { border: 1px solid #ddd; background: #fcfcfc; }
#llmchart .in { stroke: #1f77b4; fill: none; stroke-width: 1.5; }
#llmchart .out { stroke: #ff7f0e; fill: none; stroke-width: 1.5; }
#llmchart .used { stroke: #2ca02c; fill: none; stroke-width: 1.5; }
#llmchart .queue { stroke: #9467bd; fill: none; stroke-width: 1.5; }
#llmchart .ttft { stroke: #d62728; fill: none; stroke-width: 1.5; }
#llmchart .itl { stroke: #8c564b; fill: none; stroke-width: 1.5; }
#llmchart .target { stroke: #555; stroke-dasharray: 4 3; }
#llmchart text { font-size: 11px; fill: #555; }
"""

SCRIPT = """
function sig(v) { return v === null || v === undefined ? "-" : String(+Number(v).toPrecision(4)); }
function llmCol(l, name) { const i = l.columns.indexOf(name); return l.rows.map(r => [r[0], r[i]]); }
function llmCell(so) {
  const l = so.llm;
  if (!l) return "-";
  const parts = [];
  if (l.learned && l.learned.ratio !== null && l.learned.ratio !== undefined) {
    let t = Number(l.learned.ratio).toFixed(2) + "x learned";
    if (l.capacity_mode === "learned") t += " (in force " + (l.learned.in_force / l.qps_per_replica).toFixed(2) + "x)";
    parts.push(t);
  } else if (l.learned) {
    parts.push("learning (" + l.learned.samples + " samples)");
  }
  if (l.model) parts.push(l.model.error ? "model: see error" : l.model.in_force ? l.model.in_force.model : "model: -");
  if (l.clamped) parts.push("mix clamped");
  return parts.length ? parts.join(", ") : "-";
}
function llmPanel(svg, top, height, title, lines, targets) {
  const W = 760, P = 40;
  const pts = [];
  for (const ln of lines) for (const p of ln.pts) if (p[1] !== null) pts.push(p);
  for (const t of targets) if (t.v !== null && t.v !== undefined) pts.push([null, t.v]);
  const lab = document.createElementNS(SVG, "text");
  lab.setAttribute("x", 4); lab.setAttribute("y", top + 12);
  svg.appendChild(lab);
  const ts = pts.filter(p => p[0] !== null).map(p => p[0]);
  if (!ts.length) { lab.textContent = title + ": no data yet"; return 0; }
  const t0 = Math.min(...ts), t1 = Math.max(...ts), v1 = Math.max(1e-9, ...pts.map(p => p[1]));
  lab.textContent = title + ", max " + v1.toPrecision(3);
  const x = t => P + (W - 2 * P) * (t - t0) / Math.max(1, t1 - t0);
  const y = v => top + height - 4 - (height - 20) * v / v1;
  let n = 0;
  for (const ln of lines) {
    const ok = ln.pts.filter(p => p[1] !== null);
    if (!ok.length) continue;
    const e = document.createElementNS(SVG, "polyline");
    e.setAttribute("class", ln.cls);
    e.setAttribute("points", ok.map(p => x(p[0]).toFixed(1) + "," + y(p[1]).toFixed(1)).join(" "));
    svg.appendChild(e);
    n += ok.length;
  }
  for (const t of targets) {
    if (t.v === null || t.v === undefined) continue;
    const m = document.createElementNS(SVG, "line");
    m.setAttribute("class", "target " + t.cls);
    m.setAttribute("x1", P); m.setAttribute("x2", W - P); m.setAttribute("y1", y(t.v)); m.setAttribute("y2", y(t.v));
    svg.appendChild(m);
  }
  return n;
}
function llmDetail(so) {
  const box = document.getElementById("llm"), l = so.llm;
  box.hidden = !l;
  if (!l) return;
  const last = l.rows.length ? l.rows[l.rows.length - 1] : null;
  const at = name => last === null ? null : last[l.columns.indexOf(name)];
  const lr = l.learned, m = l.model;
  const fields = {
    l_capacity: sig(l.qps_per_replica) + " req/s per replica configured; planned on: " + l.capacity_mode +
      (lr ? "; learned " + (lr.estimate === null ? "not yet (" + lr.samples + " samples)" :
        sig(lr.estimate) + " (" + Number(lr.ratio).toFixed(2) + "x, " + lr.samples + " samples), in force " +
        sig(lr.in_force)) + (lr.saturated ? ", saturated now" : "") : ""),
    l_model: !m ? "-" : (m.in_force ? m.in_force.model + " on " + m.in_force.hardware + ": " +
      sig(m.in_force.qps_per_replica) + " req/s, " + sig(m.in_force.tokens_per_replica) + " tokens/s at w " +
      m.in_force.input_weight + " (fit error " + pct(m.in_force.max_error) + ")" : "not in force") +
      (m.error ? " - " + m.error : "") + (l.clamped ? "; the mix is outside its lengths: clamped" : ""),
    l_mix: last === null ? "-" : num(at("input_tokens"), 1) + " prompt + " + num(at("output_tokens"), 1) +
      " generated tokens/s, " + num(at("requests"), 2) + " req/s",
    l_used: pct(at("used")) + " of the ready replicas' capacity; " + num(at("waiting"), 0) + " waiting over " +
      num(at("ready"), 0) + " ready",
    l_latency: "TTFT " + num(at("ttft"), 3) + " s (target " + (l.targets.ttft ?? "-") + "), ITL " +
      num(at("itl"), 3) + " s (target " + (l.targets.itl ?? "-") + ")",
  };
  for (const k in fields) document.getElementById(k).textContent = fields[k];
  const svg = document.getElementById("llmchart");
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const ready = llmCol(l, "ready");
  const perReplica = llmCol(l, "waiting").map((p, i) => [p[0], p[1] === null || !ready[i][1] ? null : p[1] / ready[i][1]]);
  let n = llmPanel(svg, 0, 110, "token mix, tokens/s: prompt (blue), generated (orange)",
    [{cls: "in", pts: llmCol(l, "input_tokens")}, {cls: "out", pts: llmCol(l, "output_tokens")}], []);
  n += llmPanel(svg, 115, 110, "capacity used (green, 1 = all ready capacity) and waiting per ready replica (purple)",
    [{cls: "used", pts: llmCol(l, "used")}, {cls: "queue", pts: perReplica}],
    [{cls: "queue", v: l.targets.queue}]);
  n += llmPanel(svg, 230, 110, "TTFT (red) and ITL (brown), s; dashed: their targets",
    [{cls: "ttft", pts: llmCol(l, "ttft")}, {cls: "itl", pts: llmCol(l, "itl")}],
    [{cls: "ttft", v: l.targets.ttft}, {cls: "itl", v: l.targets.itl}]);
  svg.dataset.points = String(n);
}
"""

HTML = """<section id="llm" hidden><h3>LLM server</h3>
<dl><dt>capacity</dt><dd id="l_capacity"></dd><dt>capacity model</dt><dd id="l_model"></dd>
<dt>token mix now</dt><dd id="l_mix"></dd><dt>capacity used</dt><dd id="l_used"></dd>
<dt>latency</dt><dd id="l_latency"></dd></dl>
<svg id="llmchart" width="760" height="345" viewBox="0 0 760 345" role="img" aria-label="LLM server chart"></svg>
</section>"""
