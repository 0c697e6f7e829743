"""The capacity model file: what one replica of a model on given hardware serves, as a function of the mix.

``forescale loadtest --grid-input 128,1024,4096 --grid-output 64,256`` finds, at each grid point (mean prompt
length ``i`` and answer length ``o``, in tokens), the highest request rate that meets the TTFT/ITL SLO (the
knee), and fits them with this model (chosen because it is the token budget ``scaler.tokens`` already acts on,
plus a ceiling)::

    capacity(i, o) = min( Q, T / (w x i + o) )        requests/s per replica

``T``: weighted tokens/s (prefill and decode together), ``w``: what a prompt token costs in generated tokens,
``Q``: the request rate no mix exceeds (scheduling, batch slots). Capacity never rises with either length
(``w >= 0``). ``l = w x i + o`` is a request's weighted length; the model is defined on the lengths the grid
measured, ``[l_min, l_max]``: a mix outside them is clamped to the nearest (``TokenCapacity.clamp``), never
extrapolated.

**The fit.** For each ``w`` on a log grid (0 and 1e-4 .. 1e3, then refined around the best) and each split of
the points by ``l`` into a short, request-bound part (``Q`` = the geometric mean of their knees) and a long,
token-bound part (``T`` = the geometric mean of ``knee x l``), the model's log error over every point is
summed; the least is kept. Its **fit error** is the largest ``|model / knee - 1|`` over the points, stated in
the file. With no request-bound point ``Q`` is the model's capacity at ``l_min`` (it then never binds).

**In the scaler's unit** (``token_capacity``): the knees are at the SLO; the model in force is the fit times
``1 - margin`` (as ``recommended_qps_per_replica`` of a rate test): ``requests_per_replica = Q (1 - margin)``,
``tokens_per_replica = T (1 - margin)``, the same ``w`` and lengths: the one binding load of ``scaler.tokens``.

The file (JSON, ``schema: forescale.capacity/v1``)::

    schema, forescale_version, model (the served model), hardware (what it ran on), measured_at, url
    form           the formula above, as text
    slo            {ttft_seconds, itl_seconds, latency_seconds, percentile}
    margin         the safety margin of the recommendation
    fit            {requests_per_second: Q, tokens_per_second: T, input_weight: w, max_error, rms_error}
    recommended    {qps_per_replica, tokens_per_replica, input_token_weight}: the fit x (1 - margin)
    lengths        {input: [lo, hi], output: [lo, hi], weighted: [l_min, l_max]}
    points         [{input_tokens, output_tokens, capacity_rps, fitted_rps, error, ...}]

Pure: no I/O but ``read`` (one bounded file).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from .tokens import TokenCapacity

SCHEMA = "forescale.capacity/v1"
FORM = "capacity_rps = min(requests_per_second, tokens_per_second / (input_weight x input_tokens + output_tokens))"
MAX_BYTES = 1 << 20  # a capacity file is a few KiB; more is not one
MAX_POINTS = 400
HINT = "accepted: the file written by `forescale loadtest URL --grid-input ... --grid-output ... --capacity-model PATH`"


class CapacityModelError(ValueError):
    """A capacity model that cannot be used: the message names the file, the value and what is accepted."""


@dataclass(frozen=True)
class Point:
    """One grid point: the mean prompt and answer tokens measured and the knee (req/s at the SLO)."""

    input_tokens: float
    output_tokens: float
    capacity_rps: float
    detail: dict = field(default_factory=dict, compare=False, hash=False)  # the step's figures, for the file


@dataclass(frozen=True)
class Fit:
    requests_per_second: float  # Q
    tokens_per_second: float  # T
    input_weight: float  # w
    max_error: float  # max |model / knee - 1| over the points
    rms_error: float

    def capacity(self, weighted_length: np.ndarray) -> np.ndarray:
        ell = np.asarray(weighted_length, dtype=np.float64)
        return np.minimum(self.requests_per_second, self.tokens_per_second / ell)


@dataclass(frozen=True)
class CapacityModel:
    model: str  # the served model, e.g. meta-llama/Llama-3.1-8B-Instruct
    hardware: str  # e.g. 1x NVIDIA H100 80GB
    fit: Fit
    margin: float
    lengths: tuple[float, float]  # weighted tokens per request measured, [l_min, l_max]
    inputs: tuple[float, float] = (0.0, 0.0)  # prompt tokens measured, [lo, hi]
    outputs: tuple[float, float] = (0.0, 0.0)  # answer tokens measured, [lo, hi]
    points: tuple[Point, ...] = ()
    extra: dict = field(default_factory=dict, compare=False, hash=False, repr=False)  # slo, url, measured_at, ...

    def weighted_length(self, input_tokens, output_tokens) -> np.ndarray:
        return self.fit.input_weight * np.asarray(input_tokens, dtype=np.float64) + np.asarray(output_tokens,
                                                                                              dtype=np.float64)

    def capacity_rps(self, input_tokens, output_tokens, *, margin: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """``(req/s per replica, clamped)`` at the mean lengths given: the model on the weighted length held within
        the measured ones (``clamped``: where it was outside them); with ``margin``, the recommendation."""
        ell = self.weighted_length(input_tokens, output_tokens)
        held = np.clip(ell, *self.lengths)
        cap = self.fit.capacity(held) * ((1.0 - self.margin) if margin else 1.0)
        return cap, held != ell

    def token_capacity(self) -> TokenCapacity:
        """The model in the scaler's unit (the fit x (1 - margin)): ``scaler.tokens``' binding load acts on it."""
        k = 1.0 - self.margin
        return TokenCapacity(self.fit.tokens_per_second * k, self.fit.input_weight,
                             requests_per_replica=self.fit.requests_per_second * k, lengths=self.lengths)

    @property
    def qps_per_replica(self) -> float:
        """The recommended qpsPerReplica (the HPA target): the request ceiling x (1 - margin)."""
        return self.fit.requests_per_second * (1.0 - self.margin)

    def describe(self) -> str:
        f = self.fit
        return (f"{self.model} on {self.hardware}: min({f.requests_per_second:.4g} req/s, "
                f"{f.tokens_per_second:.4g} / ({f.input_weight:.4g} x input + output)) per replica, fit error "
                f"{100 * f.max_error:.1f} % on {len(self.points)} points, lengths {self.lengths[0]:.4g}-"
                f"{self.lengths[1]:.4g} weighted tokens/request, margin {self.margin:g}")


# ----------------------------------------------------------------------------------------------- the fit


def _best_split(ell: np.ndarray, logc: np.ndarray) -> tuple[float, float, float]:
    """For weighted lengths ``ell`` (sorted ascending) and log knees: ``(loss, log Q, log T)`` of the best split."""
    n = len(ell)
    logl = np.log(ell)
    best = (math.inf, math.nan, math.nan)
    for s in range(n):  # the first s points request-bound (s = 0: none), at least one token-bound
        logt = float(np.mean(logc[s:] + logl[s:]))
        logq = float(np.mean(logc[:s])) if s else logt - float(logl[0])
        model = np.minimum(logq, logt - logl)
        loss = float(np.sum((model - logc) ** 2))
        if loss < best[0] - 1e-15:
            best = (loss, logq, logt)
    return best


def _loss_at(w: float, i: np.ndarray, o: np.ndarray, logc: np.ndarray) -> tuple[float, float, float]:
    ell = w * i + o
    order = np.argsort(ell, kind="stable")
    return _best_split(ell[order], logc[order])


def fit(points: Sequence[Point]) -> Fit:
    """The model through the grid's knees (module docstring); CapacityModelError for a grid it cannot fit."""
    pts = list(points)
    for p in pts:
        for name, v in (("input_tokens", p.input_tokens), ("output_tokens", p.output_tokens),
                        ("capacity_rps", p.capacity_rps)):
            if not (math.isfinite(v) and v > 0):
                raise CapacityModelError(f"grid point ({p.input_tokens:.4g}, {p.output_tokens:.4g}): {name} "
                                         f"{v!r}; accepted: a finite number > 0")
    if len({round(p.input_tokens, 6) for p in pts}) < 2 or len({round(p.output_tokens, 6) for p in pts}) < 2:
        raise CapacityModelError(f"{len(pts)} grid point(s) with a knee: fitting the model needs at least two "
                                 "prompt lengths and two answer lengths with a measured capacity (e.g. --grid-input "
                                 "128,1024 --grid-output 64,256)")
    i = np.array([p.input_tokens for p in pts])
    o = np.array([p.output_tokens for p in pts])
    c = np.array([p.capacity_rps for p in pts])
    logc = np.log(c)
    grid = np.concatenate([[0.0], np.geomspace(1e-4, 1e3, 281)])
    losses = [_loss_at(w, i, o, logc)[0] for w in grid]
    k = int(np.argmin(losses))
    lo, hi = grid[max(0, k - 1)], grid[min(len(grid) - 1, k + 1)]
    fine = np.unique(np.concatenate([np.linspace(lo, hi, 201), [grid[k]]]))
    results = [(_loss_at(w, i, o, logc), w) for w in fine]
    (loss, logq, logt), w = min(results, key=lambda x: (x[0][0], x[1]))
    q, t = math.exp(logq), math.exp(logt)
    err = np.minimum(q, t / (w * i + o)) / c - 1.0
    return Fit(q, t, float(w), float(np.max(np.abs(err))), float(np.sqrt(np.mean(err ** 2))))


def model_of(points: Sequence[Point], *, model: str, hardware: str, margin: float, extra: dict | None = None
             ) -> CapacityModel:
    """Fit ``points`` and hold the lengths they span."""
    f = fit(points)
    ell = [f.input_weight * p.input_tokens + p.output_tokens for p in points]
    return CapacityModel(model, hardware, f, margin, (min(ell), max(ell)),
                         (min(p.input_tokens for p in points), max(p.input_tokens for p in points)),
                         (min(p.output_tokens for p in points), max(p.output_tokens for p in points)),
                         tuple(points), dict(extra or {}))


# ----------------------------------------------------------------------------------------------- the file


def document(m: CapacityModel, *, version: str) -> dict:
    f = m.fit
    k = 1.0 - m.margin
    fitted = m.fit.capacity(m.weighted_length([p.input_tokens for p in m.points], [p.output_tokens for p in m.points]))
    return {
        "schema": SCHEMA, "forescale_version": version, "model": m.model, "hardware": m.hardware,
        **{key: m.extra[key] for key in ("measured_at", "url") if key in m.extra},
        "form": FORM, "slo": m.extra.get("slo"), "margin": m.margin,
        "fit": {"requests_per_second": f.requests_per_second, "tokens_per_second": f.tokens_per_second,
                "input_weight": f.input_weight, "max_error": f.max_error, "rms_error": f.rms_error},
        "recommended": {"qps_per_replica": f.requests_per_second * k, "tokens_per_replica": f.tokens_per_second * k,
                        "input_token_weight": f.input_weight},
        "lengths": {"input": list(m.inputs), "output": list(m.outputs), "weighted": list(m.lengths)},
        "points": [{"input_tokens": p.input_tokens, "output_tokens": p.output_tokens, "capacity_rps": p.capacity_rps,
                    "fitted_rps": float(v), "error": float(v / p.capacity_rps - 1.0), **p.detail}
                   for p, v in zip(m.points, fitted)],
    }


def _cut(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _number(d: Any, key: str, where: str, *, lo: float = 0.0, lo_open: bool = True, hi: float = 1e12) -> float:
    v = d.get(key) if isinstance(d, dict) else None
    ok = (not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)
          and (v > lo if lo_open else v >= lo) and v <= hi)
    if not ok:
        bound = f"{'>' if lo_open else '>='} {lo:g}"
        raise CapacityModelError(f"{where}: {key} is {_cut(v)}; accepted: a finite number {bound} and <= {hi:g}"
                                 + ("" if v is not None else f" ({key} missing)"))
    assert isinstance(v, (int, float))
    return float(v)


def _pair(d: Any, key: str, where: str) -> tuple[float, float]:
    v = d.get(key) if isinstance(d, dict) else None
    if (not isinstance(v, list) or len(v) != 2 or any(isinstance(x, bool) or not isinstance(x, (int, float))
                                                      or not math.isfinite(x) or x < 0 for x in v) or v[0] > v[1]):
        raise CapacityModelError(f"{where}: lengths.{key} is {_cut(v)}; accepted: [lo, hi], finite, 0 <= lo <= hi")
    return float(v[0]), float(v[1])


def parse(doc: Any, where: str, *, expect_model: str | None = None) -> CapacityModel:
    """A ``forescale.capacity/v1`` document -> CapacityModel; CapacityModelError naming ``where`` and the value."""
    if not isinstance(doc, dict):
        raise CapacityModelError(f"{where}: a JSON {type(doc).__name__}, not an object; {HINT}")
    if doc.get("schema") != SCHEMA:
        raise CapacityModelError(f"{where}: schema {_cut(doc.get('schema'))}, expected {SCHEMA!r}; {HINT}")
    names = {}
    for key in ("model", "hardware"):
        v = doc.get(key)
        if not isinstance(v, str) or not v.strip() or len(v) > 256 or not v.isprintable():
            raise CapacityModelError(f"{where}: {key} is {_cut(v)}; accepted: the name of the served model and the "
                                     "hardware it was measured on (printable text, at most 256 characters)")
        names[key] = v.strip()
    if expect_model is not None and names["model"] != expect_model:
        raise CapacityModelError(f"{where}: measured on model {_cut(names['model'])} ({names['hardware']}), not on "
                                 f"{_cut(expect_model)}; accepted: the capacity file of the model this workload "
                                 "serves")
    f = doc.get("fit")
    margin = _number(doc, "margin", where, lo_open=False, hi=0.99)
    q = _number(f, "requests_per_second", f"{where}: fit")
    t = _number(f, "tokens_per_second", f"{where}: fit")
    w = _number(f, "input_weight", f"{where}: fit", lo_open=False, hi=1000)
    err = _number(f, "max_error", f"{where}: fit", lo_open=False, hi=1e6)
    rms = _number(f, "rms_error", f"{where}: fit", lo_open=False, hi=1e6)
    lengths = doc.get("lengths")
    ell = _pair(lengths, "weighted", where)
    if ell[0] <= 0:
        raise CapacityModelError(f"{where}: lengths.weighted is {_cut(list(ell))}; accepted: [lo, hi] with lo > 0")
    rec = doc.get("recommended")
    for key, want in (("qps_per_replica", q * (1 - margin)), ("tokens_per_replica", t * (1 - margin)),
                      ("input_token_weight", w)):
        got = _number(rec, key, f"{where}: recommended", lo_open=key != "input_token_weight", hi=1e12)
        if not math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-12):
            raise CapacityModelError(f"{where}: recommended.{key} is {got:.6g}, but the fit and the margin give "
                                     f"{want:.6g}; accepted: the file as loadtest wrote it (edit the fit, not the "
                                     "recommendation)")
    points = _points(doc.get("points", []), where)
    extra = {k: doc[k] for k in ("slo", "url", "measured_at", "forescale_version") if k in doc}
    return CapacityModel(names["model"], names["hardware"], Fit(q, t, w, err, rms), margin, ell,
                         _pair(lengths, "input", where), _pair(lengths, "output", where), points, extra)


def _points(raw: Any, where: str) -> tuple[Point, ...]:
    if not isinstance(raw, list) or len(raw) > MAX_POINTS:
        raise CapacityModelError(f"{where}: points is {_cut(raw)[:40]}; accepted: a list of at most {MAX_POINTS} "
                                 "grid points")
    out = []
    for n, p in enumerate(raw):
        at = f"{where}: points[{n}]"
        out.append(Point(_number(p, "input_tokens", at), _number(p, "output_tokens", at),
                         _number(p, "capacity_rps", at)))
    return tuple(out)


def loads(text: str | bytes, where: str, *, expect_model: str | None = None) -> CapacityModel:
    """The model in ``text`` (the file's content)."""
    if len(text) > MAX_BYTES:
        raise CapacityModelError(f"{where}: {len(text)} bytes; accepted: a capacity file of at most "
                                 f"{MAX_BYTES // 1024} KiB")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise CapacityModelError(f"{where}: not UTF-8 text; {HINT}") from None
    if not text.strip():
        raise CapacityModelError(f"{where}: empty; {HINT}")
    try:
        doc = json.loads(text, parse_constant=lambda c: float(c))
    except json.JSONDecodeError as e:
        raise CapacityModelError(f"{where}: not JSON ({e.msg} at line {e.lineno}); {HINT}") from None
    return parse(doc, where, expect_model=expect_model)


def read(path: str | os.PathLike, flag: str = "--capacity-model", *, expect_model: str | None = None) -> CapacityModel:
    """The model in the file at ``path`` (at most ``MAX_BYTES``), errors naming ``flag`` and the file."""
    where = f"{flag} {os.fspath(path)}"
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_BYTES + 1)
    except OSError as e:
        raise CapacityModelError(f"{where}: cannot be read ({e.strerror or e}); {HINT}") from None
    return loads(raw, where, expect_model=expect_model)
