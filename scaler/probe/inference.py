"""The probe's inference phases: the model's forward on the probe's device as every phase calls it (``Inference``),
the first request and the tiered warm-up (``warm_up``: first_inference, warmup_shallow, warmup_deep,
warmup_concurrent, the last phases of T_cold), and after readiness the steady-state timing and the comparison
figures (``after_ready``: host -> device bandwidth, a raw read of the weights; not part of T_cold).

Each phase is timed by the runner's ``timed(phase, sync)`` (``runner.Probe``), handed in: this module keeps no
state of the probe.
"""

from __future__ import annotations

import threading
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Callable

from . import inputs as inputs_mod
from . import pagecache, transfer, weights
from .config import LoadSpec, WarmupSpec
from .errors import ProbeError
from .facts import steady_facts
from .plan import Plan
from .report import throughput

H2D_SAMPLE_MAX = 1 << 30
Timed = Callable[[str, Callable[[], None]], AbstractContextManager[dict]]  # a phase's timer, its details yielded


@dataclass(frozen=True)
class Inference:
    """``model`` on ``device``: one request (``infer``), and a failure of the user's module named as theirs
    (``call``). ``builtin``: the built-in model, whose own failure is an internal error."""

    torch: Any
    model: Any
    plan: Plan
    device: Any
    sync: Callable[[], None]
    builtin: bool

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    def infer(self, ids, stream=None) -> None:
        torch = self.torch
        with torch.inference_mode():
            if stream is None:
                self.model(ids.to(self.device))
                self.sync()
            else:  # concurrent requests on CUDA: one stream each
                with torch.cuda.stream(stream):
                    self.model(ids.to(self.device))
                stream.synchronize()

    def call(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except ProbeError:
            raise
        except self.torch.OutOfMemoryError as exc:
            raise ProbeError(f"out of memory on {self.device} running {self.plan.label} ({exc}); accepted: a smaller "
                             "model, --dtype float16/bfloat16, or fewer tokens (--request-tokens, "
                             "--max-input-tokens)", param="--device")
        except Exception as exc:
            if self.builtin:
                raise
            raise ProbeError(f"--module {self.plan.label}: forward(input_ids) failed ({type(exc).__name__}: {exc}); "
                             "accepted: a module whose forward takes a LongTensor of token ids shaped "
                             "[batch, tokens]", param="--module")

    def steady(self, request, n: int) -> list[float]:
        """The seconds of ``n`` requests one after the other."""
        latencies = []
        for _ in range(n):
            t0 = time.perf_counter()
            self.call(lambda: self.infer(request))
            latencies.append(time.perf_counter() - t0)
        return latencies


def warm_up(run: Inference, timed: Timed, w: WarmupSpec, request, req_tokens: int, shallow_tokens: int) -> float:
    """first_inference, then the tiered warm-up (shallow, deep, concurrent); the first request's seconds."""
    torch, plan = run.torch, run.plan
    with timed("first_inference", run.sync) as d:
        t0 = time.perf_counter()
        run.call(lambda: run.infer(request))
        first_seconds = time.perf_counter() - t0
        d["tokens"] = req_tokens

    with timed("warmup_shallow", run.sync) as d:
        for i in range(w.shallow_requests):
            ids = torch.tensor([inputs_mod.synthetic(shallow_tokens, plan.vocab_size, seed=100 + i)])
            run.call(lambda: run.infer(ids))
        d.update(requests=w.shallow_requests, tokens=shallow_tokens)

    with timed("warmup_deep", run.sync) as d:
        if w.delay_seconds:
            time.sleep(w.delay_seconds)
        for req in plan.deep.requests:
            ids = torch.tensor([req], dtype=torch.long)
            run.call(lambda: run.infer(ids))
        d.update(plan.deep.describe())

    with timed("warmup_concurrent", run.sync) as d:
        _concurrent(run, w.concurrency, req_tokens, plan.vocab_size)
        d.update(threads=w.concurrency, tokens=req_tokens)
    return first_seconds


def _concurrent(run: Inference, n: int, tokens: int, vocab: int) -> None:
    torch = run.torch
    barrier = threading.Barrier(n)
    errors: list[BaseException] = []
    streams = [torch.cuda.Stream(run.device) if run.is_cuda else None for _ in range(n)]

    def worker(i: int) -> None:
        ids = torch.tensor([inputs_mod.synthetic(tokens, vocab, seed=200 + i)])
        try:
            barrier.wait(timeout=60)
            run.call(lambda: run.infer(ids, streams[i]))
        except BaseException as exc:  # re-raised in the probe thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,), name=f"forescale-probe-c{i}") for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def after_ready(run: Inference, nbytes: int, report: dict, load: LoadSpec, steady: Callable[[], list[float]],
                publish: Callable[[dict], None]) -> None:
    """The steady-state latencies (``steady``), then the comparison figures, into ``report`` (``publish``ed once the
    latencies are in): the host -> device bandwidth on CUDA, a raw read of the weights file with ``load.raw_read``."""
    torch, plan, device = run.torch, run.plan, run.device
    inf = report["inference"]
    inf["steady"] = steady_facts(steady())
    p50 = inf["steady"]["p50_seconds"]
    inf["first_request_penalty"] = inf["first_seconds"] / p50 if p50 > 0 else None
    publish(report)
    tp = report["throughput"]
    if device.type == "cuda":
        sample = max(16 << 20, min(nbytes, H2D_SAMPLE_MAX))
        tp["h2d"] = transfer.h2d_bandwidth(device, sample)
        torch.cuda.empty_cache()
    if load.raw_read:
        ev = pagecache.evict(plan.info.path, requested=load.evict)
        t0 = time.perf_counter()
        n = weights.raw_read(plan.info.path)
        tp["raw_read"] = throughput(n, time.perf_counter() - t0)
        tp["load_vs_raw_ratio"] = tp["weights_read"]["bytes_per_second"] / tp["raw_read"]["bytes_per_second"]
        pc = report["page_cache"]
        pc["raw_read"] = ev.as_dict()
        first = pc["weights_read"]
        pc["comparable"] = bool(first["evicted"] and ev.evicted) or (
            first["resident_before"] is not None and ev.resident_before is not None
            and min(first["resident_before"], ev.resident_before) >= 0.98)
