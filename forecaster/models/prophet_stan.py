"""Stan's inputs for a Prophet fit built with numpy, for the models forescale builds (issue 26).

``Prophet.preprocess`` builds the same inputs through pandas (a copy of the
frame, ``pd.to_datetime``, a DataFrame per seasonality, a crosstab for the
component columns): 76 ms of a 0.29 s fit on 1,344 x 70 features, 6.4 s of
the 84 fits of a 7-day ``tune``. Here the same arithmetic runs on the arrays
in the same order of operations, so Stan reads the same doubles:
``tests/test_prophet_stan.py`` checks that the data file written from these
inputs is byte for byte the one written from Prophet's.

Only a model of the kind forescale constructs takes this path: linear growth,
``absmax`` scaling, additive seasonalities without conditions, no holidays,
no extra regressors, automatic changepoints. ``inputs_of`` returns None for
anything else, and the caller uses Prophet's own ``preprocess``.

``stan_json`` writes those inputs as Stan's data file, and ``rows_json`` the feature matrix's part of it,
reusing the text of the rows a refit shares with the fit before it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

NS = 1_000_000_000  # nanoseconds in a second
DAY_SECONDS = 24 * 60 * 60


@dataclass(frozen=True)
class Scales:
    """Prophet's scaling of a fit: the time axis (epoch seconds of t=0, seconds of t=1), y's scale, changepoints."""

    start: float
    t_scale: float
    y_scale: float
    changepoints_t: np.ndarray  # scaled time; [0.0] (Prophet's dummy) when there are none
    n_changepoints: int

    @staticmethod
    def of(m) -> "Scales":
        """The scales a Prophet object set in its own ``preprocess``."""
        return Scales(float(m.start.value) / 1e9, float(m.t_scale.value) / 1e9, float(m.y_scale),
                      np.asarray(m.changepoints_t, dtype=float).reshape(-1), len(m.changepoints))


def supported(m, df) -> bool:
    """Whether ``inputs_of`` builds this model's inputs (else Prophet's ``preprocess`` must)."""
    if getattr(m, "growth", None) != "linear" or getattr(m, "scaling", "absmax") != "absmax":
        return False
    if getattr(m, "holidays", None) is not None or getattr(m, "country_holidays", None) is not None:
        return False
    if getattr(m, "extra_regressors", None) or getattr(m, "changepoints", None) is not None:
        return False
    if getattr(m, "specified_changepoints", False) or getattr(m, "logistic_floor", False):
        return False
    for props in getattr(m, "seasonalities", {}).values():
        if props.get("condition_name") is not None or props.get("mode") != "additive":
            return False
    if list(df.columns) != ["ds", "y"] or str(df["ds"].dtype) != "datetime64[ns]":
        return False
    y = df["y"].to_numpy(dtype=float)
    ns = df["ds"].to_numpy().view("int64")
    return y.size >= 2 and bool(np.all(np.isfinite(y))) and bool(np.all(np.diff(ns) > 0))


def fourier(days: np.ndarray, period: float, order: int) -> np.ndarray:
    """Prophet's Fourier columns (sin, cos per order), in its order of operations: ``(i + 1) / period * (2 pi t)``."""
    x_t = np.pi * 2 * days
    out = np.empty((days.shape[0], 2 * order))
    for i in range(order):
        c = (i + 1) / period * x_t
        out[:, 2 * i] = np.sin(c)
        out[:, 2 * i + 1] = np.cos(c)
    return out


def inputs_of(m, df) -> tuple[dict, dict, Scales] | None:
    """(Stan's data, Prophet's default init, the scales) for ``df`` (columns ds, y), or None when not ``supported``.

    The same values as ``m.preprocess(df)`` and ``m.calculate_initial_params``:
    t = (ds - first) / (last - first); y / max|y|; changepoints at
    ``linspace(0, floor(0.8 T) - 1, n + 1).round()`` of the history (fewer
    when the history is short); Fourier features of the days since the epoch;
    the trend through the first and the last point.
    """
    if not supported(m, df):
        return None
    ns = df["ds"].to_numpy().view("int64")
    y = df["y"].to_numpy(dtype=float)
    n_rows = y.size
    span = ns[-1] - ns[0]
    t = (ns - ns[0]) / span if span else np.zeros(n_rows)  # a timedelta64 divided by one: both as doubles
    y_scale = float(np.abs(y).max()) or 1.0
    y_scaled = (y - 0.0) / y_scale

    hist_size = int(np.floor(n_rows * m.changepoint_range))
    n_cp = min(int(m.n_changepoints), hist_size - 1)
    if n_cp > 0:
        idx = np.linspace(0, hist_size - 1, n_cp + 1).round().astype(int)[1:]
        t_change = np.sort(t[idx])
    else:
        n_cp, t_change = 0, np.array([0])  # Prophet's dummy changepoint

    days = ns / NS / DAY_SECONDS
    cols, sigmas = [], []
    for props in m.seasonalities.values():
        cols.append(fourier(days, float(props["period"]), int(props["fourier_order"])))
        sigmas.extend([props["prior_scale"]] * (2 * int(props["fourier_order"])))
    additive = 1
    if not cols:  # Prophet's placeholder: one column of zeros, in no component
        cols, sigmas, additive = [np.zeros((n_rows, 1))], [1.0], 0
    x = np.hstack(cols) if len(cols) > 1 else cols[0]
    k_cols = x.shape[1]
    # keys in the order of Prophet's ``prepare_data``, so the data file is the same bytes
    data = {"T": n_rows, "S": len(t_change), "K": k_cols, "tau": m.changepoint_prior_scale, "trend_indicator": 0,
            "y": y_scaled, "t": t, "cap": np.zeros(n_rows), "t_change": t_change,
            "s_a": np.full(k_cols, additive, dtype=np.int64), "s_m": np.zeros(k_cols, dtype=np.int64), "X": x,
            "sigmas": sigmas}
    k = (y_scaled[-1] - y_scaled[0]) / (t[-1] - t[0]) if n_rows > 1 and t[-1] != t[0] else 0.0
    init = {"k": k, "m": y_scaled[0] - k * t[0], "delta": np.zeros_like(t_change, dtype=float),
            "beta": np.zeros(k_cols), "sigma_obs": 1.0}
    scales = Scales(float(ns[0]) / 1e9, float(span) / 1e9, y_scale, t_change.astype(float), n_cp)
    return data, init, scales


def stan_json(data: dict) -> bytes:
    """Stan's data file: JSON by msgspec (14x faster than ``json.dumps`` on Prophet's feature matrix; floats in
    the same shortest round-trip form, so Stan reads the same doubles)."""
    import msgspec

    return msgspec.json.encode(data, enc_hook=_plain)


class _RowTexts(threading.local):
    x: np.ndarray | None = None  # the last matrix
    texts: list | None = None  # its rows' texts


_rows = _RowTexts()


def rows_json(x: np.ndarray):
    """A matrix of doubles as it appears in ``stan_json``'s output (``msgspec.Raw``), each row's text reused from this
    thread's previous call where the row holds the same doubles: a refit's window of Fourier features is its
    predecessor's moved on by a few rows, and encoding them all was ~10 ms of a fit on 1,344 x 70. The rows shared
    with the last matrix are found as one block (the first row's place in it, then the block compared bit for bit);
    any other row is encoded (or reused from an equal row of this call). The same bytes (a test compares the
    files). Bounded: a thread keeps its last matrix and its rows' texts."""
    import msgspec

    x = np.ascontiguousarray(x)
    texts: list = [None] * len(x)
    last, before = _rows.x, _rows.texts
    if last is not None and len(x) and last.shape[1] == x.shape[1]:
        assert before is not None  # set together with ``last``
        bits, old = x.view(np.uint64), last.view(np.uint64)
        at = np.flatnonzero((old == bits[0]).all(axis=1))  # where the first row is in the last matrix
        if at.size:
            s = int(at[0])
            m = min(len(old) - s, len(bits))
            if np.array_equal(old[s:s + m], bits[:m]):
                texts[:m] = before[s:s + m]
    seen: dict[bytes, bytes] = {}
    for i in range(len(x)):
        if texts[i] is None:
            key = x[i].tobytes()
            text = seen.get(key)
            if text is None:
                text = seen[key] = msgspec.json.encode(x[i].tolist())
            texts[i] = text
    _rows.x, _rows.texts = x.copy(), texts
    return msgspec.Raw(b"[" + b",".join(texts) + b"]")


def _plain(obj: Any) -> Any:
    if isinstance(obj, (np.ndarray, np.generic)):
        return obj.tolist()
    raise NotImplementedError(f"cannot write {type(obj).__name__} to Stan's data file")
