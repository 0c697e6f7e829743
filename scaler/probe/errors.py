"""The probe's one error type: a message a user can act on."""

from __future__ import annotations


class ProbeError(Exception):
    """A bad input or an environment the probe cannot run in.

    ``param`` names the flag at fault (``--weights``, ``--device`` ...) when
    there is one; the CLI turns the error into exit code 2 with that flag
    named, and a serving probe reports the message as the not-ready reason.
    """

    exit_code = 2

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param

    def __str__(self) -> str:  # the message alone, the flag is in it
        return self.message


class ProbeReportError(ProbeError, ValueError):
    """A file that is not a usable probe report (``read_cold_start``)."""
