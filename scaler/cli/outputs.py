"""Where a verb writes: its outputs checked before the run (alone and against each other), ``-`` for standard
output, and the JSON document written atomically."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from .clitypes import fail


def to_stdout(path) -> bool:
    """``--json -``: the document goes to standard output (and the human output to stderr)."""
    return path is not None and str(path) == "-"


def check_outputs(*outputs: tuple) -> bool:
    """Every output of a command, ``(path, flag)`` or ``(path, flag, "dir")``, checked before the run, alone
    (``check_output``) and against the others: one path for two outputs, a file inside (or equal to) a directory
    output, or two outputs on standard output are refused naming both. True when one goes to standard output (the
    human output then goes to stderr)."""
    given = [(o[0], o[1], len(o) > 2) for o in outputs if o[0] is not None]
    stdout = [flag for path, flag, d in given if not d and to_stdout(path)]
    if len(stdout) > 1:
        fail(f"{' and '.join(stdout)} both ask for standard output (-); accepted: at most one output on -, the "
             "others as files")
    seen: list[tuple[Path, str, bool]] = []
    for path, flag, d in given:
        if not d and to_stdout(path):
            continue
        real = Path(os.path.abspath(path))
        for other, oflag, odir in seen:
            if real == other or (odir and other in real.parents) or (d and real in other.parents):
                fail(f"{flag} {path} and {oflag} {other} are the same place; accepted: a different path for "
                     "each output (nothing was run)")
        seen.append((real, flag, d))
    for path, flag, d in given:
        check_output(path, flag, directory=d)
    return bool(stdout)


def check_output(path, flag: str, *, directory: bool = False) -> None:
    """Exit 2 before the run when an output cannot be written: a file (``-`` = stdout) or a directory.
    Missing parent directories are created, and a file is really created and removed there."""
    if path is None or (not directory and to_stdout(path)):
        return
    p = Path(path)
    if not directory and p.is_dir():
        fail(f"{flag} {p}: is a directory; accepted: a file path, or - for standard output")
    if directory and p.exists() and not p.is_dir():
        fail(f"{flag} {p}: exists and is not a directory; accepted: a directory (created if missing)")
    where = p if directory else p.parent
    try:
        where.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=where, prefix=".forescale-write-check-"):
            pass
    except OSError as e:
        fail(f"{flag} {p}: cannot write there ({e.strerror or e}); nothing was run")


def write_json(path: Path, doc: dict) -> None:
    write_text(path, json.dumps(doc, indent=2, allow_nan=False) + "\n", flag="--json")


def write_text(path: Path, text: str, *, flag: str = "--output") -> None:
    """``text`` to ``path`` atomically (a temporary file renamed), or to standard output for ``-``."""
    if to_stdout(path):
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as e:
        fail(f"{flag} {path}: cannot write ({e.strerror})")


# --------------------------------------------------------------------------- the replay's world (cluster, queue,
# scenarios, advice): backtest only; every default leaves the replay as it is without them
