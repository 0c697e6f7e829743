"""How ``forescale probe`` ends and writes its report, shared by the probe command (``cli``) and ``probe --watch``
(``watch``): a failure as a click exit with its code, the JSON report to a file or stdout."""

from __future__ import annotations

import json
import os

import click

from .errors import ProbeError


class ProbeFailed(click.ClickException):
    """Exit 2 for a bad input or a failed probe (1 for an internal error)."""

    def __init__(self, exc: ProbeError | str) -> None:
        super().__init__(str(exc))
        self.exit_code = getattr(exc, "exit_code", 2)  # type: ignore[misc]  # click's is a class attribute


def write_json(path: str, report: dict) -> None:
    text = json.dumps(report, indent=2, sort_keys=False) + "\n"
    if path == "-":
        click.echo(text, nl=False)
        return
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        raise ProbeFailed(f"--json {path}: cannot write the report ({exc.strerror or exc})")
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
