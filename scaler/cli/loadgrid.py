"""``forescale loadtest --grid-input ... --grid-output ...``: the capacity over a grid of prompt and answer lengths,
fitted into a capacity model file (``scaler.capacity``) that ``backtest``, ``tune`` and ``serve`` read."""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path

import click

from ..capacity import CapacityModelError, Point, document as model_document, model_of
from ..loadtest.report import document, with_model
from .options import fail, write_json


def ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1e3:.0f}"


def verdict(step: dict) -> str:
    """A step's verdict in the tables (``loadtest`` and the grid)."""
    if step["generator_limited"]:
        return f"GENERATOR LIMITED ({step['limit_reason']})"
    return "meets SLO" if step["meets_slo"] else "misses SLO"


def save_figure(plt, fig, path: Path) -> None:
    """``--plot``'s figure written (its folder made), exit 2 naming the path when it cannot be."""
    fig.tight_layout()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
    except OSError as e:
        fail(f"--plot {path}: cannot write ({e.strerror})")
    finally:
        plt.close(fig)


def format_grid(doc: dict) -> str:
    """Per grid point its steps (rate, TTFT and ITL percentiles, verdict), then the knees against the model."""
    slo = doc["slo"]
    q = slo["percentile"]
    lines = []
    for p in doc["grid"]["points"]:
        lines.append(f"{p['input_tokens_requested']} prompt tokens, {p['output_tokens_requested']} answer tokens "
                     f"(the server counted {p['input_tokens']:.0f} and {p['output_tokens']:.0f}):")
        lines.append(f"{'rate':>10}{'achieved':>9}{'TTFT p50':>9}{'TTFT p95':>9}{'ITL p50':>8}{'ITL p95':>8}"
                     f"{'errors':>7}{'ok %':>7}  verdict (ms)")
        for s in (st for st in doc["steps"] if (st["input_tokens"], st["output_tokens"]) ==
                  (p["input_tokens_requested"], p["output_tokens_requested"])):
            lines.append(f"{s['target_rps']:>8.3g}/s{s['achieved_rps']:>9.2f}{ms(s['ttft_p50_s']):>9}"
                         f"{ms(s['ttft_p95_s']):>9}{ms(s['itl_p50_s']):>8}{ms(s['itl_p95_s']):>8}"
                         f"{s['errors']:>7}{s['within_slo'] * 100:>7.1f}  {verdict(s)}")
    parts = [f"TTFT p{q:g} <= {slo['ttft_seconds']:g} s" if slo["ttft_seconds"] is not None else "",
             f"ITL p{q:g} <= {slo['itl_seconds']:g} s" if slo["itl_seconds"] is not None else "",
             f"p{q:g} <= {slo['seconds']:g} s to the last byte" if slo["seconds"] is not None else ""]
    lines.append("SLO: " + ", ".join(x for x in parts if x))
    m = doc["grid"]["capacity_model"]
    if m is not None:
        f = m["fit"]
        lines.append(f"capacity model ({m['model']} on {m['hardware']}): min({f['requests_per_second']:.4g} req/s, "
                     f"{f['tokens_per_second']:.4g} / ({f['input_weight']:.4g} x input + output)); fit error "
                     f"{100 * f['max_error']:.1f} % (max over the {len(m['points'])} points, rms "
                     f"{100 * f['rms_error']:.1f} %)")
        for pt in m["points"]:
            lines.append(f"  {pt['input_tokens']:>8.0f} in {pt['output_tokens']:>6.0f} out: knee "
                         f"{pt['capacity_rps']:.3g} req/s, model {pt['fitted_rps']:.3g} ({100 * pt['error']:+.1f} %)")
        r = m["recommended"]
        lines.append(f"recommended (margin {m['margin']:g}): qpsPerReplica {r['qps_per_replica']:.4g}, "
                     f"tokensPerReplica {r['tokens_per_replica']:.4g} at input weight {r['input_token_weight']:.4g}")
    return "\n".join(lines)


def fitted(doc: dict, *, model: str, hardware: str, margin: float, version: str) -> dict:
    """The capacity model fitted on the grid's knees (CapacityModelError when it cannot be)."""
    pts = [Point(p["input_tokens"], p["output_tokens"], p["capacity_rps"],
                 detail={"input_tokens_requested": p["input_tokens_requested"],
                         "output_tokens_requested": p["output_tokens_requested"], "ttft_p95_s": p["ttft_p95_s"],
                         "itl_p95_s": p["itl_p95_s"]})
           for p in doc["grid"]["points"] if p["capacity_rps"] is not None]
    slo = doc["slo"]
    extra = {"url": doc["url"], "measured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
             "slo": {"ttft_seconds": slo["ttft_seconds"], "itl_seconds": slo["itl_seconds"],
                     "latency_seconds": slo["seconds"], "percentile": slo["percentile"]}}
    return model_document(model_of(pts, model=model, hardware=hardware, margin=margin, extra=extra), version=version)


def write_grid_plot(doc: dict, path: Path) -> None:
    """Each point's knee against its weighted length, and the model's curve through them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    m = doc["grid"]["capacity_model"]
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    if m is not None:
        w = m["fit"]["input_weight"]
        ell = [w * p["input_tokens"] + p["output_tokens"] for p in m["points"]]
        ax.scatter(ell, [p["capacity_rps"] for p in m["points"]], color="k", zorder=5, label="knee (measured)")
        x = np.geomspace(m["lengths"]["weighted"][0], m["lengths"]["weighted"][1], 200)
        y = np.minimum(m["fit"]["requests_per_second"], m["fit"]["tokens_per_second"] / x)
        ax.plot(x, y, color="tab:blue", label=f"model (fit error {100 * m['fit']['max_error']:.1f} %)")
        ax.plot(x, y * (1 - m["margin"]), color="tab:green", ls=":", label=f"recommended (margin {m['margin']:g})")
        ax.set_xscale("log")
    ax.set_xlabel("weighted tokens per request (input weight x prompt + answer)")
    ax.set_ylabel("requests/s per replica at the SLO")
    ax.set_title(f"capacity over the grid: {doc['url']}")
    ax.legend(loc="upper right", fontsize=8)
    save_figure(plt, fig, path)


def served_model(url: str, timeout: float) -> str | None:
    """The first model id of the server's ``GET /v1/models`` (vLLM, TGI and SGLang serve it), None if it has none."""
    import urllib.parse

    import aiohttp

    parts = urllib.parse.urlsplit(url)
    models = urllib.parse.urlunsplit(parts._replace(path="/v1/models", query="", fragment=""))

    async def get() -> str | None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as s:
            async with s.get(models) as r:
                if r.status != 200:
                    return None
                data = await r.json(content_type=None)
        items = data.get("data") if isinstance(data, dict) else None
        first = items[0] if isinstance(items, list) and items else None
        name = first.get("id") if isinstance(first, dict) else None
        return name if isinstance(name, str) and name.strip() else None

    try:
        return asyncio.run(get())
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
        return None


def overestimate(cdoc: dict) -> str | None:
    """Where the recommendation (the fit x (1 - margin)) is still above a point's knee: the scaler would plan too
    few replicas for that mix (the fit error beyond the margin). None when it is below at every point."""
    m = cdoc["margin"]
    worst = max(cdoc["points"], key=lambda pt: pt["error"])
    if (1 + worst["error"]) * (1 - m) <= 1:
        return None
    return (f"the model over-estimates the ({worst['input_tokens']:.0f}, {worst['output_tokens']:.0f}) point by "
            f"{100 * worst['error']:.1f} %, more than the margin {m:g} covers: the scaler would plan too few replicas "
            "for that mix; raise --margin, loosen the SLO against that point's prefill, or measure a grid without it")


def run_grid_command(target, settings, *, model: str | None, hardware: str | None, margin: float, version: str,
                     json_path: Path | None, plot_path: Path | None, capacity_path: Path | None, on_step,
                     progress) -> None:
    """The grid, the fit, the files; exit 2 when no model can be fitted (the JSON is written first)."""
    from ..loadtest.generator import LoadtestError
    from ..loadtest.run import run_grid
    from ..loadtest.workload import shaped

    name = model or served_model(target.url, target.timeout) or ""
    if not name:
        fail(f"{target.url}: the server names no model (GET /v1/models); accepted: --model NAME, the served model "
             "the capacity file is for")
    try:
        outcome = asyncio.run(run_grid(target, settings, shaped, on_step=on_step, progress=progress))
    except LoadtestError as e:
        fail(str(e))
    doc = document(outcome, url=target.url, workload={"source": "grid", "grid": [list(g) for g in settings.grid]},
                   stream=target.stream, timeout=target.timeout, version=version)
    try:
        cdoc = fitted(doc, model=name, hardware=hardware or "", margin=margin, version=version)
    except CapacityModelError as e:
        with_model(doc, None)
        click.echo(format_grid(doc))
        if json_path is not None:
            write_json(json_path, doc)
        missed = [f"({p['input_tokens_requested']}, {p['output_tokens_requested']})" for p in doc["grid"]["points"]
                  if p["capacity_rps"] is None]
        fail(f"no capacity model: {e}" + (f"; no tested rate met the SLO at {', '.join(missed)}: accepted: a looser "
                                           "SLO or a lower --start-rate/--rates" if missed else ""))
    with_model(doc, cdoc)
    click.echo(format_grid(doc))
    if why := overestimate(cdoc):
        click.echo(f"warning: {why}", err=True)
    left = [p for p in doc["grid"]["points"] if p["capacity_rps"] is None]
    if left:
        click.echo(f"warning: {len(left)} grid point(s) met the SLO at no tested rate and are not in the model: "
                   + ", ".join(f"({p['input_tokens_requested']}, {p['output_tokens_requested']})" for p in left),
                   err=True)
    for path, what in ((json_path, doc), (capacity_path, cdoc)):
        if path is not None:
            write_json(path, what)
            click.echo(f"wrote {path}")
    if plot_path is not None:
        write_grid_plot(doc, plot_path)
        click.echo(f"wrote {plot_path}")
