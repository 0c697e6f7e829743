"""A fit's inputs made ahead (``prepare``): ``historical_forecasts`` prepares the next refit in a thread while the
one before it runs, and the fits and forecasts are the same as without.

Exact checks (no tolerance): preparing is the same deterministic arithmetic moved to another thread, and Stan is
deterministic for a given data file, init and seed.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from forecaster.base import InsufficientHistory, Series
from forecaster.evaluate import historical_forecasts
from forecaster.models import make
from forecaster.models import prophet as P
from forecaster.models.naive import NaiveForecaster
from support.forecasts import same

STEP = 300.0
T0 = 1_700_006_400.0  # a midnight (UTC)


def series(days: float, seed: int = 3) -> Series:
    n = int(days * 86400 / STEP)
    t = T0 + STEP * np.arange(n)
    rng = np.random.default_rng(seed)
    day = 2 * np.pi * (t - T0) / 86400
    return Series(t, (50 + 20 * np.sin(day)) * rng.lognormal(0, 0.05, n), STEP)


class Prepared:
    """A naive forecaster with ``prepare``: records where each fit's inputs came from."""

    name = "naive"

    def __init__(self, short: int = 0):
        self.inner = NaiveForecaster()
        self.short = short  # a window of fewer points than this has too little history
        self.fits: list[tuple[float, str]] = []  # (window end, "prepared" | "inline")
        self.prepare_threads: set[str] = set()
        self.fit_threads: set[str] = set()

    def prepare(self, s: Series):
        self.prepare_threads.add(threading.current_thread().name)
        return ("prepared", s, len(s))

    def fit(self, s: Series, *, warm_start=None, prepared=None):
        self.fit_threads.add(threading.current_thread().name)
        ok = prepared is not None and prepared[1] is s
        assert prepared is None or ok, "a prepared fit is handed only to the fit of its own series"
        self.fits.append((float(s.t[-1]), "prepared" if ok else "inline"))
        if len(s) < self.short:
            raise InsufficientHistory("short")
        return self.inner.fit(s)


class Plain:
    """A forecaster without ``prepare``: ``inner``'s fits (a naive one by default; ``short`` as ``Prepared``)."""

    name = "naive"

    def __init__(self, inner=None, short: int = 0):
        self.inner, self.short = inner or NaiveForecaster(), short

    def fit(self, s: Series, *, warm_start=None):
        if len(s) < self.short:
            raise InsufficientHistory("short")
        return self.inner.fit(s, warm_start=warm_start)


@pytest.mark.parametrize("short", [0, 150])
def test_each_refit_after_the_first_gets_its_inputs_made_ahead_in_another_thread(short):
    """Refits every 12 cutoffs over a day; with ``short`` the first windows have too little history (each cutoff
    then refits until one succeeds, so the refit made ahead for a failed fit's successor goes unused): the
    forecasts are the plain forecaster's, every refit after a successful one was prepared, in a thread of its
    own."""
    s = series(2.0)
    kw = dict(start=T0 + 86400.0, horizon=6, refit_every=12, train_window=0.5 * 86400.0, quantiles=(0.5,),
              fit_from=T0 + 86400.0 - 4 * 3600.0)
    if short:
        kw.update(train_window=None, fit_from=None, start=T0 + 140 * STEP)  # windows of 140.. points: 10 fail
    ahead = Prepared(short)
    got = historical_forecasts(ahead, s, fit_ahead=True, **kw)
    want = historical_forecasts(Plain(short=short), s, **kw)
    assert [c for c, _ in got] == [c for c, _ in want] and len(got) > 100
    assert all(same(a, b) for (_, a), (_, b) in zip(got, want))
    kinds = [k for _, k in ahead.fits]
    failed = max(0, short - 140)  # windows of 140..149 points fail, one refit a cutoff
    assert kinds[:failed + 1] == ["inline"] * (failed + 1)  # the first refit and the failed ones: nothing ahead
    assert kinds[failed + 1:] == ["prepared"] * (len(kinds) - failed - 1) and len(kinds) - failed - 1 >= 8
    assert ahead.prepare_threads == {n for n in ahead.prepare_threads if n.startswith("fit-inputs")}
    assert not ahead.prepare_threads & ahead.fit_threads


def test_without_fit_ahead_nothing_is_prepared():
    s = series(1.5)
    f = Prepared()
    historical_forecasts(f, s, start=T0 + 86400.0, horizon=4, refit_every=12, quantiles=(0.5,))
    assert f.prepare_threads == set() and {k for _, k in f.fits} == {"inline"}


@pytest.fixture(scope="module")
def week() -> Series:
    return series(7.0, seed=11)


def test_prophet_prepared_is_the_same_fit_bit_for_bit(week):
    """``fit(s, prepared=prepare(s))`` is ``fit(s)``; a prepared fit of another series object is not used."""
    m = make("prophet")
    part = Series(week.t[:-24], week.y[:-24], STEP)
    plain = m.fit(week)
    ahead = m.fit(week, prepared=m.prepare(week))
    other = m.fit(week, prepared=m.prepare(part))  # not this series: made again
    for f in (ahead, other):
        for name in ("k", "m", "sigma_obs", "start", "t_scale", "y_scale"):
            assert getattr(f.curve, name) == getattr(plain.curve, name), name
        for name in ("delta", "beta", "changepoints_t"):
            assert getattr(f.curve, name).tobytes() == getattr(plain.curve, name).tobytes(), name
        assert f.bands.values.tobytes() == plain.bands.values.tobytes()


def test_prophet_prepare_keeps_a_failure_for_fit(week):
    """Too little history: ``prepare`` returns (a thread's work must not raise where nobody waits), ``fit``
    raises the same error the plain fit does."""
    m = make("prophet")
    tiny = Series(week.t[:5], week.y[:5], STEP)
    p = m.prepare(tiny)
    assert isinstance(p.error, InsufficientHistory)
    with pytest.raises(InsufficientHistory, match="5 finite point"):
        m.fit(tiny, prepared=p)


def test_a_prophet_chain_prepared_ahead_is_the_chain_without(week, monkeypatch):
    """A day of warm-started Prophet refits every 2 h through ``historical_forecasts`` with ``fit_ahead``: the same
    forecasts as with ``prepare`` hidden (every input made inline), bit for bit."""
    kw = dict(start=float(week.t[-1]) - 86400.0 + STEP, horizon=12, refit_every=24, train_window=5 * 86400.0,
              quantiles=(0.5, 0.9), fit_ahead=True)
    m = make("prophet")
    made = []
    real = P.ProphetForecaster.prepare

    def counted(self, s):
        made.append(threading.current_thread().name)
        return real(self, s)

    monkeypatch.setattr(P.ProphetForecaster, "prepare", counted)
    got = historical_forecasts(m, week, **kw)
    # every refit's inputs: the first made inline by its fit, the 11 others ahead in the inputs' thread
    assert len(made) == 12 and sum(n.startswith("fit-inputs") for n in made) == 11
    want = historical_forecasts(Plain(m), week, **kw)
    assert len(made) == 12 + 12 and not any(n.startswith("fit-inputs") for n in made[12:])
    assert len(got) == len(want) == 288 - 11  # a day of cutoffs, less the last 11 (a 12-point horizon past the end)
    assert all(c1 == c2 and same(a, b) for (c1, a), (c2, b) in zip(got, want))


def test_the_replay_prepares_ahead_without_a_fit_cache_and_not_with_one(week, monkeypatch):
    """``run_model`` (the replay's model runs): with no fit cache the Prophet refits after the first are prepared in
    the inputs' thread; with one (the server's tuning), nothing is prepared ahead: a hit would waste it."""
    from scaler.replay.fitcache import FitCache
    from scaler.replay.forecasts import run_model

    made = []
    real = P.ProphetForecaster.prepare
    monkeypatch.setattr(P.ProphetForecaster, "prepare",
                        lambda self, s: made.append(threading.current_thread().name) or real(self, s))
    start = float(week.t[-1]) - 12 * 3600.0
    kw = dict(horizon=12, score_points=6, refit_every=24, history_seconds=5 * 86400.0, quantiles=(0.5, 0.9), q=0.9,
              level_seconds=0.0, accuracy=False)
    plain = run_model(week, "prophet", start, start + 12 * 3600.0, **kw)
    ahead = sum(n.startswith("fit-inputs") for n in made)
    assert plain.fits == 6 and ahead == 5  # 12 h of refits every 2 h: all but the first prepared ahead
    made.clear()
    cached = run_model(week, "prophet", start, start + 12 * 3600.0, fits=FitCache(), **kw)
    assert cached.fits == 6 and not any(n.startswith("fit-inputs") for n in made) and len(made) == 6
    assert all(same(a.forecast, b.forecast) for a, b in zip(plain.curves, cached.curves))
