"""One CmdStan ``optimize`` run of a compiled model, the command line cmdstanpy builds, without its per-run work.

A warm Prophet refit spends ~11 ms of Python in ``CmdStanModel.optimize`` besides CmdStan itself (issue 26,
round 7): its run set and temporary files, writing the init through its JSON encoder, and reading the result CSV,
whose header names Prophet's ~1,400 ``trend`` entries one by one (~1,400 ``munge_varname`` calls a fit). A
replay refits on a chain, one fit after the other, so that time is on the chain's path. Here the same
arguments go to the same binary: ``random seed=S data file=D init=I output file=O refresh=R method=optimize
algorithm=A [tolerances] iter=N`` (cmdstanpy 1.3's order), the init is written with the data's JSON writer (the
same doubles) and only the named parameters are read from the CSV's last line (CmdStan writes them with its
default 6 significant digits; ``float`` parses them as cmdstanpy does). A run that exits non-zero raises
``RuntimeError``, as cmdstanpy's ``optimize`` does, with the end of CmdStan's output (bounded).
``tests/forecaster/test_cmdstan.py`` checks the parameters against cmdstanpy's, bit for bit.
"""

from __future__ import annotations

import os
import subprocess
from typing import Callable, Sequence

import numpy as np

MAX_MESSAGE = 600  # characters of CmdStan's output kept in an error


def optimize(exe: str, *, data: str, init: dict, seed: int, algorithm: str, iterations: int, refresh: int,
             stop: dict, workdir: str, params: Sequence[str], write_json: Callable[[dict], bytes]) -> dict:
    """CmdStan's optimum: ``{name: 1-D array}`` for each of ``params`` (a model's parameters by name)."""
    init_path, out = os.path.join(workdir, "init.json"), os.path.join(workdir, "output.csv")
    with open(init_path, "wb") as fh:
        fh.write(write_json(init))
    cmd = [exe, "random", f"seed={int(seed)}", "data", f"file={data}", f"init={init_path}", "output",
           f"file={out}", f"refresh={int(refresh)}", "method=optimize", f"algorithm={algorithm.lower()}",
           *(f"{k}={v}" for k, v in stop.items()), f"iter={int(iterations)}"]
    proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          env=os.environ, check=False)
    if proc.returncode != 0:
        text = proc.stdout.decode("utf-8", "replace").strip()
        raise RuntimeError(f"CmdStan optimize ({algorithm}) exited with {proc.returncode}: "
                           f"{text[-MAX_MESSAGE:] or 'no output'}")
    return read_optimum(out, params)


def read_optimum(path: str, params: Sequence[str]) -> dict:
    """The named parameters of an optimize CSV (its header and one row of values, after ``#`` comments)."""
    with open(path, "rb") as fh:
        rows = [ln for ln in fh.read().decode("utf-8", "replace").splitlines() if ln and not ln.startswith("#")]
    if len(rows) < 2:
        raise RuntimeError(f"CmdStan wrote no optimum to {os.path.basename(path)}")
    names, values = rows[0].split(","), rows[-1].split(",")
    if len(names) != len(values):
        raise RuntimeError(f"CmdStan's output has {len(names)} columns and {len(values)} values")
    wanted = set(params)
    found: dict[str, list[float]] = {p: [] for p in params}
    for name, value in zip(names, values):
        base = name.split(".", 1)[0]
        if base in wanted:
            found[base].append(float(value))
    missing = [p for p, v in found.items() if not v]
    if missing:
        raise RuntimeError(f"CmdStan's output lacks {', '.join(missing)}")
    return {p: np.asarray(v, dtype=float) for p, v in found.items()}
