"""The probe itself: a timed cold start of a torch model, phase by phase.

``Probe(config).start()`` runs in a background thread (library use inside an
inference server); ``Probe(config).run()`` runs in the calling thread (the
CLI). ``state()`` answers at any time; ``report()`` once finished.

Clocks: every phase is timed with ``time.perf_counter``; on CUDA the device is
synchronised before a timer stops, so queued kernels and copies are inside the
phase that issued them.
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
from typing import Any, Callable, Iterator

from . import inputs as inputs_mod
from . import pagecache, weights
from .config import ProbeConfig, parse_device, parse_dtype, parse_model_size
from .errors import ProbeError
from .metrics import ProbeMetrics
from .report import (PHASES, SCHEMA, format_table, host_facts, now_iso, percentile, predictions, t_cold,
                     throughput, FORMULA)

log = logging.getLogger("forescale.probe")
H2D_SAMPLE_MAX = 1 << 30
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


@dataclass
class _Plan:
    """Everything validation resolved, before any timed phase."""

    device: Any
    dtype_name: str
    info: weights.WeightsInfo
    factory: Callable[..., Any]
    factory_kwargs: dict
    label: str
    meta_ok: bool
    expected_dtype: str | None
    vocab_size: int
    max_tokens: int | None
    deep: inputs_mod.WarmupSet
    model_facts: dict


class Probe:
    """A cold-start probe. Thread-safe to query while it runs."""

    def __init__(self, config: ProbeConfig | None = None, *, registry=None,
                 progress: Callable[[str, float | None], None] | None = None) -> None:
        self.config = (config or ProbeConfig()).validated()
        self.metrics = ProbeMetrics(self.config.model.display_name, registry)
        self._progress = progress
        self._lock = threading.Lock()
        self._state, self._phase, self._reason = "pending", None, None
        self._ready, self._healthy = False, True
        self._phases: dict[str, float] = {}
        self._details: dict[str, dict] = {}
        self._report: dict | None = None
        self._model = None
        self._error: ProbeError | None = None
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._server = None
        self._started_at: str | None = None

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

    def serve(self, host: str = "0.0.0.0", port: int = 8000):
        """Start the HTTP endpoints (health, /metrics) in a background thread; returns the server."""
        from .server import ProbeServer

        self._server = ProbeServer(self, host, port).start()
        return self._server

    def release_model(self) -> None:
        """Drop the loaded model (a sidecar keeps serving health and metrics without holding the weights)."""
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

    def close(self) -> None:
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
        plan = self._validate()
        import torch

        self.metrics.device = plan.device.type

        device = plan.device
        is_cuda = device.type == "cuda"

        def sync() -> None:
            if is_cuda:
                torch.cuda.synchronize(device)

        # runtime_import: a fresh interpreter starting and importing torch
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

        # device_init: context creation + first allocation
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
        device_facts = self._device_facts(torch, device)
        self.metrics.set_info(device.type, device_facts["name"], plan.dtype_name, torch.__version__,
                              plan.model_facts.get("parameters") or 0)

        # weights_read: disk -> host (cold when the eviction took)
        eviction = pagecache.evict(plan.info.path, requested=self.config.load.evict)
        flag = "--weights" if not self.config.model.builtin else "--cache-dir"
        with self._timed("weights_read", sync) as d:
            host = weights.load(plan.info, flag=flag)
            d["bytes"] = plan.info.file_bytes
            d["format"] = plan.info.format
            d["page_cache"] = eviction.as_dict()
        found = {k: (str(t.dtype).removeprefix("torch."), tuple(t.shape)) for k, t in host.items()}
        nbytes = weights.tensor_bytes(host)
        module_dtype = plan.dtype_name if plan.dtype_name != "auto" else _main_dtype(found)

        # weights_to_device: host -> device and module assembly
        with self._timed("weights_to_device", sync) as d:
            model, how = self._assemble(plan, host, found)
            d["bytes"] = nbytes
            d["mode"] = (self.config.load.h2d if how.startswith("built on meta") else "pageable") if is_cuda \
                else "copy (host memory)"
            d["assembly"] = how
            d["tensors"] = len(host)
        del host
        params = sum(p.numel() for p in model.parameters())

        # inference phases
        w = self.config.warmup
        cap = plan.max_tokens
        req_tokens = min(w.request_tokens, cap) if cap else w.request_tokens
        shallow_tokens = min(w.shallow_tokens, cap) if cap else w.shallow_tokens
        request = torch.tensor([inputs_mod.synthetic(req_tokens, plan.vocab_size, seed=1)], dtype=torch.long)

        def infer(ids, stream=None) -> None:
            with torch.inference_mode():
                if stream is None:
                    model(ids.to(device))
                    sync()
                else:  # concurrent requests on CUDA: one stream each
                    with torch.cuda.stream(stream):
                        model(ids.to(device))
                    stream.synchronize()

        def user_call(fn: Callable[[], None]) -> None:
            try:
                fn()
            except ProbeError:
                raise
            except torch.OutOfMemoryError as exc:
                raise ProbeError(f"out of memory on {device} running {plan.label} ({exc}); accepted: a smaller "
                                 "model, --dtype float16/bfloat16, or fewer tokens (--request-tokens, "
                                 "--max-input-tokens)", param="--device")
            except Exception as exc:
                if self.config.model.builtin:
                    raise
                raise ProbeError(f"--module {plan.label}: forward(input_ids) failed ({type(exc).__name__}: {exc}); "
                                 "accepted: a module whose forward takes a LongTensor of token ids shaped "
                                 "[batch, tokens]", param="--module")

        with self._timed("first_inference", sync) as d:
            t0 = time.perf_counter()
            user_call(lambda: infer(request))
            first_seconds = time.perf_counter() - t0
            d["tokens"] = req_tokens

        with self._timed("warmup_shallow", sync) as d:
            for i in range(w.shallow_requests):
                ids = torch.tensor([inputs_mod.synthetic(shallow_tokens, plan.vocab_size, seed=100 + i)])
                user_call(lambda: infer(ids))
            d.update(requests=w.shallow_requests, tokens=shallow_tokens)

        with self._timed("warmup_deep", sync) as d:
            if w.delay_seconds:
                time.sleep(w.delay_seconds)
            for req in plan.deep.requests:
                ids = torch.tensor([req], dtype=torch.long)
                user_call(lambda: infer(ids))
            d.update(plan.deep.describe())

        with self._timed("warmup_concurrent", sync) as d:
            self._concurrent(torch, infer, user_call, w.concurrency, req_tokens, plan.vocab_size, is_cuda, device)
            d.update(threads=w.concurrency, tokens=req_tokens)

        latencies = []
        with self._timed("steady_inference", sync) as d:
            for _ in range(w.steady_requests):
                t0 = time.perf_counter()
                user_call(lambda: infer(request))
                latencies.append(time.perf_counter() - t0)
            d.update(requests=w.steady_requests, tokens=req_tokens)

        p50 = percentile(latencies, 0.5)
        model_facts = dict(plan.model_facts, parameters=params, dtype=module_dtype, weights_tensor_bytes=nbytes,
                           tensors=len(found))
        self._model = model
        report = self._build_report(plan, model_facts, device_facts, eviction, first_seconds, latencies, p50,
                                    req_tokens, shallow_tokens)
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

        # After readiness (not part of T_cold): comparison figures. A failure here must not undo readiness.
        try:
            self._after_ready(torch, plan, device, nbytes, report)
        except Exception as exc:
            log.warning("probe: comparison figures after readiness failed: %s", exc)
            report["after_ready_error"] = f"{type(exc).__name__}: {exc}"
        report["finished_at"] = now_iso()
        self.metrics.publish_report(report)

    def _concurrent(self, torch, infer, user_call, n: int, tokens: int, vocab: int, is_cuda: bool, device) -> None:
        barrier = threading.Barrier(n)
        errors: list[BaseException] = []
        streams = [torch.cuda.Stream(device) if is_cuda else None for _ in range(n)]

        def worker(i: int) -> None:
            ids = torch.tensor([inputs_mod.synthetic(tokens, vocab, seed=200 + i)])
            try:
                barrier.wait(timeout=60)
                user_call(lambda: infer(ids, streams[i]))
            except BaseException as exc:  # re-raised in the probe thread
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(i,), name=f"forescale-probe-c{i}") for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]

    def _after_ready(self, torch, plan: _Plan, device, nbytes: int, report: dict) -> None:
        tp = report["throughput"]
        if device.type == "cuda":
            sample = max(16 << 20, min(nbytes, H2D_SAMPLE_MAX))
            tp["h2d"] = weights.h2d_bandwidth(device, sample)
            torch.cuda.empty_cache()
        if self.config.load.raw_read:
            ev = pagecache.evict(plan.info.path, requested=self.config.load.evict)
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

    def _assemble(self, plan: _Plan, host: dict, found: dict):
        """Module with the weights on the device: built on the meta device and given the device tensors
        (``assign``), or, for modules that cannot be (a factory failing on meta, non-persistent buffers
        the state dict cannot fill), built for real on the host, loaded, then moved."""
        meta = None
        if plan.meta_ok:
            meta = weights.instantiate(plan.factory, plan.factory_kwargs, meta=True, label=plan.label)
            if plan.info.tensors is None:  # legacy torch file: shapes and dtypes known only now
                weights.check_compatible(meta.state_dict(), found, dtype=plan.expected_dtype, path=plan.info.path,
                                         label=plan.label)
            persistent = set(meta.state_dict())
            if any(name not in persistent for name, _ in meta.named_buffers()):
                meta = None
        try:
            if meta is not None:
                dev = weights.to_device(host, plan.device, self.config.load.h2d)
                meta.load_state_dict(dev, strict=True, assign=True)
                module, how = meta, "built on meta, device tensors assigned"
            else:
                how = "built on the host, loaded, moved with .to(device)"
                module = weights.instantiate(plan.factory, plan.factory_kwargs, meta=False, label=plan.label)
                module.load_state_dict(host, strict=True)
                module = module.to(plan.device)
                if plan.device.type == "cuda":
                    import torch

                    torch.cuda.synchronize(plan.device)
        except RuntimeError as exc:
            if "size mismatch" not in str(exc) and "Missing key" not in str(exc) and "Unexpected key" not in str(exc):
                raise
            raise ProbeError(f"--weights {plan.info.path} does not fit --module {plan.label}: {exc}",
                             param="--weights")
        module.eval()
        module.requires_grad_(False)
        return module, how

    # ------------------------------------------------------------ validation

    def _validate(self) -> _Plan:
        import torch

        cfg, spec = self.config, self.config.model
        device = _resolve_device(torch, parse_device(cfg.device))
        dtype_flag = parse_dtype(spec.dtype)
        if spec.builtin:
            from . import builtin

            arch = builtin.arch_for(parse_model_size(spec.size))
            dtype_name = dtype_flag if dtype_flag != "auto" else ("float16" if device.type == "cuda" else "float32")
            self._set_state("preparing")
            path, gen_seconds = builtin.ensure_weights(spec.cache_dir, arch, getattr(torch, dtype_name), dtype_name,
                                                       spec.seed)
            info = weights.inspect_weights(path, flag="--cache-dir")
            factory = builtin.DecoderLM
            kwargs = {"vocab_size": arch.vocab_size, "d_model": arch.d_model, "n_layers": arch.n_layers,
                      "max_positions": arch.max_positions}
            label, meta_ok, expected, vocab = "builtin", True, None, arch.vocab_size
            # also warms torch's meta-device machinery (a one-off import of ~1 s that is the probe's, not the model's)
            meta_module = weights.instantiate(factory, kwargs, meta=True, label=label)
            weights.check_compatible(meta_module.state_dict(), info.tensors or {}, dtype=dtype_name, path=info.path,
                                     label=label)
            max_tokens = min(arch.max_positions, cfg.warmup.max_input_tokens or arch.max_positions)
            facts = {"source": "builtin", "module": None, "builtin": arch.as_dict(), "generated": gen_seconds is not None,
                     "generation_seconds": gen_seconds, "parameters": arch.parameters}
        else:
            info = weights.inspect_weights(spec.weights)
            if info.format == "torch":
                info = weights.inspect_torch(info)
            factory = weights.resolve_factory(spec.module)
            kwargs = dict(spec.module_kwargs)
            label = spec.module if isinstance(spec.module, str) else getattr(spec.module, "__qualname__", "factory")
            try:
                meta_module = weights.instantiate(factory, kwargs, meta=True, label=label)
                meta_ok = True
            except weights.NotAModule:
                raise
            except ProbeError:
                meta_module, meta_ok = None, False  # retried for real (and reported) when the weights are placed
            expected = dtype_flag if dtype_flag != "auto" else (
                weights.module_float_dtype(meta_module) if meta_module is not None else None)
            if meta_module is not None and info.tensors is not None:
                weights.check_compatible(meta_module.state_dict(), info.tensors, dtype=expected, path=info.path,
                                         label=label)
            vocab = spec.vocab_size or _embedding_vocab(meta_module) or 256
            max_tokens = cfg.warmup.max_input_tokens
            dtype_name = expected or (_main_dtype(info.tensors) if info.tensors else "auto")
            facts = {"source": "user", "module": label, "builtin": None, "generated": False,
                     "generation_seconds": None, "parameters": None}
        if cfg.warmup.inputs:
            deep = inputs_mod.read_warmup_file(cfg.warmup.inputs)
        else:
            deep = inputs_mod.default_deep(vocab, max_tokens or max(inputs_mod.DEFAULT_DEEP_LENGTHS))
        deep = inputs_mod.fit(deep, vocab, max_tokens)
        facts.update(name=spec.display_name, weights_path=info.path, weights_format=info.format,
                     weights_file_bytes=info.file_bytes, vocab_size=vocab)
        return _Plan(device, dtype_name, info, factory, kwargs, label, meta_ok, expected, vocab, max_tokens, deep, facts)

    def _device_facts(self, torch, device) -> dict:
        if device.type == "cuda":
            props = torch.cuda.get_device_properties(device)
            return {"type": "cuda", "index": device.index, "name": props.name, "memory_bytes": props.total_memory,
                    "cuda_version": torch.version.cuda}
        return {"type": "cpu", "index": None, "name": _cpu_name(), "memory_bytes": host_facts()["memory_bytes"],
                "cuda_version": None}

    def _build_report(self, plan: _Plan, model_facts: dict, device_facts: dict, eviction, first_seconds: float,
                      latencies: list[float], p50: float, req_tokens: int, shallow_tokens: int) -> dict:
        cfg = self.config
        phases = {name: self._phases[name] for name in PHASES}
        total = t_cold(phases, cfg.image_pull_seconds, cfg.scheduling_seconds)
        read = throughput(self._details["weights_read"]["bytes"], phases["weights_read"])
        h2d = throughput(self._details["weights_to_device"]["bytes"], phases["weights_to_device"])
        preds = predictions(total, phases, plan.info.file_bytes, read["bytes_per_second"], h2d["bytes_per_second"])
        disk_source = ("cold read (evicted from the page cache)" if eviction.evicted else
                       "page cache (not evicted: this is not a cold-disk figure)")
        return {
            "schema": SCHEMA, "status": "ok", "reason": None, "forescale_version": _version(),
            "started_at": self._started_at, "finished_at": now_iso(),
            "model": model_facts, "device": device_facts, "host": host_facts(),
            "phases": phases,
            "phase_details": {k: dict(self._details.get(k, {})) for k in PHASES},
            "extras": {"image_pull_seconds": float(cfg.image_pull_seconds),
                       "scheduling_seconds": float(cfg.scheduling_seconds)},
            "t_cold_seconds": total,
            "throughput": {"weights_read": read, "weights_to_device": h2d, "raw_read": None,
                           "load_vs_raw_ratio": None, "h2d": None},
            "page_cache": {"weights_read": eviction.as_dict(), "raw_read": None, "comparable": None},
            "inference": {"request_tokens": req_tokens, "first_seconds": first_seconds,
                          "steady": {"requests": len(latencies), "p50_seconds": p50,
                                     "p95_seconds": percentile(latencies, 0.95),
                                     "mean_seconds": sum(latencies) / len(latencies),
                                     "min_seconds": min(latencies), "max_seconds": max(latencies)},
                          "first_request_penalty": first_seconds / p50 if p50 > 0 else None},
            "warmup": {"shallow": {"requests": cfg.warmup.shallow_requests, "tokens": shallow_tokens},
                       "deep": plan.deep.describe(),
                       "concurrent": {"threads": cfg.warmup.concurrency, "tokens": req_tokens}},
            "predictions": preds,
            "prediction_basis": {"size_bytes": plan.info.file_bytes, "disk_bytes_per_second": read["bytes_per_second"],
                                 "h2d_bytes_per_second": h2d["bytes_per_second"], "disk_source": disk_source,
                                 "formula": FORMULA},
        }


# ---------------------------------------------------------------- helpers

def _resolve_device(torch, text: str):
    if text == "cpu":
        return torch.device("cpu")
    compiled = torch.backends.cuda.is_built()
    count = torch.cuda.device_count() if compiled else 0
    if text == "auto":
        return torch.device("cuda", 0) if count > 0 else torch.device("cpu")
    if count == 0:
        why = (f"this torch ({torch.__version__}) is built without CUDA" if not compiled
               else "no CUDA device is visible (driver missing, or CUDA_VISIBLE_DEVICES empty)")
        raise ProbeError(f"--device {text}: CUDA is not available: {why}; accepted: --device cpu, or --device auto "
                         "(CUDA when present, else CPU)", param="--device")
    index = int(text.split(":")[1]) if ":" in text else 0
    if index >= count:
        raise ProbeError(f"--device {text}: there are {count} CUDA device(s); accepted: cuda:0 to cuda:{count - 1}",
                         param="--device")
    return torch.device("cuda", index)


def _embedding_vocab(module) -> int | None:
    if module is None:
        return None
    import torch

    for m in module.modules():
        if isinstance(m, torch.nn.Embedding):
            return m.num_embeddings
    return None


def _main_dtype(found: dict) -> str:
    """The floating dtype holding most tensors (by count), e.g. float16."""
    counts: dict[str, int] = {}
    for dtype, _shape in found.values():
        if dtype in weights.FLOAT_NAMES:
            counts[dtype] = counts.get(dtype, 0) + 1
    return max(counts, key=counts.get) if counts else "auto"


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "cpu"


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("forescale")
    except Exception:
        return "unknown"
