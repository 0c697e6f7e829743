"""The replay's LLM options: a replica's token budget and which load the policies scale on (``scaler.tokens``);
the closed loop's targets (``scaler.feedback``), the latency model and a capacity configured wrong
(``scaler.replay.closedloop``, ``scaler.replay.llm``)."""

from __future__ import annotations

import functools

import click

from .clitypes import FiniteRange
from ..feedback import Targets
from ..replay.llm import ITL_SECONDS
from ..tokens import TokenCapacity
from .options import fail


def token_options(f):
    """``--tokens-per-replica``, ``--input-token-weight``, ``--scale-on``: handed to the command as ``tokens``
    (a ``TokenCapacity`` or None) and ``token_aware``."""

    @functools.wraps(f)
    def wrapper(*args, tokens_per_replica: float | None = None, input_token_weight: float = 1.0,
                scale_on: str = "binding", **kwargs):
        tokens = None
        if tokens_per_replica is not None:
            try:
                tokens = TokenCapacity(tokens_per_replica, input_token_weight)
            except ValueError as e:
                fail(str(e))
        elif scale_on != "binding" or input_token_weight != 1.0:
            fail("--scale-on and --input-token-weight need --tokens-per-replica (a replica's token budget)")
        return f(*args, tokens=tokens, token_aware=scale_on == "binding", **kwargs)

    for opt in reversed((
        click.option("--tokens-per-replica", type=FiniteRange(min=0, min_open=True), default=None,
                     metavar="TOKENS/S", help="Weighted tokens/s one ready replica sustains (a trace with "
                     "input_tokens and output_tokens columns): the replay judges each interval on the binding "
                     "load max(req/s, qps-per-replica x tokens/s / this)."),
        click.option("--input-token-weight", type=FiniteRange(min=0, max=1000), default=1.0, show_default=True,
                     help="What one prompt (input) token costs in output tokens: weighted tokens = weight x input "
                          "+ output."),
        click.option("--scale-on", type=click.Choice(["binding", "requests"]), default="binding", show_default=True,
                     help="With --tokens-per-replica: the load the policies see and forecast: the binding one of "
                          "req/s and tokens, or req/s alone (the baseline)."),
    )):
        wrapper = opt(wrapper)
    return wrapper


def loop_options(f):
    """``--queue-target``, ``--ttft-target``, ``--itl-target`` (the closed loop), ``--itl-seconds`` and
    ``--capacity-factor``: handed over as ``llm_settings``, the ``Settings`` keywords ``loop`` (a
    ``feedback.Targets`` or None), ``itl_seconds`` and ``capacity_factor``."""

    @functools.wraps(f)
    def wrapper(*args, queue_target: float | None = None, ttft_target: float | None = None,
                itl_target: float | None = None, itl_seconds: float = ITL_SECONDS, capacity_factor: float = 1.0,
                **kwargs):
        t = Targets(queue=queue_target, ttft=ttft_target, itl=itl_target)
        return f(*args, llm_settings={"loop": t if t.any else None, "itl_seconds": itl_seconds,
                                      "capacity_factor": capacity_factor}, **kwargs)

    for opt in reversed((
        click.option("--queue-target", type=FiniteRange(min=0.001, max=1e6), default=None, metavar="N",
                     help="Replay the closed loop (queueTarget): waiting requests per ready replica over which every "
                          "HPA policy's answer rises (the server's rule, against the replay's FIFO queue)."),
        click.option("--ttft-target", type=FiniteRange(min=0.001, max=3600), default=None, metavar="SECONDS",
                     help="Replay the closed loop on the TTFT p95 (ttftTarget)."),
        click.option("--itl-target", type=FiniteRange(min=0.001, max=3600), default=None, metavar="SECONDS",
                     help="Replay the closed loop on the ITL p95 (itlTarget)."),
        click.option("--itl-seconds", type=FiniteRange(min=0, min_open=True, max=60), default=ITL_SECONDS,
                     show_default=True, help="A lone request's inter-token latency: the replay's TTFT and ITL "
                     "(ttft_p95_s, itl_p95_s; with token columns or a loop target)."),
        click.option("--capacity-factor", type=FiniteRange(min=0.1, max=10), default=1.0, show_default=True,
                     metavar="F", help="What-if: a replica really sustains 1/F of --qps-per-replica (and of "
                     "--tokens-per-replica); 1.3 = configured 30 % too high. Judged on F x the load."),
    )):
        wrapper = opt(wrapper)
    return wrapper
