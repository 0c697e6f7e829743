"""The probe itself: a timed cold start of a torch model, phase by phase.

``Probe(config).start()`` runs in a background thread (library use inside an
inference server); ``Probe(config).run()`` runs in the calling thread (the
CLI). ``state()`` answers at any time; ``report()`` once finished.

Clocks: every phase is timed with ``time.perf_counter``; on CUDA the device is
synchronised before a timer stops, so queued kernels and copies are inside the
phase that issued them.

Validation (the :class:`~scaler.probe.plan.Plan`) and module assembly live in ``plan``; the inference phases
(the first request, the warm-up, the figures after readiness) in ``inference``; the report's assembly and device
facts in ``facts``.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator

from . import inputs as inputs_mod
from . import pagecache, weights
from .config import ProbeConfig
from .errors import ProbeError
from .facts import build_report, device_facts as describe_device
from .inference import Inference, after_ready, warm_up
from .metrics import ProbeMetrics
from .plan import Plan, assemble, build_plan, main_dtype
from .report import SCHEMA, format_table, host_facts, now_iso, t_cold

if TYPE_CHECKING:
    from .server import ProbeServer

log = logging.getLogger("forescale.probe")
_IMPORT_SNIPPET = ("import time, json\nt = time.perf_counter()\nimport torch\n"
                   "print(json.dumps({'seconds': time.perf_counter() - t, 'torch': torch.__version__}))\n")


@dataclass(frozen=True)
class ProbeState:
    """What the probe is doing: ``state`` is pending, validating, preparing, a phase name, ready, failed or stopping."""

    state: str
    phase: str | None
    ready: bool
    healthy: bool
    reason: str | None
    phases: dict = field(default_factory=dict)
    t_cold_seconds: float | None = None

    def as_dict(self) -> dict:
        return {"state": self.state, "phase": self.phase, "ready": self.ready, "healthy": self.healthy,
                "reason": self.reason, "phases": dict(self.phases), "t_cold_seconds": self.t_cold_seconds}


class Probe:
    """A cold-start probe. Thread-safe to query while it runs."""

    def __init__(self, config: ProbeConfig | None = None, *, registry=None,
                 progress: Callable[[str, float | None], None] | None = None) -> None:
        self.config = (config or ProbeConfig()).validated()
        self.metrics = ProbeMetrics(self.config.model.display_name, registry)
        self._progress = progress
        self._lock = threading.Lock()
        self._state = "pending"
        self._phase: str | None = None
        self._reason: str | None = None
        self._ready, self._healthy = False, True
        self._phases: dict[str, float] = {}
        self._details: dict[str, dict] = {}
        self._report: dict | None = None
        self._model = None
        self._error: ProbeError | None = None
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._server: ProbeServer | None = None
        self._started_at: str | None = None
        self._serving: tuple | None = None  # (device, vocab size, max positions) once ready
        self._engine = None

    # ------------------------------------------------------------ public API

    def start(self) -> "Probe":
        """Run the probe in a background thread; returns at once."""
        if self._thread is not None or self._done.is_set():
            raise RuntimeError("a Probe runs once")
        self._thread = threading.Thread(target=self._run_safely, name="forescale-probe", daemon=True)
        self._thread.start()
        return self

    def run(self) -> dict:
        """Run in this thread; the report, or ProbeError (also for internal failures)."""
        if self._thread is not None or self._done.is_set():
            raise RuntimeError("a Probe runs once")
        self._run_safely()
        if self._error is not None:
            raise self._error
        assert self._report is not None
        return self._report

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the run finished (ready or failed); False on timeout."""
        return self._done.wait(timeout)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def ready(self) -> bool:
        return self._ready

    def state(self) -> ProbeState:
        with self._lock:
            total = t_cold(self._phases, self.config.image_pull_seconds, self.config.scheduling_seconds) \
                if self._ready else None
            reason = self._reason
            if reason is None and not self._ready:
                reason = f"cold start in progress ({self._state})" if self._state != "pending" else "not started"
            return ProbeState(self._state, self._phase, self._ready, self._healthy, reason, dict(self._phases), total)

    def report(self) -> dict | None:
        """The finished report (status "ok" or "failed"), or None while running."""
        return self._report if self._done.is_set() else None

    @property
    def error(self) -> ProbeError | None:
        return self._error

    @property
    def model(self):
        """The loaded, warmed torch module once ready (for an inference server to use), else None."""
        return self._model if self._ready else None

    def serve(self, host: str = "0.0.0.0", port: int = 8000, *, max_batch: int = 8, max_queue: int = 256,
              step_delay: float = 0.0):
        """Start the HTTP endpoints (health, /metrics, and POST /v1/completions once ready: the warmed model
        behind a queue of ``max_queue`` and batches of up to ``max_batch``) in a background thread."""
        from .server import ProbeServer

        self._server = ProbeServer(self, host, port, max_batch=max_batch, max_queue=max_queue,
                                   step_delay=step_delay).start()
        return self._server

    def completions(self, max_batch: int = 8, max_queue: int = 256, step_delay: float = 0.0):
        """The :class:`~scaler.probe.completions.Engine` serving the warmed model (started on first use), or
        None until ready (and after :meth:`release_model` or :meth:`mark_stopping`)."""
        from .completions import Engine

        with self._lock:
            if self._engine is None and self._ready and self._model is not None and self._serving is not None:
                device, vocab, positions = self._serving
                self._engine = Engine(self._model, device, vocab, positions, max_batch=max_batch,
                                      max_queue=max_queue, on_queue=self.metrics.set_queue,
                                      step_delay=step_delay).start()
            return self._engine

    def _stop_engine(self) -> None:
        with self._lock:
            engine, self._engine, self._serving = self._engine, None, None
        if engine is not None:
            engine.stop()

    def release_model(self) -> None:
        """Drop the loaded model (a sidecar keeps serving health and metrics without holding the weights)."""
        self._stop_engine()
        self._model = None
        import gc

        gc.collect()
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.empty_cache()

    def mark_stopping(self) -> None:
        """Shutting down: report not ready from now on."""
        with self._lock:
            self._ready = False
            self._state = "stopping"
            self._reason = "shutting down"
        self.metrics.set_ready(False)
        self.metrics.set_state("stopping")
        self._stop_engine()

    def close(self) -> None:
        self._stop_engine()
        if self._server is not None:
            self._server.stop()
            self._server = None

    def table(self) -> str:
        if self._report is None or self._report.get("status") != "ok":
            raise RuntimeError("no successful report")
        return format_table(self._report)

    # ------------------------------------------------------------ internals

    def _emit(self, what: str, seconds: float | None = None) -> None:
        if self._progress is not None:
            try:
                self._progress(what, seconds)
            except Exception:  # progress output must never fail the probe
                log.debug("progress callback failed", exc_info=True)

    def _set_state(self, state: str, phase: str | None = None) -> None:
        with self._lock:
            if self._state == "stopping":
                return
            self._state, self._phase = state, phase
        self.metrics.set_state(state)
        self._emit(state)

    def _record(self, phase: str, seconds: float, **details: Any) -> None:
        with self._lock:
            self._phases[phase] = seconds
            self._details.setdefault(phase, {}).update(details)
        self.metrics.set_phase(phase, seconds)
        self._emit(f"{phase} done", seconds)

    @contextmanager
    def _timed(self, phase: str, sync: Callable[[], None]) -> Iterator[dict]:
        self._set_state(phase, phase)
        details: dict = {}
        t0 = time.perf_counter()
        yield details
        sync()
        self._record(phase, time.perf_counter() - t0, **details)

    def _run_safely(self) -> None:
        self._started_at = now_iso()
        try:
            self._execute()
        except ProbeError as exc:
            self._fail(exc, healthy=True)
        except Exception as exc:
            if type(exc).__name__ == "OutOfMemoryError":  # torch's, on any device: a size problem, not a fault
                where = self._phase or self._state
                self._fail(ProbeError(f"out of memory during {where} ({str(exc).splitlines()[0] if str(exc) else ''})"
                                      "; accepted: a smaller model or --dtype float16/bfloat16, fewer tokens, or a "
                                      "device with more memory", param="--device"), healthy=True)
                return
            log.exception("probe failed")
            err = ProbeError(f"internal error in {self._phase or self._state}: {type(exc).__name__}: {exc}")
            err.exit_code = 1
            self._fail(err, healthy=False)
        finally:
            self._done.set()

    def _fail(self, exc: ProbeError, healthy: bool) -> None:
        with self._lock:
            self._error = exc
            self._ready, self._healthy = False, healthy
            failed_in = self._phase or self._state
            self._state, self._reason = "failed", f"{exc} (during {failed_in})"
            self._phase = None
            self._report = {"schema": SCHEMA, "status": "failed", "reason": str(exc), "failed_in": failed_in,
                            "started_at": self._started_at, "finished_at": now_iso(),
                            "model": {"name": self.config.model.display_name}, "phases": dict(self._phases),
                            "host": host_facts()}
        self.metrics.set_ready(False)
        self.metrics.set_state("failed")
        self._emit("failed")

    # -------------------------------------------------------------- the run

    def _execute(self) -> None:
        self._set_state("validating")
        plan = build_plan(self.config, self._set_state)
        import torch

        self.metrics.device = plan.device.type

        device = plan.device
        is_cuda = device.type == "cuda"

        def sync() -> None:
            if is_cuda:
                torch.cuda.synchronize(device)

        self._runtime_import()

        self._device_init(torch, device, is_cuda, sync)
        device_facts = describe_device(torch, device)
        self.metrics.set_info(device.type, device_facts["name"], plan.dtype_name, torch.__version__,
                              plan.model_facts.get("parameters") or 0)

        eviction, found, nbytes, module_dtype, model = self._load_weights(plan, sync, is_cuda)
        params = sum(p.numel() for p in model.parameters())

        # inference phases
        w = self.config.warmup
        cap = plan.max_tokens
        req_tokens = min(w.request_tokens, cap) if cap else w.request_tokens
        shallow_tokens = min(w.shallow_tokens, cap) if cap else w.shallow_tokens
        request = torch.tensor([inputs_mod.synthetic(req_tokens, plan.vocab_size, seed=1)], dtype=torch.long)

        run = Inference(torch, model, plan, device, sync, self.config.model.builtin)
        first_seconds = warm_up(run, self._timed, w, request, req_tokens, shallow_tokens)

        model_facts = dict(plan.model_facts, parameters=params, dtype=module_dtype, weights_tensor_bytes=nbytes,
                           tensors=len(found))
        self._model = model
        self._serving = (device, plan.vocab_size, plan.max_tokens)
        report = build_report(self.config, plan, phases_timed=self._phases, details=self._details,
                              started_at=self._started_at, model_facts=model_facts, device_facts=device_facts,
                              eviction=eviction, first_seconds=first_seconds, req_tokens=req_tokens,
                              shallow_tokens=shallow_tokens)
        with self._lock:
            self._report = report
        self.metrics.publish_report(report)
        self.metrics.set_info(device.type, device_facts["name"], module_dtype, torch.__version__, params)
        with self._lock:
            stopping = self._state == "stopping"
            if not stopping:
                self._ready, self._state, self._phase, self._reason = True, "ready", None, None
        if stopping:
            return
        self.metrics.set_ready(True)
        self.metrics.set_state("ready")
        self._emit("ready", report["t_cold_seconds"])

        # After readiness (not part of T_cold): steady-state timing and comparison figures. A failure here must
        # not undo readiness.
        try:
            after_ready(run, nbytes, report, self.config.load, lambda: run.steady(request, w.steady_requests),
                        self.metrics.publish_report)
        except Exception as exc:
            log.warning("probe: comparison figures after readiness failed: %s", exc)
            report["after_ready_error"] = f"{type(exc).__name__}: {exc}"
        report["finished_at"] = now_iso()
        self.metrics.publish_report(report)

    def _runtime_import(self) -> None:
        """runtime_import: a fresh interpreter starting and importing torch."""
        self._set_state("runtime_import", "runtime_import")
        t0 = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, "-c", _IMPORT_SNIPPET], capture_output=True, text=True,
                                  timeout=900)
        except subprocess.TimeoutExpired:
            raise ProbeError(f"runtime_import: `{sys.executable} -c 'import torch'` took over 900 s")
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise ProbeError(f"runtime_import: `{sys.executable} -c 'import torch'` failed: "
                             f"{proc.stderr.strip().splitlines()[-1:] or proc.returncode}")
        inner = json.loads(proc.stdout.strip().splitlines()[-1])["seconds"]
        self._record("runtime_import", wall, import_seconds=inner, interpreter_seconds=wall - inner,
                     python=sys.executable)

    def _device_init(self, torch, device, is_cuda: bool, sync: Callable[[], None]) -> None:
        """device_init: context creation + first allocation."""
        try:
            with self._timed("device_init", sync) as d:
                if is_cuda:
                    torch.cuda.init()
                    torch.cuda.set_device(device)
                first = torch.empty(1 << 20, dtype=torch.uint8, device=device)
                first.fill_(1)
                d["first_allocation_bytes"] = first.numel()
        except RuntimeError as exc:
            raise ProbeError(f"--device {self.config.device}: initialising {device} failed ({exc})", param="--device")
        del first

    def _load_weights(self, plan: Plan, sync: Callable[[], None], is_cuda: bool):
        """weights_read (disk -> host, cold when the eviction took), then weights_to_device (host -> device and the
        module's assembly): the eviction, the tensors found, their bytes, the module's dtype and the module."""
        eviction = pagecache.evict(plan.info.path, requested=self.config.load.evict)
        flag = "--weights" if not self.config.model.builtin else "--cache-dir"
        with self._timed("weights_read", sync) as d:
            host = weights.load(plan.info, flag=flag)
            d["bytes"] = plan.info.file_bytes
            d["format"] = plan.info.format
            d["page_cache"] = eviction.as_dict()
        found = {k: (str(t.dtype).removeprefix("torch."), tuple(t.shape)) for k, t in host.items()}
        nbytes = weights.tensor_bytes(host)
        module_dtype = plan.dtype_name if plan.dtype_name != "auto" else main_dtype(found)

        # weights_to_device: host -> device and module assembly
        with self._timed("weights_to_device", sync) as d:
            model, how = assemble(plan, host, found, self.config.load.h2d)
            d["bytes"] = nbytes
            d["mode"] = (self.config.load.h2d if how.startswith("built on meta") else "pageable") if is_cuda \
                else "copy (host memory)"
            d["assembly"] = how
            d["tensors"] = len(host)
        del host
        return eviction, found, nbytes, module_dtype, model
