"""``forescale probe``: measure T_cold phase by phase, gate readiness on warm-up."""

from __future__ import annotations

import json
import os
import signal
import threading

import click
from click.core import ParameterSource

from .config import (DEFAULT_CACHE_DIR, DTYPE_CHOICES, LoadSpec, ModelSpec, ProbeConfig, WarmupSpec,
                     parse_device, parse_model_size)
from .errors import ProbeError
from .exits import ProbeFailed, write_json


def _size(ctx, param, value):
    try:
        return parse_model_size(value)
    except ProbeError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param)


def _device(ctx, param, value):
    try:
        return parse_device(value)
    except ProbeError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param)


def _kwargs(ctx, param, value):
    if value is None:
        return {}
    try:
        obj = json.loads(value)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"{value!r} is not JSON ({exc.msg}); accepted: a JSON object such as "
                                 "'{\"hidden\": 64}'", ctx=ctx, param=param)
    if not isinstance(obj, dict):
        raise click.BadParameter(f"{value!r} is a JSON {type(obj).__name__}; accepted: a JSON object such as "
                                 "'{\"hidden\": 64}'", ctx=ctx, param=param)
    return obj


def _json_path(ctx, param, value):
    if value in (None, "-"):
        return value
    parent = os.path.dirname(os.path.abspath(value)) or "."
    if not os.path.isdir(parent):
        raise click.BadParameter(f"{value}: directory {parent} does not exist; accepted: a file path in an existing "
                                 "directory, or - for stdout", ctx=ctx, param=param)
    if os.path.isdir(value):
        raise click.BadParameter(f"{value} is a directory; accepted: a file path, or - for stdout", ctx=ctx,
                                 param=param)
    return value


@click.command("probe")
@click.option("--model-size", default="125M", show_default=True, callback=_size,
              help="Built-in decoder-only transformer size in parameters: 5M, 125M, 1.3B or an integer.")
@click.option("--weights", default=None, metavar="FILE",
              help="A user's weights instead: .safetensors, or a torch state dict (.pt/.pth/.bin). Needs --module.")
@click.option("--module", "module_spec", default=None, metavar="PKG.MOD:FACTORY",
              help="Callable returning the torch.nn.Module the weights belong to (forward(input_ids[batch, tokens])).")
@click.option("--module-kwargs", default=None, callback=_kwargs, metavar="JSON",
              help="Keyword arguments for the factory, as a JSON object.")
@click.option("--model-name", default=None, help="Label in the report and the metrics' model label "
              "(default: builtin-<size>, or the weights file's name).")
@click.option("--dtype", type=click.Choice(DTYPE_CHOICES, case_sensitive=False), default="auto", show_default=True,
              help="Built-in: weights dtype (auto: float16 on CUDA, float32 on CPU). User weights: the dtype the "
              "file must hold (auto: the file's own).")
@click.option("--vocab-size", type=click.IntRange(min=1), default=None,
              help="User module's vocabulary size (default: its first nn.Embedding, else 256).")
@click.option("--device", default="auto", show_default=True, callback=_device,
              help="auto (CUDA when present, else CPU), cpu, cuda or cuda:N.")
@click.option("--cache-dir", default=DEFAULT_CACHE_DIR, show_default=True,
              help="Where built-in weights are generated and kept.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the built-in weights.")
@click.option("--warmup-inputs", default=None, metavar="FILE",
              help="Deep warm-up requests: JSON lines (token id lists, {\"tokens\": [...]} or {\"text\": ...}) or "
              "text lines (byte-tokenised). Default: synthetic prompts of 16 to 2048 tokens.")
@click.option("--request-tokens", type=click.IntRange(min=1), default=128, show_default=True,
              help="Tokens of the probe request (first, concurrent and steady inference).")
@click.option("--shallow-requests", type=click.IntRange(min=1), default=3, show_default=True,
              help="Requests in warmup_shallow (synthetic, medium length).")
@click.option("--shallow-tokens", type=click.IntRange(min=1), default=256, show_default=True,
              help="Tokens per warmup_shallow request.")
@click.option("--concurrency", type=click.IntRange(1, 64), default=4, show_default=True,
              help="Parallel requests in warmup_concurrent (4-8 is typical).")
@click.option("--steady-requests", type=click.IntRange(min=1), default=20, show_default=True,
              help="Requests timed after warm-up for p50/p95.")
@click.option("--max-input-tokens", type=click.IntRange(min=1), default=None,
              help="Cut longer warm-up inputs (the built-in model stops at its 2048 positions).")
@click.option("--h2d", type=click.Choice(["pinned", "pageable"]), default="pinned", show_default=True,
              help="CUDA host->device path for the weights (both are measured for comparison).")
@click.option("--evict/--no-evict", default=True, show_default=True,
              help="Drop the weights file from the page cache first (posix_fadvise DONTNEED) for a cold read.")
@click.option("--raw-read/--no-raw-read", default=True, show_default=True,
              help="After readiness, time a plain sequential read of the same file for comparison.")
@click.option("--image-pull-seconds", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="Added to T_cold (measured elsewhere).")
@click.option("--scheduling-seconds", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="Added to T_cold (measured elsewhere).")
@click.option("--json", "json_path", default=None, callback=_json_path, metavar="PATH",
              help="Write the JSON report here (- for stdout).")
@click.option("--serve", "serve_port", type=click.IntRange(0, 65535), default=None, metavar="PORT",
              help="Serve /metrics and /health/{startup,ready,live}, and after warm-up the model itself on "
              "POST /v1/completions (OpenAI-compatible); stay up until SIGTERM.")
@click.option("--max-batch", type=click.IntRange(1, 256), default=8, show_default=True,
              help="With --serve: requests generated together (iteration-level batching).")
@click.option("--max-queue", type=click.IntRange(1, 100000), default=256, show_default=True,
              help="With --serve: requests waiting for a batch slot before new ones get 503.")
@click.option("--capacity-from", type=click.Path(dir_okay=False), default=None, metavar="LOADTEST.json",
              help="With --serve: export the measured capacity (req/s at the SLO) of a `forescale loadtest "
              "--json` result as forescale_capacity_qps{model}.")
@click.option("--host", default="0.0.0.0", show_default=True, help="Address for --serve.")
@click.option("--exit-after-warmup", is_flag=True, help="With --serve: exit once warm-up finished (one-shot).")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines on stderr.")
@click.option("--watch", "watch_url", default=None, metavar="URL",
              help="Time an external OpenAI-compatible server (vLLM, TGI, SGLang...) instead of loading a model: "
              "from this sidecar's start to URL's health endpoint answering, then to its first completion. "
              "Needs --serve PORT (the same /metrics and /health/*).")
@click.option("--watch-health", default="/health", show_default=True, metavar="PATH",
              help="With --watch: the server's health path (Triton: /v2/health/ready).")
@click.option("--watch-model", default=None, metavar="NAME",
              help="With --watch: the model field of the completion (default: the first id of GET /v1/models).")
@click.option("--watch-interval", type=click.FloatRange(min=0.05, max=60), default=1.0, show_default=True,
              help="With --watch: seconds between polls (the times are measured within one interval).")
@click.option("--test-warmup-delay", type=click.FloatRange(min=0), default=0.0, hidden=True)
@click.option("--test-step-delay", type=click.FloatRange(min=0), default=0.0, hidden=True)
@click.pass_context
def probe_command(ctx: click.Context, model_size, weights, module_spec, module_kwargs, model_name, dtype, vocab_size,
                  device, cache_dir, seed, warmup_inputs, request_tokens, shallow_requests, shallow_tokens, concurrency,
                  steady_requests, max_input_tokens, h2d, evict, raw_read, image_pull_seconds, scheduling_seconds,
                  json_path, serve_port, max_batch, max_queue, capacity_from, host, exit_after_warmup, quiet,
                  watch_url, watch_health, watch_model, watch_interval, test_warmup_delay, test_step_delay) -> None:
    """Measure T_cold of a torch model on this device, phase by phase.

    Phases: runtime_import, device_init, weights_read, weights_to_device,
    first_inference, warmup_shallow, warmup_deep, warmup_concurrent.
    T_cold is their sum plus --image-pull-seconds and --scheduling-seconds;
    readiness comes when warm-up is done. The steady-state timing
    (--steady-requests) runs after readiness, outside T_cold. Exit code 2 on
    a bad input or a failed probe.

    The scaler reads T_cold with the trigger metadata
    coldStartQuery: max(forescale_cold_start_seconds{phase="total",model="NAME"}).
    """
    if watch_url is not None:
        if serve_port is None:
            raise click.UsageError("--watch needs --serve PORT (it serves /metrics and /health/* for the scaler and "
                                   "the kubelet)")
        from .watch import watch_main

        return watch_main(ctx, watch_url, watch_health, watch_model, watch_interval, model_name, image_pull_seconds,
                          scheduling_seconds, host, serve_port, json_path, exit_after_warmup)
    if weights is not None and ctx.get_parameter_source("model_size") == ParameterSource.COMMANDLINE:
        raise click.UsageError("--model-size applies to the built-in model; with --weights the size is the file's")
    if weights is None and module_spec is not None:
        raise click.UsageError("--module needs --weights FILE (the state dict to load into the module)")
    if weights is not None and module_spec is None:
        raise click.UsageError("--weights needs --module package.module:factory (the code that builds the model)")
    if exit_after_warmup and serve_port is None:
        raise click.UsageError("--exit-after-warmup goes with --serve PORT (without --serve the probe always exits)")
    if capacity_from is not None and serve_port is None:
        raise click.UsageError("--capacity-from goes with --serve PORT (it is exported on /metrics)")
    capacity = None
    if capacity_from is not None:
        from ..loadtest.report import LoadtestReportError, read_capacity

        try:
            capacity = read_capacity(capacity_from)
        except LoadtestReportError as exc:
            raise click.BadParameter(str(exc), param_hint="--capacity-from")
    config = ProbeConfig(
        model=ModelSpec(size=model_size, weights=weights, module=module_spec, module_kwargs=module_kwargs,
                        name=model_name, dtype=dtype.lower(), seed=seed, cache_dir=cache_dir, vocab_size=vocab_size),
        warmup=WarmupSpec(inputs=warmup_inputs, request_tokens=request_tokens, shallow_requests=shallow_requests,
                          shallow_tokens=shallow_tokens, concurrency=concurrency, steady_requests=steady_requests,
                          max_input_tokens=max_input_tokens, delay_seconds=test_warmup_delay),
        load=LoadSpec(evict=evict, raw_read=raw_read, h2d=h2d),
        device=device, image_pull_seconds=image_pull_seconds, scheduling_seconds=scheduling_seconds)

    from .runner import Probe

    def progress(what: str, seconds: float | None) -> None:
        click.echo(f"probe: {what}" + (f" ({seconds:.3f} s)" if seconds is not None else ""), err=True)

    try:
        probe = Probe(config, progress=None if quiet else progress)
    except ProbeError as exc:
        raise ProbeFailed(exc)

    if serve_port is None:
        try:
            report = probe.run()
        except ProbeError as exc:
            if json_path is not None and (failed := probe.report()) is not None:
                write_json(json_path, failed)
            raise ProbeFailed(exc)
        _output(probe, report, json_path)
        return

    try:
        server = probe.serve(host, serve_port, max_batch=max_batch, max_queue=max_queue, step_delay=test_step_delay)
    except ProbeError as exc:
        raise ProbeFailed(exc)
    if capacity is not None:
        probe.metrics.set_capacity(capacity)
    code = _serve_until_stopped(probe, server, json_path, exit_after_warmup)
    if code:
        ctx.exit(code)


def _serve_until_stopped(probe, server, json_path: str | None, exit_after_warmup: bool) -> int:
    """--serve: run the probe behind its health endpoints until SIGTERM/SIGINT (or warm-up, with
    --exit-after-warmup); the exit code (0, or the probe's error's with --exit-after-warmup)."""
    click.echo(f"forescale probe: serving {server.url} (/health/startup, /health/ready, /health/live, /metrics, "
               "/report, POST /v1/completions)", err=True)
    stop = threading.Event()
    previous = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
        except ValueError:  # not the main thread (embedded use): no signal handling
            pass
    code = 0
    try:
        probe.start()
        while not stop.is_set() and not probe.wait(0.2):
            pass
        if probe.done:
            if probe.error is None:
                _output(probe, probe.report(), json_path, keep_model=not exit_after_warmup)
            else:
                if json_path is not None:
                    write_json(json_path, probe.report())
                click.echo(f"Error: {probe.error}", err=True)
                if exit_after_warmup:
                    code = probe.error.exit_code
                else:
                    click.echo("forescale probe: not ready; the health endpoints give the reason until SIGTERM",
                               err=True)
            if not exit_after_warmup:
                stop.wait()  # a sidecar: stay up, answering health checks, until told to stop
    finally:
        probe.mark_stopping()
        probe.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return code


def _output(probe, report: dict, json_path: str | None, keep_model: bool = False) -> None:
    if not keep_model:  # a serving probe keeps the model for /v1/completions
        probe.release_model()
    table = probe.table()
    if json_path == "-":
        click.echo(table, err=True)
        write_json("-", report)
    else:
        click.echo(table)
        if json_path is not None:
            write_json(json_path, report)
