"""The background-worker skeleton shared by the fit and tuning services (scaler.serve.worker)."""

from __future__ import annotations

import time

from concurrent.futures import ProcessPoolExecutor

import pytest

from scaler.serve.worker import SETTLE_SECONDS, Worker, cutoff, last_boundary, phase
from support.fakes import InlineExecutor

KEY = ("serving", "llm", "forescale-serving-llm.0123456789abcdef0123456789abcdef")


def test_boundaries_are_multiples_of_the_interval_plus_a_phase_from_the_identity():
    p = phase(KEY, 3600.0)
    assert p == phase(KEY, 3600.0) and 0 <= p < 3600 and p % 60 == 0  # the same in every replica, whole minutes
    others = {phase(("serving", f"so-{i}", "m"), 3600.0) for i in range(50)}
    assert len(others) > 25  # spread over the interval's 60 minutes
    # last_boundary: the latest k * interval + offset at or before now
    assert last_boundary(7200.0, 3600.0, 600.0) == 4200.0  # 1 x 3600 + 600
    assert last_boundary(4200.0, 3600.0, 600.0) == 4200.0  # on a boundary: that boundary
    assert last_boundary(4199.0, 3600.0, 600.0) == 600.0
    # cutoff: the latest boundary at least SETTLE_SECONDS (60) old
    b = last_boundary(1_700_000_000.0, 3600.0, p)
    assert cutoff(b + SETTLE_SECONDS - 1, 3600.0, KEY) == b - 3600  # not settled yet: the previous one
    assert cutoff(b + SETTLE_SECONDS, 3600.0, KEY) == b
    assert cutoff(b + 3600 + SETTLE_SECONDS - 1, 3600.0, KEY) == b


def test_schedule_keeps_a_key_busy_until_its_work_returns_and_honours_the_backoff():
    ran = []
    io = InlineExecutor()
    w = Worker(io, InlineExecutor(), lambda: InlineExecutor())

    def work(x):
        assert w.busy(KEY)  # busy while it runs
        ran.append(x)

    assert w.schedule(KEY, 0.0, lambda backing_off: work, 1) and ran[-1] == 1 and not w.busy(KEY)
    assert not w.schedule(KEY, 0.0, lambda backing_off: None)  # nothing due: nothing submitted
    # backoff: 60 s after one failure, 120 s after two in a row (the delay the service gives)
    assert w.failed(KEY, 100.0, lambda n: 60.0 * 2 ** (n - 1)) == 1
    seen = []
    w.schedule(KEY, 159.0, lambda backing_off: seen.append(backing_off))
    w.schedule(KEY, 160.0, lambda backing_off: seen.append(backing_off))
    assert seen == [True, False]
    assert w.failed(KEY, 160.0, lambda n: 60.0 * 2 ** (n - 1)) == 2
    w.schedule(KEY, 279.0, lambda backing_off: seen.append(backing_off))
    w.succeeded(KEY)
    w.schedule(KEY, 279.0, lambda backing_off: seen.append(backing_off))
    assert seen == [True, False, True, False]


def test_a_stopped_worker_submits_nothing():
    w = Worker(InlineExecutor(), InlineExecutor(), lambda: InlineExecutor())
    w.stop()
    assert not w.started and not w.schedule(KEY, 0.0, lambda backing_off: print)
    with pytest.raises(RuntimeError, match="service stopped"):
        w.run(int, 1)


def test_an_own_pool_is_made_at_start_and_its_processes_killed_at_stop():
    import multiprocessing

    w = Worker(InlineExecutor(), None, lambda: ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")))
    assert not w.started
    w.start()
    assert w.run(abs, -3) == 3
    procs = list(w.pool._processes.values())  # noqa: SLF001 - the processes this test watches
    w.stop()
    deadline = time.monotonic() + 10  # the pool's own manager thread may reap the child first: poll until seen
    for p in procs:
        while p.is_alive() and time.monotonic() < deadline:
            p.join(0.1)
        assert not p.is_alive()


# -- bounded runs (issue 40, item 14) --------------------------------------------------------------------------------
def _sleep(seconds):
    import time as _t

    _t.sleep(seconds)
    return {"slept": seconds}


def _grow(mib):
    import time as _t

    block = bytearray(mib << 20)  # touched: resident
    for i in range(0, len(block), 4096):
        block[i] = 1
    _t.sleep(30)
    return {"n": len(block)}


def test_a_bounded_run_gives_up_past_its_time_or_memory_and_the_pool_is_replaced():
    import multiprocessing
    import time as _t
    from concurrent.futures import ProcessPoolExecutor

    from scaler.serve.worker import GaveUp, Worker
    from support.fakes import InlineExecutor

    ctx = multiprocessing.get_context("fork")
    w = Worker(InlineExecutor(), None, lambda: ProcessPoolExecutor(1, mp_context=ctx))
    w.start()
    try:
        assert w.run(_sleep, 0.1, seconds=10.0, max_rss=1 << 30) == {"slept": 0.1}
        t0 = _t.monotonic()
        with pytest.raises(GaveUp, match="ran past 2s"):
            w.run(_sleep, 60, seconds=2.0)
        assert _t.monotonic() - t0 < 10  # not the 60 s the job wanted
        with pytest.raises(GaveUp, match="MiB, over its 100 MiB") as e:
            w.run(_grow, 300, max_rss=100 << 20)
        assert e.value.rss > 100 << 20
        assert w.run(_sleep, 0.1, seconds=10.0) == {"slept": 0.1}  # a fresh pool runs the next one
    finally:
        w.stop()
