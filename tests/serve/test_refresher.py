"""The refresher's accounting is exception-proof (issue 40, item 1) and its shares are per host:port and per
namespace (item 4): every exception type, raised at every step of a refresh, gives the slot back; a host:port
spelled 32 ways is one host."""

from __future__ import annotations

import asyncio
import threading

import pytest

from scaler.policy import Reason
from scaler.prom import CredentialStore, PromError, PromErrorKind
from scaler.serve.metrics import ScalerMetrics
from scaler.serve.registry import Registry, RegistryConfig
from support.clock import FakeClock
from support.fakes import FakePrometheus, wait_for

T0 = 1_700_000_400.0
Q, COLD = "sum(rate(req_total[2m]))", "max(forescale_cold_start_seconds)"
SHARED = "http://prom.test:9090"

EXCEPTIONS = [ValueError("Forbidden control character"), RuntimeError("boom"), TypeError("bad"), KeyError("k"),
              OSError(5, "EIO"), MemoryError(), PromError(PromErrorKind.UNREACHABLE, "down"),
              asyncio.CancelledError()]  # CancelledError is a BaseException: only a finally catches it


class Raising(FakePrometheus):
    """Raises ``exc`` from the step named ``step`` for ScaledObjects named ``bad-*``."""

    def __init__(self, step: str, exc: BaseException):
        super().__init__()
        self.step, self.exc = step, exc
        self.set_scalar(Q, 4.0)
        self.set_scalar(COLD, 30.0)

    def factory(self):
        prom = self

        def make(target, credentials=None):
            bad = "bad" in dict(target.query_parameters).get("who", "")

            class Client:
                def scalar(self, query, at=None, *, ignore_null=True):
                    if bad and ((prom.step == "observe" and query == Q) or (prom.step == "cold_start" and query == COLD)):
                        raise prom.exc
                    return FakePrometheus.scalar(prom, query, at, ignore_null=ignore_null)
            return Client()
        return make


class RaisingMetrics(ScalerMetrics):
    """``prom_errors.labels`` raises for the bad triggers: the export after the result is written."""

    def __init__(self, exc: BaseException):
        super().__init__()
        real, self.exc = self.prom_errors, exc

        class Labels:
            def labels(_, *values):
                if values[1].startswith("bad"):
                    raise exc
                return real.labels(*values)
        self.prom_errors = Labels()


def md(who: str, **over) -> dict:
    return {"serverAddress": SHARED, "query": Q, "qpsPerReplica": "1", "mode": "reactive", "hpaTolerance": "0",
            "queryParameters": f"who={who}", **over}


@pytest.mark.parametrize("exc", EXCEPTIONS, ids=lambda e: type(e).__name__)
@pytest.mark.parametrize("step", ["observe", "cold_start", "export"])
def test_every_exception_at_every_step_gives_the_slot_back(step, exc):
    clock = FakeClock(T0)
    prom = Raising(step, exc)
    metrics = RaisingMetrics(exc) if step == "export" else ScalerMetrics()
    if step == "export":  # the export runs after an error only: the bad triggers' query fails
        prom.step, prom.exc = "observe", PromError(PromErrorKind.UNREACHABLE, "down")
    # one slot for the shared Prometheus: a single leaked slot would starve the victim for good
    config = RegistryConfig(refresh_seconds=5.0, first_wait_seconds=2.0, per_target_refreshes=1)
    reg = Registry(clock, CredentialStore(None), metrics, config, client_factory=prom.factory())
    try:
        for i in range(8):  # eight bad triggers, each with a coldStartQuery, refreshed twice
            wl = reg.workload("chaos", f"bad-{i}", md(f"bad-{i}", coldStartQuery=COLD))
            assert wl.first_done.is_set() and not wl.refreshing
        clock.advance(5)
        reg.tick()
        wait_for(lambda: reg.refresher.in_flight() == 0)
        assert reg.refresher.gate.namespaces() == {}
        victim = reg.workload("chaos", "victim", md("victim"))
        d = reg.decision(victim)
        assert (d.planned, d.reason) == (4.0, Reason.MODE_REACTIVE)
    finally:
        reg.stop()


def tarpit_factory():
    """(held, release, a client factory): clients for a 'tarpit' address (any case) hold their caller (one entry in
    ``held`` each) until ``release`` is set; every other address answers 4.0 to Q."""
    prom = FakePrometheus()
    prom.set_scalar(Q, 4.0)
    held: list[int] = []
    release = threading.Event()

    def factory(target, credentials=None):
        class Client:
            def scalar(self, query, at=None, *, ignore_null=True):
                if "tarpit" in target.server_address.lower():
                    held.append(1)
                    release.wait(10)
                return FakePrometheus.scalar(prom, query, at, ignore_null=ignore_null)
        return Client()
    return held, release, factory


def test_one_host_port_under_many_spellings_is_one_share():
    """256 triggers on one never-answering host:port under 32 path spellings (the issue's attack) hold 8 refresh
    slots, not 256; a victim on another Prometheus is refreshed at once."""
    clock = FakeClock(T0)
    held, release, factory = tarpit_factory()
    reg = Registry(clock, CredentialStore(None), ScalerMetrics(), RegistryConfig(first_wait_seconds=0.2),
                   client_factory=factory)
    try:
        for i in range(256):
            host = "TARPIT.test" if i % 2 else "tarpit.test."
            reg.workload("attacker", f"t-{i}", md(f"t{i}", serverAddress=f"http://{host}:9999/p{i % 32}"), wait=False)
        wait_for(lambda: len(held) == 8)
        assert reg.refresher.in_flight() == 8  # per_target_refreshes: one host:port
        victim = reg.workload("victims", "v", md("v", serverAddress="http://good.test:9090"))
        assert reg.decision(victim).planned == 4.0
        reg.tick()
        assert len(held) == 8  # the others stay due, holding no thread
    finally:
        release.set()
        reg.stop()


def test_one_namespace_holds_at_most_its_share_of_refreshes():
    """32 tarpit hosts in one namespace: per_namespace_refreshes (here 16) slots, the other namespaces unaffected."""
    clock = FakeClock(T0)
    held, release, factory = tarpit_factory()
    reg = Registry(clock, CredentialStore(None), ScalerMetrics(),
                   RegistryConfig(first_wait_seconds=0.2, io_workers=32, per_namespace_refreshes=16),
                   client_factory=factory)
    try:
        for i in range(64):
            reg.workload("attacker", f"t-{i}", md(f"t{i}", serverAddress=f"http://tarpit-{i % 32}.test:9999"),
                         wait=False)
        wait_for(lambda: len(held) == 16)
        for i in range(8):
            v = reg.workload(f"team-{i}", "v", md("v", serverAddress=f"http://good-{i}.test:9090"))
            assert reg.decision(v).planned == 4.0
        assert len(held) == 16 and reg.refresher.gate.namespaces() == {"attacker": 16}
    finally:
        release.set()
        reg.stop()


def test_refreshes_per_host_port_are_rate_limited():
    """per_target_qps 10: 50 triggers on one Prometheus (their first refreshes are not counted: a new trigger is
    never kept waiting for a token) are refreshed again 10 in the next second, the rest waiting in line for tokens
    (one every 0.1 s of the clock), oldest first, holding no thread."""
    clock = FakeClock(T0)
    prom = FakePrometheus()
    prom.set_scalar(Q, 4.0)
    reg = Registry(clock, CredentialStore(None), ScalerMetrics(),
                   RegistryConfig(first_wait_seconds=0.0, per_target_qps=10.0), client_factory=prom.factory())
    try:
        wls = [reg.workload("serving", f"so-{i}", md(f"so{i}"), wait=False) for i in range(50)]
        wait_for(lambda: reg.refresher.in_flight() == 0 and all(w.first_done.is_set() for w in wls))
        assert len(prom.calls_of("scalar")) == 50
        clock.advance(5.0)  # every trigger due again
        reg.tick()
        wait_for(lambda: reg.refresher.in_flight() == 0)
        assert len(prom.calls_of("scalar")) == 60  # the bucket's burst: one second's worth
        with reg.changed:
            assert reg.refresher.waiting() == 40
        clock.advance(1.0)  # 10 more tokens
        reg.tick()
        wait_for(lambda: reg.refresher.in_flight() == 0)
        assert len(prom.calls_of("scalar")) == 70
        assert sorted(w.attempted_at for w in wls).count(T0 + 5.0) == 10  # the oldest ten went first
    finally:
        reg.stop()


def test_tarpit_fits_and_cold_start_queries_leave_other_triggers_refits_running():
    """Issue 40, item 4, the background services: 6 triggers with coldStartFrom: cluster on one never-answering
    host:port took the fit service's 2 and the cold-start service's 4 I/O threads (0 other fits in 150 s). Now each
    service gives a host:port (and a namespace) a share of its threads: a victim elsewhere is fitted, its cold start
    queried, while the tarpit holds its share."""
    from scaler.serve.fitting import FIT_IO_PER_TARGET, FitService
    from support.fakes import InlineExecutor

    import numpy as np

    clock = FakeClock(T0)
    release = threading.Event()
    prom = FakePrometheus()
    prom.set_scalar(Q, 4.0)
    prom.set_range(Q, lambda t: np.full(t.shape, 40.0))
    hung: list[str] = []

    def factory(target, credentials=None):
        class Client:
            def scalar(self, query, at=None, *, ignore_null=True):
                return FakePrometheus.scalar(prom, query, at, ignore_null=ignore_null)

            def range(self, query, start, end, step, *, one_series=False):
                if "tarpit" in target.server_address:
                    hung.append(query)
                    release.wait(20)
                return FakePrometheus.range(prom, query, start, end, step, one_series=one_series)

            range_series = FakePrometheus.range_series

            def instant(self, query, at=None, *, one_series=False, max_bytes=0):  # the cold-start query
                if "tarpit" in target.server_address:
                    hung.append(query)
                    release.wait(20)
                return []
        return Client()

    metrics = ScalerMetrics()
    fits = FitService(clock, metrics, pool=InlineExecutor())
    fits.start()
    reg = Registry(clock, CredentialStore(None), metrics, RegistryConfig(first_wait_seconds=0.2), forecasts=fits,
                   client_factory=factory)
    fit_md = {"mode": "forecastAndScale", "model": "naive", "history": "2h", "minHistory": "1h",
              "refitInterval": "10m", "levelCorrection": "0", "tuning": "off"}
    cluster = {"coldStartFrom": "cluster", "coldStartWorkload": "Deployment/llm"}
    try:
        for i in range(6):
            reg.workload("attacker", f"t-{i}", md(f"t{i}", serverAddress="http://tarpit.test:9999", **fit_md,
                                                  **cluster), wait=False)
        reg.tick()
        wait_for(lambda: len(hung) == FIT_IO_PER_TARGET + 2)  # 2 fits, 2 cold-start queries: their shares
        victim = reg.workload("victims", "v", md("v", serverAddress="http://good.test:9090", **fit_md, **cluster))
        reg.tick()
        wait_for(lambda: victim.forecast.forecast is not None and victim.cluster_cold is not None)
        assert victim.forecast.model == "naive" and reg.decision(victim).reason is Reason.FORECAST
        assert len(hung) == FIT_IO_PER_TARGET + 2  # the other tarpit work stays due, holding no thread
    finally:
        release.set()
        reg.stop()
        fits.stop()


def test_a_new_triggers_first_refresh_goes_ahead_of_the_queue():
    """A host:port at its 8 slots with 20 refreshes in line: a new trigger's first refresh (its first call waits for
    it, at most first_wait_seconds) goes to the front of the line, not behind the 20: it starts with the first slot
    that frees (before the change it was the 29th)."""
    clock = FakeClock(T0)
    release = threading.Event()
    prom = FakePrometheus()
    prom.set_scalar(Q, 4.0)
    order: list[str] = []

    def factory(target, credentials=None):
        who = dict(target.query_parameters)["who"]

        class Client:
            def scalar(self, query, at=None, *, ignore_null=True):
                order.append(who)
                release.wait(10)
                return FakePrometheus.scalar(prom, query, at, ignore_null=ignore_null)
        return Client()

    reg = Registry(clock, CredentialStore(None), ScalerMetrics(), RegistryConfig(first_wait_seconds=0.0),
                   client_factory=factory)
    try:
        for i in range(28):
            reg.workload("serving", f"so-{i}", md(f"so{i}"), wait=False)
        wait_for(lambda: len(order) == 8)
        with reg.changed:
            assert reg.refresher.waiting() == 20
        reg.workload("serving", "new", md("new"), wait=False)
        release.set()
        wait_for(lambda: len(order) == 29)
        # the 8 held, then whatever the first freed slots start: "new" first of them (threads may enter the fake
        # in a slightly different order than they were started: within the next 8)
        assert 8 <= order.index("new") < 16
    finally:
        release.set()
        reg.stop()
