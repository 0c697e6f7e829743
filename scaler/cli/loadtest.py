"""``forescale loadtest URL``: what one replica serves at a latency SLO, measured with an open-loop generator."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from .clitypes import FiniteRange
from ..loadtest import stats
from ..loadtest.report import LoadtestReportError, document, read_capacity
from ..loadtest.workload import WorkloadError, read_prompts, template
from .loadgrid import ms, run_grid_command, save_figure, verdict
from .options import Duration, check_output, fail, write_json

DEFAULT_PROMPT = "Request {n}: tell me about autoscaling."


def _floats(ctx, param, value):
    if value is None:
        return None
    try:
        out = tuple(float(x) for x in value.split(",") if x.strip())
    except ValueError:
        out = ()
    if not out or any(not (x > 0 and x < float("inf")) for x in out):
        raise click.BadParameter(f"{value!r}: accepted: numbers > 0, comma-separated, e.g. 1,2,4,8", ctx, param)
    return out


def _int_list(hi: int, accepted: str):
    """A click callback: comma-separated integers in [1, ``hi``], ``accepted`` saying so on a bad value."""

    def callback(ctx, param, value):
        if value is None:
            return None
        try:
            out = tuple(int(x) for x in value.split(",") if x.strip())
        except ValueError:
            out = ()
        if not out or min(out) < 1 or max(out) > hi:
            raise click.BadParameter(f"{value[:60]!r}: accepted: {accepted}", ctx, param)
        return out

    return callback


_ints = _int_list(10000, "integers 1 to 10000, comma-separated, e.g. 1,4,16")
_tokens = _int_list(1_000_000, "token counts 1 to 1000000, comma-separated, e.g. 128,1024,4096")


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("forescale")
    except Exception:
        return "unknown"


def progress_factory(enabled: bool | None):
    """A tqdm bar per step (seconds of the step elapsed), on stderr; ``enabled`` None = only on a terminal."""
    if enabled is False:
        return None
    from tqdm import tqdm

    def make(label: str, seconds: float):
        bar = tqdm(total=round(seconds, 1), desc=label, unit="s", leave=False, disable=None if enabled is None
                   else False, dynamic_ncols=True, mininterval=0.5, bar_format="{desc}: {percentage:3.0f}%|{bar}| "
                   "{n:.0f}/{total:.0f} s")

        def tick(elapsed: float) -> None:
            bar.n = min(bar.total, round(elapsed, 1))
            bar.refresh()

        return tick, bar.close

    return make


def format_table(doc: dict) -> str:
    q = doc["slo"]["percentile"]
    head = (f"{'load':>10}{'offered':>9}{'achieved':>9}{'p50 ms':>8}{'p95 ms':>8}{'p99 ms':>8}{'TTFT p50':>9}"
            f"{'errors':>7}{'timeouts':>9}{'<=SLO %':>8}  verdict")
    lines = [head]
    for s in doc["steps"]:
        load = f"{s['concurrency']} wrk" if s["mode"] == "closed" else f"{s['target_rps']:.3g}/s"
        lines.append(f"{load:>10}{s['offered_rps']:>9.2f}{s['achieved_rps']:>9.2f}{ms(s['p50_s']):>8}"
                     f"{ms(s['p95_s']):>8}{ms(s['p99_s']):>8}{ms(s['ttft_p50_s']):>9}{s['errors']:>7}"
                     f"{s['timeouts']:>9}{s['within_slo'] * 100:>8.1f}  {verdict(s)}")
    slo = f"p{q:g} <= {doc['slo']['seconds']:g} s"
    if doc["mode"] == "step":
        lines.append(f"step test at {doc['settings']['capacity_rps']:.3g} req/s capacity; SLO {slo}")
    elif doc["recommended_qps_per_replica"] is not None:
        lines.append(f"capacity at the SLO ({slo}): {doc['capacity_rps']:.3g} req/s ({doc['recommendation_basis']}); "
                     f"recommended qpsPerReplica: {doc['recommended_qps_per_replica']:.3g} "
                     f"(margin {doc['settings']['margin']:g})")
    return "\n".join(lines)


def _on_step(percentile: float):
    def on_step(step: dict) -> None:
        load = f"{step['concurrency']} workers" if step["mode"] == "closed" else f"{step['target_rps']:.3g} req/s"
        if "input_tokens" in step:
            load = f"{step['input_tokens']} in, {step['output_tokens']} out: {load}"
        itl = f", ITL p95 {ms(step['itl_p95_s'])} ms" if step.get("itl_p95_s") is not None else ""
        click.echo(f"loadtest: {load}: p{percentile:g} within SLO {step['within_slo'] * 100:.1f} %, p95 "
                   f"{ms(step['p95_s'])} ms, TTFT p95 {ms(step['ttft_p95_s'])} ms{itl}, errors {step['errors']}, "
                   f"timeouts {step['timeouts']}"
                   + (f" [generator limited: {step['limit_reason']}]" if step["generator_limited"] else ""), err=True)
    return on_step


def grid_of(grid_input, grid_output, slo_ttft, slo_itl, capacity_path, hardware, prompts_path,
            stream) -> tuple[tuple[int, int], ...]:
    """The grid's points (prompt, answer tokens), its options checked together; () without a grid."""
    if not grid_input and not grid_output:
        for value, flag in ((capacity_path, "--capacity-model"), (hardware, "--hardware")):
            if value is not None:
                raise click.UsageError(f"{flag} goes with --grid-input and --grid-output (the capacity model is "
                                       "fitted on a grid)")
        return ()
    if not grid_input or not grid_output:
        raise click.UsageError("--grid-input and --grid-output go together (e.g. --grid-input 128,1024,4096 "
                               "--grid-output 64,256)")
    if slo_ttft is None and slo_itl is None:
        raise click.UsageError("the grid is held to the SLOs of a token stream: accepted: --slo-ttft and/or "
                               "--slo-itl (e.g. --slo-ttft 500ms --slo-itl 50ms)")
    if prompts_path is not None:
        raise click.UsageError("--prompts sets its own lengths: the grid builds its prompts (accepted: one of them)")
    if not stream:
        raise click.UsageError("the grid measures TTFT and ITL on streamed answers: accepted: --stream (the default)")
    if not hardware or not hardware.strip():
        raise click.UsageError("the capacity file names the hardware it was measured on: accepted: --hardware TEXT, "
                               "e.g. --hardware '1x H100 80GB'")
    return tuple((i, o) for i in sorted(set(grid_input)) for o in sorted(set(grid_output)))


PLOT_SUFFIXES = (".png", ".svg", ".pdf")  # what matplotlib's savefig writes that a user opens


def check_plot_path(path: Path | None) -> None:
    """--plot: a .png, .svg or .pdf file that can be written, checked before the run (exit 2)."""
    if path is None:
        return
    if path.suffix.lower() not in PLOT_SUFFIXES:
        fail(f"--plot {path}: the file name ends in {path.suffix or 'no suffix'!r}, which names no image format; "
             f"accepted: a file ending in {', '.join(PLOT_SUFFIXES)}")
    check_output(path, "--plot")


def write_plot(doc: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    slo = doc["slo"]["seconds"]
    if doc["mode"] == "step":
        tl = doc["timeline"]
        t = [w["t_s"] for w in tl]
        ax.step(t, [w["p95_s"] if w["p95_s"] is not None else float("nan") for w in tl], where="post", label="p95")
        ax.axvline(doc["settings"]["duration_s"], color="k", ls=":", label="the jump")
        ax2 = ax.twinx()
        ax2.step(t, [w["rate_rps"] for w in tl], where="post", color="tab:gray", alpha=0.6, label="arrivals/s")
        ax2.set_ylabel("arrivals (req/s)")
        ax.set_xlabel("time (s)")
        ax.set_title(f"step {doc['settings']['step'][0]:g}x -> {doc['settings']['step'][1]:g}x of "
                     f"{doc['settings']['capacity_rps']:.3g} req/s")
    else:
        steps = sorted(doc["steps"], key=stats.rate_of)
        x = [stats.rate_of(s) for s in steps]
        for key, label in (("p50_s", "p50"), ("p95_s", "p95"), ("p99_s", "p99")):
            ax.plot(x, [s[key] if s[key] is not None else float("nan") for s in steps], marker="o", label=label)
        limited = [(stats.rate_of(s), s["p95_s"]) for s in steps if s["generator_limited"] and s["p95_s"]]
        if limited:
            lx, ly = zip(*limited)
            ax.scatter(lx, ly, marker="x", s=80, color="k", zorder=5, label="generator limited (no evidence)")
        if doc["knee"] is not None:
            ax.axvline(doc["knee"]["rate_rps"], color="tab:red", ls="--", label=f"knee {doc['knee']['rate_rps']:.3g}/s")
            ax.axvline(doc["recommended_qps_per_replica"], color="tab:green", ls=":",
                       label=f"qpsPerReplica {doc['recommended_qps_per_replica']:.3g}")
        ax.set_xlabel("achieved req/s (closed loop)" if doc["mode"] == "concurrency" else "offered req/s")
        ax.set_title(f"latency vs load: {doc['url']}")
    ax.axhline(slo, color="k", lw=0.8, label=f"SLO {slo:g} s")
    ax.set_ylabel("latency (s)")
    ax.set_yscale("log")
    ax.legend(loc="upper left", fontsize=8)
    save_figure(plt, fig, path)


@click.command("loadtest", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("url")
@click.option("--rates", callback=_floats, default=None, metavar="R1,R2,...",
              help="Open loop: Poisson arrivals at each rate (req/s), ascending, --duration each.")
@click.option("--ramp", is_flag=True, help="Open loop from --start-rate, x --ramp-factor while the SLO holds, then "
              "--refine bisections around the knee. [the default mode]")
@click.option("--start-rate", type=FiniteRange(min=0, min_open=True), default=1.0, show_default=True,
              help="With --ramp: the first rate (req/s).")
@click.option("--ramp-factor", type=FiniteRange(min=1, min_open=True), default=1.5, show_default=True,
              help="With --ramp: the next rate is the last passing one times this.")
@click.option("--refine", type=click.IntRange(0, 10), default=2, show_default=True,
              help="With --ramp: bisections between the last passing and the first failing rate.")
@click.option("--max-rate", type=FiniteRange(min=0, min_open=True), default=10000.0, show_default=True,
              help="With --ramp: stop here.")
@click.option("--concurrency", callback=_ints, default=None, metavar="N1,N2,...",
              help="Closed loop instead: N workers each sending back to back (the server's slowness slows it).")
@click.option("--step", "step_factors", callback=_floats, default=None, metavar="LOW,HIGH",
              help="The step test: LOW x capacity for --duration, then at once HIGH x capacity (e.g. 0.6,1.2); "
              "needs --capacity-from.")
@click.option("--capacity-from", type=click.Path(dir_okay=False, path_type=Path), default=None,
              metavar="LOADTEST.json", help="With --step: the capacity measured by an earlier loadtest.")
@click.option("--duration", type=Duration(), default="30s", show_default=True, help="Per step.")
@click.option("--slo", type=Duration(), default="2s", show_default=True,
              help="Latency objective (a duration): request start to last byte.")
@click.option("--percentile", type=FiniteRange(0, 100, min_open=True, max_open=True), default=95.0,
              show_default=True, help="Share of requests (%) that must meet --slo; errors and timeouts miss it.")
@click.option("--margin", type=FiniteRange(0, 1, max_open=True), default=0.2, show_default=True,
              help="Safety margin: qpsPerReplica = capacity x (1 - margin).")
@click.option("--prompt", default=DEFAULT_PROMPT, show_default=True,
              help="Template prompt ({n} = the request number).")
@click.option("--max-tokens", type=click.IntRange(min=1), default=16, show_default=True,
              help="Tokens to generate (per line default with --prompts).")
@click.option("--prompts", "prompts_path", type=click.Path(dir_okay=False), default=None, metavar="FILE.jsonl",
              help='Real prompts, one per line: "text" or {"prompt": ..., "max_tokens": ...}; cycled in order.')
@click.option("--stream/--no-stream", default=True, show_default=True,
              help="Ask for server-sent events (time to first token is measured only when streaming).")
@click.option("--model", default=None, help="The \"model\" field of each request (servers that host several).")
@click.option("--timeout", type=Duration(), default="30s", show_default=True, help="Per request.")
@click.option("--max-connections", type=click.IntRange(1, 100000), default=1000, show_default=True,
              help="Concurrent connections the generator may open.")
@click.option("--max-lag", type=Duration(), default=None,
              help="Strict timing: a send lag (p99) beyond this marks a step as not sustained by the generator. "
              "[default: only lag that alone breaks the SLO counts]")
@click.option("--slo-ttft", type=Duration(), default=None,
              help="Time-to-first-token objective (a duration): at least --percentile % of the requests' first "
              "token within it (streamed; errors miss it).")
@click.option("--slo-itl", type=Duration(), default=None,
              help="Inter-token latency objective (a duration): the --percentile-th gap between streamed tokens, "
              "over all the step's answers, within it.")
@click.option("--grid-input", callback=_tokens, default=None, metavar="N1,N2,...",
              help="The grid's prompt lengths (tokens): the capacity at each (prompt, answer) pair, by the ramp or "
              "--rates; with --grid-output, --slo-ttft and/or --slo-itl (--slo then only when given).")
@click.option("--grid-output", callback=_tokens, default=None, metavar="N1,N2,...",
              help="The grid's answer lengths (tokens, asked with ignore_eos).")
@click.option("--capacity-model", "capacity_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              metavar="PATH", help="With the grid: write the capacity model fitted on its knees (JSON, "
              "forescale.capacity/v1), read by backtest/tune --capacity-model and the trigger key capacityModel.")
@click.option("--hardware", default=None, metavar="TEXT",
              help="With the grid: what the replica ran on, named in the capacity file (e.g. '1x H100 80GB').")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the Poisson schedules.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None, metavar="PATH",
              help="Write the result (schema forescale.loadtest/v1).")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path), default=None, metavar="PNG",
              help="Latency vs load with the knee marked (the step test: latency over time).")
@click.option("--progress/--no-progress", default=None, help="Progress bar (default: only on a terminal).")
def loadtest_command(url, rates, ramp, start_rate, ramp_factor, refine, max_rate, concurrency, step_factors,
                     capacity_from, duration, slo, percentile, margin, prompt, max_tokens, prompts_path, stream, model,
                     timeout, max_connections, max_lag, slo_ttft, slo_itl, grid_input, grid_output, capacity_path,
                     hardware, seed, json_path, plot_path, progress) -> None:
    """Measure the request rate one replica at URL serves within a latency SLO.

    URL is an OpenAI-compatible server (`forescale probe --serve PORT`, vLLM,
    TGI...): its base URL or its /v1/completions URL. The generator is open
    loop: Poisson arrivals at the target rate whatever the server does, and
    latency counts from the scheduled arrival. Prints a table per step and the
    recommended qpsPerReplica; exit code 2 on a bad input, an unreachable
    server, or when no rate meets the SLO.
    """
    from ..loadtest.generator import LoadtestError, Target, completions_url  # aiohttp: only when the verb runs
    from ..loadtest.run import Settings, run

    check_output(json_path, "--json")  # outputs are checked before the run, not after minutes of load
    check_output(capacity_path, "--capacity-model")
    check_plot_path(plot_path)
    grid = grid_of(grid_input, grid_output, slo_ttft, slo_itl, capacity_path, hardware, prompts_path, stream)
    if grid and click.get_current_context().get_parameter_source("slo") is click.core.ParameterSource.DEFAULT:
        slo = None  # a grid is held to TTFT and ITL; the latency to the last byte only when asked
    modes = [m for m, on in (("rates", rates), ("ramp", ramp), ("concurrency", concurrency),
                             ("step", step_factors)) if on]
    if len(modes) > 1:
        raise click.UsageError(f"choose one of --rates, --ramp, --concurrency, --step (got {', '.join(modes)})")
    mode = modes[0] if modes else "ramp"
    capacity = None
    if mode == "step":
        if len(step_factors) != 2:
            raise click.BadParameter("accepted: two factors LOW,HIGH of the capacity, e.g. 0.6,1.2",
                                     param_hint="--step")
        if capacity_from is None:
            raise click.UsageError("--step needs --capacity-from LOADTEST.json (the capacity it is a fraction of)")
        try:
            capacity = read_capacity(capacity_from)
        except LoadtestReportError as e:
            fail(str(e))
    elif capacity_from is not None:
        raise click.UsageError("--capacity-from goes with --step")
    try:
        workload = read_prompts(prompts_path, max_tokens) if prompts_path else template(prompt, max_tokens)
        target = Target(completions_url(url), workload, stream=stream, model=model, timeout=timeout,
                        max_connections=max_connections)
        settings = Settings(mode=mode, slo=slo, percentile=percentile, margin=margin, duration=duration,
                            rates=rates or (), start_rate=start_rate, ramp_factor=ramp_factor, refine=refine,
                            max_rate=max_rate, concurrency=concurrency or (), step=tuple(step_factors or (0.6, 1.2)),
                            capacity=capacity, seed=seed, max_lag=max_lag, slo_ttft=slo_ttft, slo_itl=slo_itl,
                            grid=grid).validated()
    except (WorkloadError, LoadtestError) as e:
        fail(str(e))
    if grid:
        return run_grid_command(target, settings, model=model, hardware=hardware, margin=margin, version=_version(),
                                json_path=json_path, plot_path=plot_path, capacity_path=capacity_path,
                                on_step=_on_step(percentile), progress=progress_factory(progress))

    try:
        outcome = asyncio.run(run(target, settings, on_step=_on_step(percentile), progress=progress_factory(progress)))
    except LoadtestError as e:
        fail(str(e))
    doc = document(outcome, url=target.url, workload=workload.describe(), stream=stream, timeout=timeout,
                   version=_version())
    click.echo(format_table(doc))
    if json_path is not None:
        write_json(json_path, doc)
        click.echo(f"wrote {json_path}")
    if plot_path is not None:
        write_plot(doc, plot_path)
        click.echo(f"wrote {plot_path}")
    limited = outcome.generator_limited
    if limited:
        worst = limited[-1]
        click.echo(f"warning: the generator could not offer {stats.rate_of(worst):.3g} req/s on this machine "
                   f"({worst['limit_reason']}); that step is not evidence about the server. Lower the rates, or "
                   "run several generators and add their rates.", err=True)
    if mode != "step" and doc["recommended_qps_per_replica"] is None:
        trusted = [s for s in outcome.steps if not s["generator_limited"]]
        if not trusted:
            fail("no step could be offered as asked (the generator's limit, see the warning above); nothing measured")
        low = min(trusted, key=stats.rate_of)
        load = (f"{low['concurrency']} workers ({low['achieved_rps']:.3g} req/s)" if low["mode"] == "closed"
                else f"{low['target_rps']:.3g} req/s")
        fail(f"no tested rate meets the SLO (p{percentile:g} <= {slo:g} s): at the lowest, {load}, p95 was "
             f"{'-' if low['p95_s'] is None else format(low['p95_s'], '.3f')} s with {low['within_slo'] * 100:.1f} % "
             f"within the SLO (errors {low['errors']}, timeouts {low['timeouts']}); accepted: a looser --slo or "
             "lower --rates/--start-rate")
