"""The replay's LLM options: a replica's token budget or a measured capacity model (``scaler.capacity``), and
which load the policies scale on (``scaler.tokens``); the closed loop's targets (``scaler.feedback``), the latency
model and a capacity configured wrong (``scaler.replay.closedloop``, ``scaler.replay.llm``)."""

from __future__ import annotations

import functools
from pathlib import Path

import click

from .clitypes import FiniteRange
from ..feedback import Targets
from ..replay.llm import ITL_SECONDS
from ..tokens import TokenCapacity
from .options import fail


def read_model(path: Path, served_model: str | None, qps_per_replica: float | None, *others: tuple[str, bool]):
    """``--capacity-model FILE`` (``--served-model``: the model it must be for): the model, exit 2 on a bad file or
    when a figure it sets is given too (``others``: (flag, given))."""
    from ..capacity import CapacityModelError, read

    given = [flag for flag, on in (("--qps-per-replica", qps_per_replica is not None), *others) if on]
    if given:
        fail(f"--capacity-model sets qpsPerReplica, the token budget and the input weight: accepted is the file or "
             f"{', '.join(given)}, not both")
    try:
        m = read(path, expect_model=served_model)
    except CapacityModelError as e:
        fail(str(e))
    click.echo(f"capacity model {path}: {m.describe()}; qpsPerReplica {m.qps_per_replica:.4g}", err=True)
    return m


def capacity_trigger_keys(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """The trigger keys that read a capacity model file, and what to replace in them: the file as mounted under
    the scaler's default --capacity-dir, vLLM's token counters."""
    from ..limits import CAPACITY_DIRS

    md = {"capacityModel": f"{CAPACITY_DIRS[0]}/{path.name}",
          "inputTokenQuery": "sum(rate(vllm:prompt_tokens_total[2m]))",
          "outputTokenQuery": "sum(rate(vllm:generation_tokens_total[2m]))"}
    notes = {"capacityModel": f"mount {path.name} there (a ConfigMap under --capacity-dir)",
             "inputTokenQuery": "replace: your prompt tokens/s", "outputTokenQuery": "replace: your generated tokens/s"}
    return md, notes


MODEL_OPTIONS = (
    click.option("--capacity-model", "capacity_model_path", type=click.Path(dir_okay=False, path_type=Path),
                 default=None, metavar="FILE", help="A capacity model (`forescale loadtest --grid-input ... "
                 "--capacity-model FILE`; a trace with input_tokens and output_tokens): qpsPerReplica, the token "
                 "budget and the input weight from it (the fit x (1 - margin)); a mix outside the lengths it was "
                 "measured on is clamped to them, and said."),
    click.option("--served-model", default=None, metavar="NAME",
                 help="With --capacity-model: the model the workload serves; a file measured on another is refused."),
)


def capacity_options(f):
    """``--capacity-model`` and ``--served-model`` (tune): handed to the command as ``tokens`` (None without a
    file) and ``capacity_file`` (its path), with ``qps_per_replica`` set from the file."""

    @functools.wraps(f)
    def wrapper(*args, capacity_model_path: Path | None = None, served_model: str | None = None, **kwargs):
        tokens = None
        if capacity_model_path is not None:
            m = read_model(capacity_model_path, served_model, kwargs.get("qps_per_replica"))
            tokens, kwargs["qps_per_replica"] = m.token_capacity(), m.qps_per_replica
        elif served_model is not None:
            fail("--served-model goes with --capacity-model (the file it checks)")
        return f(*args, tokens=tokens, capacity_file=capacity_model_path, **kwargs)

    for opt in reversed(MODEL_OPTIONS):
        wrapper = opt(wrapper)
    return wrapper


def token_options(f):
    """``--tokens-per-replica``, ``--input-token-weight``, ``--scale-on``: handed to the command as ``tokens``
    (a ``TokenCapacity`` or None) and ``token_aware``."""

    @functools.wraps(f)
    def wrapper(*args, tokens_per_replica: float | None = None, input_token_weight: float = 1.0,
                scale_on: str = "binding", capacity_model_path: Path | None = None, served_model: str | None = None,
                **kwargs):
        tokens = None
        if capacity_model_path is not None:
            m = read_model(capacity_model_path, served_model, kwargs.get("qps_per_replica"),
                           ("--tokens-per-replica", tokens_per_replica is not None),
                           ("--input-token-weight", input_token_weight != 1.0))
            tokens, kwargs["qps_per_replica"] = m.token_capacity(), m.qps_per_replica
        elif served_model is not None:
            fail("--served-model goes with --capacity-model (the file it checks)")
        elif tokens_per_replica is not None:
            try:
                tokens = TokenCapacity(tokens_per_replica, input_token_weight)
            except ValueError as e:
                fail(str(e))
        elif scale_on != "binding" or input_token_weight != 1.0:
            fail("--scale-on and --input-token-weight need --tokens-per-replica (a replica's token budget) or "
                 "--capacity-model")
        return f(*args, tokens=tokens, token_aware=scale_on == "binding", **kwargs)

    for opt in reversed((
        *MODEL_OPTIONS,
        click.option("--tokens-per-replica", type=FiniteRange(min=0, min_open=True), default=None,
                     metavar="TOKENS/S", help="Weighted tokens/s one ready replica sustains (a trace with "
                     "input_tokens and output_tokens columns): the replay judges each interval on the binding "
                     "load max(req/s, qps-per-replica x tokens/s / this)."),
        click.option("--input-token-weight", type=FiniteRange(min=0, max=1000), default=1.0, show_default=True,
                     help="What one prompt (input) token costs in output tokens: weighted tokens = weight x input "
                          "+ output."),
        click.option("--scale-on", type=click.Choice(["binding", "requests"]), default="binding", show_default=True,
                     help="With --tokens-per-replica or --capacity-model: the load the policies see and forecast: the binding one of "
                          "req/s and tokens, or req/s alone (the baseline)."),
    )):
        wrapper = opt(wrapper)
    return wrapper


def loop_options(f):
    """``--queue-target``, ``--ttft-target``, ``--itl-target`` (the closed loop), ``--capacity`` (learned online),
    ``--itl-seconds`` and ``--capacity-factor``: handed over as ``llm_settings``, the ``Settings`` keywords ``loop``
    (a ``feedback.Targets`` or None), ``capacity_learned``, ``itl_seconds`` and ``capacity_factor``."""

    @functools.wraps(f)
    def wrapper(*args, queue_target: float | None = None, ttft_target: float | None = None,
                itl_target: float | None = None, itl_seconds: float = ITL_SECONDS, capacity_factor: float = 1.0,
                capacity: str = "configured", **kwargs):
        t = Targets(queue=queue_target, ttft=ttft_target, itl=itl_target)
        return f(*args, llm_settings={"loop": t if t.any else None, "itl_seconds": itl_seconds,
                                      "capacity_factor": capacity_factor, "capacity_learned": capacity == "learned"},
                 **kwargs)

    for opt in reversed((
        click.option("--queue-target", type=FiniteRange(min=0.001, max=1e6), default=None, metavar="N",
                     help="Replay the closed loop (queueTarget): waiting requests per ready replica over which every "
                          "HPA policy's answer rises (the server's rule, against the replay's FIFO queue)."),
        click.option("--ttft-target", type=FiniteRange(min=0.001, max=3600), default=None, metavar="SECONDS",
                     help="Replay the closed loop on the TTFT p95 (ttftTarget)."),
        click.option("--itl-target", type=FiniteRange(min=0.001, max=3600), default=None, metavar="SECONDS",
                     help="Replay the closed loop on the ITL p95 (itlTarget)."),
        click.option("--capacity", type=click.Choice(["configured", "learned"]), default="configured",
                     show_default=True, help="capacity: learned replayed: the server's estimator fed at every KEDA "
                     "call what its queries would show (the served rate while requests wait, per ready replica), "
                     "every HPA policy's plan in replicas of the figure it learned so far (bounded to 0.5-2x "
                     "--qps-per-replica, 10 % hysteresis). With --capacity-factor: a mis-set figure, learned."),
        click.option("--itl-seconds", type=FiniteRange(min=0, min_open=True, max=60), default=ITL_SECONDS,
                     show_default=True, help="A lone request's inter-token latency: the replay's TTFT and ITL "
                     "(ttft_p95_s, itl_p95_s; with token columns or a loop target)."),
        click.option("--capacity-factor", type=FiniteRange(min=0.1, max=10), default=1.0, show_default=True,
                     metavar="F", help="What-if: a replica really sustains 1/F of --qps-per-replica (and of "
                     "--tokens-per-replica); 1.3 = configured 30 % too high. Judged on F x the load."),
    )):
        wrapper = opt(wrapper)
    return wrapper
