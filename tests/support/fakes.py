"""Fakes for the serving parts' unit tests: a scripted Prometheus client and executors that run in the caller.

* ``FakePrometheus`` stands in for ``scaler.prom.PrometheusClient`` (what the
  registry, the fitter and the tuner call: ``scalar``, ``range``,
  ``range_series``). Answers are scripted per query -- a value, a function of
  time, a ``PromError`` to raise -- and every call is recorded. ``gate`` (an
  Event), when set on the fake, holds ``scalar`` calls until it is set.
  ``range_series`` is the product's own (``PrometheusClient.range_series``)
  applied to the fake's ``range``.
* ``InlineExecutor`` runs what is submitted at once, in the caller's thread
  (``before`` runs first: a hook to change the world mid-job).
* ``CannedPool`` answers every ``submit(fn, job)`` with a scripted result or
  exception without running ``fn``, and records the jobs (the tuner's sweep).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Executor, Future
from typing import Callable

import numpy as np

from scaler.prom import PrometheusClient, PromError, PromErrorKind


class FakePrometheus:
    def __init__(self) -> None:
        self._scalars: dict[str, object] = {}
        self._ranges: dict[str, object] = {}
        self._instants: dict[str, object] = {}
        self.calls: list[tuple] = []
        self.targets: list = []  # the PrometheusTarget of every client the factory built
        self.gate: threading.Event | None = None
        self._lock = threading.Lock()

    # -- scripting ---------------------------------------------------------------
    def set_scalar(self, query: str, answer) -> None:
        """``answer``: a float, a PromError (raised), or ``f(at) -> float``."""
        with self._lock:
            self._scalars[query] = answer

    def set_range(self, query: str, answer) -> None:
        """``answer``: ``f(t: ndarray) -> ndarray`` of rates (NaN: no sample there), a PromError (raised), or a raw
        matrix (list of ``{"metric", "values"}``) returned as it is."""
        with self._lock:
            self._ranges[query] = answer

    def factory(self) -> Callable:
        """A ``client_factory`` for ``Registry``: every client is this fake."""
        def make(target, credentials=None):
            self.targets.append(target)
            return self
        return make

    def calls_of(self, kind: str) -> list[tuple]:
        with self._lock:
            return [c for c in self.calls if c[0] == kind]

    # -- the client's interface ----------------------------------------------------
    def scalar(self, query: str, at: float | None = None, *, ignore_null: bool = True) -> float:
        with self._lock:
            self.calls.append(("scalar", query, at, ignore_null))
            answer = self._scalars.get(query)
            gate = self.gate
        if gate is not None:
            gate.wait(10)
        if answer is None:
            if ignore_null:
                return 0.0
            raise PromError(PromErrorKind.NO_DATA, f"query returned no series (ignoreNullValues=false): {query}")
        if isinstance(answer, Exception):
            raise answer
        return float(answer(at) if callable(answer) else answer)

    def range(self, query: str, start: float, end: float, step: float, *, one_series: bool = False) -> list[dict]:
        with self._lock:
            self.calls.append(("range", query, start, end, step))
            answer = self._ranges.get(query)
        if answer is None:
            return []
        if isinstance(answer, Exception):
            raise answer
        if isinstance(answer, list):
            return answer
        t = np.arange(start, end + step / 2, step)
        y = np.asarray(answer(t), dtype=float)
        values = [[float(ti), repr(float(yi))] for ti, yi in zip(t, y) if np.isfinite(yi)]
        return [{"metric": {}, "values": values}] if values else []

    range_series = PrometheusClient.range_series

    def instant(self, query: str, at: float | None = None, *, one_series: bool = False,
                max_bytes: int = 0) -> list[dict]:
        """The scripted vector of ``set_instant`` (default: none), recorded."""
        with self._lock:
            self.calls.append(("instant", query, at))
            answer = self._instants.get(query, [])
        if isinstance(answer, Exception):
            raise answer
        return answer

    def set_instant(self, query: str, answer) -> None:
        """``answer``: a vector (list of ``{"metric", "value"}``) or a PromError (raised) for ``instant``."""
        with self._lock:
            self._instants[query] = answer


class InlineExecutor(Executor):
    def __init__(self, before: Callable[[], None] | None = None):
        self.before = before
        self.submitted: list[tuple] = []
        self._shut = False

    def submit(self, fn, /, *args, **kwargs) -> Future:
        if self._shut:
            raise RuntimeError("cannot schedule new futures after shutdown")
        self.submitted.append((fn, args))
        if self.before is not None:
            self.before()
        f: Future = Future()
        try:
            f.set_result(fn(*args, **kwargs))
        except BaseException as e:  # noqa: BLE001 - handed to the future, as a pool does
            f.set_exception(e)
        return f

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._shut = True


class CannedPool(Executor):
    def __init__(self, answer, before: Callable[[], None] | None = None):
        self.answer = answer  # a result, or an exception to raise from .result()
        self.before = before
        self.jobs: list = []

    def submit(self, fn, /, *args, **kwargs) -> Future:
        self.jobs.append(args[0] if args else None)
        if self.before is not None:
            self.before()
        f: Future = Future()
        if isinstance(self.answer, BaseException):
            f.set_exception(self.answer)
        else:
            f.set_result(self.answer)
        return f

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        pass


def wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    """Poll ``predicate`` until it holds; AssertionError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(0.005)


class Harness:
    """A ``Registry`` on a ``FakePrometheus`` and a ``FakeClock``, with the background services a test gives.

    ``metadata(**over)`` is the trigger's metadata (the test's defaults, overridden); ``workload(**over)``
    the tracked workload for it (ScaledObject serving/llm); ``sample(name, **labels)`` one exported value.
    """

    NAMESPACE, NAME = "serving", "llm"

    def __init__(self, clock, prom: FakePrometheus, metadata: dict, *, metrics=None, config=None, forecasts=None,
                 tuning=None, watch=None):
        from scaler.prom import CredentialStore
        from scaler.serve.metrics import ScalerMetrics
        from scaler.serve.registry import Registry, RegistryConfig

        self.clock, self.prom, self.base = clock, prom, dict(metadata)
        self.metrics = metrics or ScalerMetrics()
        self.services = [s for s in (forecasts, tuning) if s is not None]
        self.reg = Registry(clock, CredentialStore(None), self.metrics, config or RegistryConfig(),
                            forecasts=forecasts, tuning=tuning, client_factory=prom.factory(), watch=watch)

    def metadata(self, **over) -> dict:
        return {**self.base, **over}

    def workload(self, **over):
        return self.reg.workload(self.NAMESPACE, self.NAME, self.metadata(**over))

    def sample(self, name: str, **labels) -> float | None:
        return sample_value(self.metrics.registry, name,
                            {"namespace": self.NAMESPACE, "scaledobject": self.NAME, **labels})

    def poll(self, seconds: float = 60.0, **over):
        """The clock ``seconds`` on, a scheduler tick and the refresh it started done, then KEDA's call: the
        decision served and recorded. Returns ``(workload, decision)``."""
        self.clock.advance(seconds)
        wl = self.workload(**over)
        self.reg.tick()
        wait_for(lambda: not wl.refreshing and wl.observed_at == self.clock())
        d = self.reg.decision(wl)
        self.reg.record(wl, d)
        return wl, d

    def close(self) -> None:
        self.reg.stop()
        for s in self.services:
            s.stop()


def sample_value(registry, name: str, labels: dict) -> float | None:
    """A sample of a trigger's series by its labels without ``trigger`` (the metadata digest's label): the one
    such series' value; None when there is none. Two triggers matching is an AssertionError (ambiguous)."""
    exact = registry.get_sample_value(name, labels)
    if exact is not None:
        return exact
    found = [s.value for fam in registry.collect() for s in fam.samples
             if s.name == name and "trigger" in s.labels
             and {k: v for k, v in s.labels.items() if k != "trigger"} == labels]
    assert len(found) <= 1, f"{name}{labels}: {len(found)} triggers match; name the trigger"
    return found[0] if found else None


def signed(state_dir, doc: dict) -> str:
    """``doc`` as ``JsonStore`` writes it: with its HMAC under the state dir's key (``files.load_key``: made there
    when absent), for tests that write state files by hand."""
    import json

    from scaler.serve.files import load_key, sign

    body = json.dumps(doc, allow_nan=False, sort_keys=True).encode()
    return json.dumps({**doc, "hmac": sign(load_key(None, state_dir), body)})
