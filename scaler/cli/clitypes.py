"""The CLI's one way to refuse (``fail``: exit 2) and its parameter types: ``prometheus_url`` (``--prometheus``, checked before anything runs) and its one number type: ``FiniteRange``, a ``click.FloatRange`` that refuses ``inf`` and ``nan`` (every float
option uses it: ``--cold-start inf`` was accepted and failed later with a message about an infinite trace)."""

from __future__ import annotations

import math
from typing import NoReturn

import click


class FiniteRange(click.FloatRange):
    """A finite float, optionally bounded as ``click.FloatRange`` bounds it; ``inf``, ``-inf`` and ``nan`` refused
    at parse time, naming what is accepted."""

    name = "float"

    def convert(self, value, param, ctx):
        number = click.FLOAT.convert(value, param, ctx) if not isinstance(value, float) else value
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number; accepted: {self._accepted()}", param, ctx)
        return super().convert(number, param, ctx)

    def _accepted(self) -> str:
        if self.min is None and self.max is None:
            return "a finite number"
        return f"a finite number in {self._describe_range()}"


PROMETHEUS_URL_FORM = "an http:// or https:// URL with a host, e.g. http://prometheus.monitoring:9090"


def prometheus_url(ctx, param, value: str | None) -> str | None:
    """``--prometheus``: an http(s) URL with a host (and a port that parses), refused before anything runs; the
    message shows it without user:password, query or fragment (``promerror.redact_url``)."""
    if value is None:
        return None
    from urllib.parse import urlparse

    from ..promerror import redact_url

    try:
        u = urlparse(value.strip())
        u.port  # noqa: B018 - a bad port or IPv6 literal raises here
    except ValueError:  # its text may quote a password read as a port: not shown
        raise click.BadParameter(f"{redact_url(value)} is not a URL (a bad port or IPv6 address); accepted: "
                                 f"{PROMETHEUS_URL_FORM}", ctx, param) from None
    if u.scheme not in ("http", "https") or not u.hostname:
        what = f"scheme {u.scheme!r}" if u.scheme and u.scheme not in ("http", "https") else "no http:// or https://"
        raise click.BadParameter(f"{redact_url(value) if u.hostname else 'the URL'} has {what}; accepted: "
                                 f"{PROMETHEUS_URL_FORM}", ctx, param)
    return value.strip()


def fail(msg: str) -> NoReturn:
    """A bad input: one clear line on stderr and exit code 2 (click's usage-error code)."""
    click.echo(f"Error: {msg}", err=True)
    raise SystemExit(2)
