"""The fit cache of the server's daily tuning (``replay.fitcache``, ``serve.tuning.run_job``): real Prophet fits.

Two consecutive server-style jobs on one synthetic trace (5-min steps, a daily cycle with noise), with:
history 3 d, simulated span 2 d, refit 2 h (24 steps), so an aligned warm-start chain is 12 refits = 1 day
(``forecasts.chain_steps``) and each job fetches history + span + 1 d = 6 d (``tuning.fetch_seconds``).

Each fit reads the 3 days before its cutoff, inside the fetched data. Job d ends at T1 = D + 6 h (D a UTC midnight, days A = D - 2 d, B = D - 1 d, C = D): its span is
[A 06:00, C 06:00). Its fits: the chain of day A from A 00:00 (00, 02, 04: made before the span, not forecast
from), A 06..22 (9), all of B 00..22 (12), C 00, 02, 04 (3): 27 fits per model.
Job d+1 ends a day later: span [B 06:00, D' 06:00) with D' = C + 1 d. Its fits: B's chain from B 00:00 (12),
C 00..22 (12), D' 00, 02, 04 (3) = 27 per model, of which B 00..22 and C 00, 02, 04 (15) read the same
3-day windows as job d's and follow the same warm-start chains: 15 hits per model, 12 new fits.
The models of the families used (reactive, predictive, oracle): prophet alone (the server's job keeps no
accuracy table, so the table's baselines seasonal_naive and linear_trend are not fitted): 15 hits, 12 new fits.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from scaler.replay.fitcache import ENTRY_OVERHEAD, FitCache, config_key, fit_key
from scaler.serve.tuning import TuningJob, fetch_seconds, run_job

DAY, HOUR, STEP = 86400.0, 3600.0, 300.0
MIDNIGHT = 19676 * DAY  # 2023-11-15T00:00Z
C_DAY = MIDNIGHT + 6 * DAY  # day C of the docstring
HISTORY, SPAN = 3 * DAY, 2 * DAY
MODELS = 1  # prophet (see the docstring)


def trace() -> tuple[np.ndarray, np.ndarray]:
    t = np.arange(MIDNIGHT, MIDNIGHT + 8 * DAY, STEP)
    rng = np.random.default_rng(7)
    y = 50 + 30 * np.sin(2 * np.pi * t / DAY) + rng.normal(0, 3, t.size)
    return t, np.maximum(y, 0.0)


def job(end: float, y_change: tuple[float, float] | None = None) -> TuningJob:
    t, y = trace()
    keep = (t >= end - fetch_seconds(HISTORY, SPAN)) & (t < end)
    t, y = t[keep], y[keep].copy()
    if y_change is not None:
        y[np.searchsorted(t, y_change[0])] = y_change[1]
    return TuningJob("synthetic", t, y, STEP, qps_per_replica=5.0, cold_start_seconds=180.0, buffer_seconds=105.0,
                     model="prophet", history_seconds=HISTORY, refit_seconds=2 * HOUR, span_seconds=SPAN,
                     tolerance=0.1, activation_threshold=0.0, target_miss=0.01, max_cost_ratio=None,
                     families=("reactive", "predictive", "oracle"))


DAY_D = job(C_DAY + 6 * HOUR)
DAY_D1 = job(C_DAY + DAY + 6 * HOUR)


@pytest.fixture(scope="module")
def warmed():
    """Job d run on an empty cache, and the cache afterwards."""
    cache = FitCache()
    out = run_job(DAY_D, fits=cache)
    return cache, out


def same_selection(a: dict, b: dict) -> None:
    # the same fits give the same replay: equal in practice; 1e-12 relative states the claim's tolerance
    assert a["label"] == b["label"] and a["settings"] == b["settings"]
    assert a["miss"] == pytest.approx(b["miss"], rel=1e-12, abs=1e-15)
    assert a["cost_ratio"] == pytest.approx(b["cost_ratio"], rel=1e-12)


def test_the_job_fetches_history_before_the_first_chain_of_the_span():
    # 3 d history + 2 d span + 1 d (the longest chain): 6 d; the jobs here get exactly that
    assert fetch_seconds(HISTORY, SPAN) == 6 * DAY
    assert DAY_D.t[-1] + STEP - DAY_D.t[0] == 6 * DAY


def test_the_next_days_job_reuses_the_fits_of_the_overlap(warmed):
    cache, first = warmed
    assert first["fits_reused"] == 0 and first["cache"]["misses"] == 27 * MODELS  # 27 fits a model, all new
    assert len(cache) == 27 * MODELS
    size = cache.bytes
    second = run_job(DAY_D1, fits=cache)
    assert second["fits_reused"] == 15 * MODELS  # the docstring's 15 a model
    assert second["cache"]["hits"] == 15 * MODELS and second["cache"]["misses"] == 12 * MODELS
    # the run dropped job d's fits it cannot use (A's chain: cutoffs before A 06:00 first, then A 06..22, unused):
    # the cache holds this run's 27 a model
    assert len(cache) == 27 * MODELS and second["cache"]["dropped"] == 12 * MODELS
    assert cache.group_bytes("synthetic") == cache.bytes > 0.8 * size
    # the same job on a cache that keeps nothing: the same selection, every fit made
    fresh = run_job(DAY_D1, fits=FitCache(max_bytes=0))
    assert fresh["fits_reused"] == 0 and fresh["fits"] == second["fits"]
    same_selection(second, fresh)


def test_a_changed_data_point_misses_every_fit_that_reads_it(warmed):
    cache, _ = warmed
    probe = cache.copy()  # job d's fits (and, when the test before ran, job d+1's: the same 6 hits either way)
    # one point changed at B 10:00: the fits at B 00..10 (6) do not read it (they see t < cutoff); every fit
    # from B 12:00 on reads it in its 3-day window: 6 hits a model instead of 15
    changed = job(C_DAY + DAY + 6 * HOUR, y_change=(C_DAY - DAY + 10 * HOUR, 500.0))
    out = run_job(changed, fits=probe)
    assert out["fits_reused"] == 6 * MODELS


def test_the_key_names_the_window_the_configuration_and_the_chain():
    t, y = trace()
    cfg = config_key("prophet", 0, 1800.0, 0.9, (), 6)
    k = fit_key(cfg, t[:100], y[:100], STEP, None)
    assert k == fit_key(cfg, t[:100].copy(), y[:100].copy(), STEP, None)
    y2 = y[:100].copy()
    y2[50] = np.nextafter(y2[50], np.inf)  # one ulp
    others = {fit_key(cfg, t[:100], y2, STEP, None), fit_key(cfg, t[1:101], y[1:101], STEP, None),
              fit_key(config_key("prophet", 0, 0.0, 0.9, (), 6), t[:100], y[:100], STEP, None),
              fit_key(cfg, t[:100], y[:100], STEP, k)}
    assert k not in others and len(others) == 4


def test_the_cache_is_bounded_first_come_first_kept_and_drops_dead_and_stale_fits(warmed):
    cache, _ = warmed
    # a Prophet fit (3 d at 5 min: daily seasonality only) is a few KB: its parameters and its band table
    sizes = [e.nbytes for e in cache.entries() if e.fitted is not None and e.fitted.model == "prophet"]
    assert 2_000 < min(sizes) and max(sizes) < 40_000
    # one fit stored under several keys: every entry has the same size, its pickled size + the overhead
    f = next(e.fitted for e in cache.entries() if e.fitted is not None and e.fitted.model == "prophet")
    fits = [f] * 8
    each = len(pickle.dumps(f, protocol=pickle.HIGHEST_PROTOCOL)) + ENTRY_OVERHEAD
    c = FitCache(max_bytes=3 * each)
    with c.run("a", end=10 * DAY):
        for i in range(5):
            c.put(bytes([i]), "ok", fits[i], cutoff=9 * DAY + i * HOUR)
    # room for 3: the first 3 kept, the 2 that came after refused
    assert c.bytes == 3 * each and len(c) == 3 and c.refused == 2
    assert c.get(bytes([4])) is None and c.get(bytes([0])) is not None
    held = len(c)
    # another workload a day later finds no room: a's fits keep their place
    with c.run("b", end=11 * DAY):
        c.put(bytes([10]), "ok", fits[5], cutoff=10 * DAY)
    assert c.group_bytes("b") == 0 and len(c) == held
    # a's next run drops its fits of cutoffs before keep_from first (0 and 1: 9 d and 9 d 1 h < 9 d 1.5 h), which
    # makes room for its new ones; afterwards the ones it did not use (3, if it was held) go too
    with c.run("a", end=11 * DAY, keep_from=9 * DAY + 1.5 * HOUR):
        assert c.get(bytes([2])) is not None
        c.put(bytes([6]), "ok", fits[6], cutoff=10 * DAY)
        c.put(bytes([7]), "ok", fits[7], cutoff=10 * DAY + HOUR)
    assert {e.cutoff for e in c.entries()} == {9 * DAY + 2 * HOUR, 10 * DAY, 10 * DAY + HOUR}
    assert c.bytes <= c.max_bytes
    # a is not run for more than stale_seconds (3 d): b's run may drop it when it needs the room
    with c.run("b", end=15 * DAY):
        c.put(bytes([11]), "ok", fits[5], cutoff=14 * DAY)
    assert c.group_bytes("a") == 0 and c.group_bytes("b") > 0 and len(c) == 1
    # an entry larger than the whole bound is not stored; the entry bound holds too
    tiny = FitCache(max_bytes=100)
    tiny.put(b"x", "ok", fits[0], cutoff=0.0)
    assert len(tiny) == 0 and tiny.bytes == 0 and tiny.refused == 1
    two = FitCache(max_entries=2)
    for i in range(4):
        two.put(bytes([i]), "ok", fits[i], cutoff=float(i))
    assert len(two) == 2 and two.get(bytes([0])) is not None and two.get(bytes([3])) is None
    with pytest.raises(ValueError, match="bounds must be >= 0"):
        FitCache(max_bytes=-1)
