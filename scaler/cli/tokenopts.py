"""The replay's token options: a replica's token budget and which load the policies scale on (``scaler.tokens``)."""

from __future__ import annotations

import functools

import click

from .clitypes import FiniteRange
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
