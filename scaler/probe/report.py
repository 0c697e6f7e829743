"""The probe report: T_cold, predictions, the human table, and reading it back.

Report schema ``forescale.probe/v1`` (JSON object; keys scripts may rely on):

    schema            "forescale.probe/v1"
    status            "ok" | "failed";  reason: null | the failure message
    forescale_version, started_at, finished_at (ISO 8601, UTC)
    model             {name, source: builtin|user, parameters, dtype, weights_path, weights_format,
                       weights_file_bytes, weights_tensor_bytes, tensors, module, vocab_size,
                       builtin: {vocab_size, d_model, n_layers, n_heads, max_positions, parameters} | null,
                       generated, generation_seconds}
    device            {type: cpu|cuda, index, name, memory_bytes, cuda_version}
    host              {hostname, platform, python, torch_version, cpu_count, cpus_usable, memory_bytes}
    phases            {phase: seconds} in order: runtime_import, device_init, weights_read,
                       weights_to_device, first_inference, warmup_shallow, warmup_deep,
                       warmup_concurrent (readiness: T_cold ends here; reports of older versions also
                       hold steady_inference, which read_cold_start still accepts)
    phase_details     {phase: {...}} (bytes, modes, request counts)
    extras            {image_pull_seconds, scheduling_seconds}  (given, not measured)
    t_cold_seconds    sum(phases) + image_pull_seconds + scheduling_seconds
    throughput        {weights_read, weights_to_device, raw_read: {bytes, seconds, bytes_per_second,
                       gb_per_second} (raw_read null when skipped), load_vs_raw_ratio,
                       h2d: {pinned, pageable} (CUDA) | null}
    page_cache        {weights_read: {requested, supported, evicted, resident_before, resident_after, method},
                       raw_read: same | null, comparable}
    inference         {request_tokens, first_seconds, steady (timed after readiness; null if that failed):
                       {requests, seconds, p50_seconds, p95_seconds,
                       mean_seconds, min_seconds, max_seconds}, first_request_penalty}
    warmup            {shallow: {requests, tokens}, deep: {source, format, requests, tokens, min_tokens,
                       max_tokens, truncated}, concurrent: {threads, tokens}}
    predictions       [{eta, load_seconds, t_cold_seconds}] for eta in 0, 0.9, 1
    prediction_basis  {size_bytes, disk_bytes_per_second, h2d_bytes_per_second, disk_source, formula}

GB/s figures are decimal (1e9 bytes/s).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import socket
import sys
from typing import Iterable

from .errors import ProbeReportError

SCHEMA = "forescale.probe/v1"
PHASES = ("runtime_import", "device_init", "weights_read", "weights_to_device", "first_inference",
          "warmup_shallow", "warmup_deep", "warmup_concurrent")
# Reports written before the steady-state timing moved after readiness carry it as a phase of T_cold.
LEGACY_PHASES = PHASES + ("steady_inference",)
ETAS = (0.0, 0.9, 1.0)
FORMULA = "load(eta) = (1 - eta) * size * (1/disk_bw + 1/h2d_bw); T_cold(eta) = T_cold - weights_read - weights_to_device + load(eta)"


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def throughput(nbytes: int, seconds: float) -> dict:
    bps = nbytes / seconds if seconds > 0 else math.inf
    return {"bytes": nbytes, "seconds": seconds, "bytes_per_second": bps, "gb_per_second": bps / 1e9}


def percentile(values: Iterable[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), q in [0, 1]."""
    xs = sorted(values)
    if not xs:
        raise ValueError("no values")
    pos = (len(xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def host_facts() -> dict:
    mem = None
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        pass
    usable: int | None
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    try:
        import torch

        torch_version = torch.__version__
    except ImportError:
        torch_version = None
    return {"hostname": socket.gethostname(), "platform": platform.platform(), "python": sys.version.split()[0],
            "torch_version": torch_version, "cpu_count": os.cpu_count(), "cpus_usable": usable, "memory_bytes": mem}


def t_cold(phases: dict, image_pull_seconds: float, scheduling_seconds: float) -> float:
    return sum(phases.values()) + image_pull_seconds + scheduling_seconds


def predictions(t_cold_seconds: float, phases: dict, size_bytes: int, disk_bps: float, h2d_bps: float,
                etas: Iterable[float] = ETAS) -> list[dict]:
    """T_cold for a cache hit ratio eta: the measured load replaced by load(eta)."""
    rest = t_cold_seconds - phases["weights_read"] - phases["weights_to_device"]
    out = []
    for eta in etas:
        load = (1.0 - eta) * size_bytes * (1.0 / disk_bps + 1.0 / h2d_bps)
        out.append({"eta": eta, "load_seconds": load, "t_cold_seconds": rest + load})
    return out


# ---------------------------------------------------------------- human table

def _fmt_bytes(n: float) -> str:
    for div, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if n >= div:
            return f"{n / div:.3g} {unit}"
    return f"{n:.0f} B"


def format_table(report: dict) -> str:
    m, d, tp, inf = report["model"], report["device"], report["throughput"], report["inference"]
    total = report["t_cold_seconds"]
    lines = [f"forescale probe: {m['name']} ({m['parameters'] / 1e6:.1f}M parameters, {m['dtype']}, "
             f"{_fmt_bytes(m['weights_file_bytes'])} {m['weights_format']}) on {d['type']} ({d['name']})",
             "", f"{'phase':<20}{'seconds':>10}{'share':>8}  detail"]
    pc = report["page_cache"]["weights_read"]
    cache_note = ("cold: evicted from page cache" if pc["evicted"] else
                  f"page cache {pc['resident_before'] * 100:.0f}% resident" if pc["resident_before"] is not None
                  else "page cache state unknown")
    raw = tp.get("raw_read")
    details = {
        "runtime_import": f"import torch in a fresh interpreter (torch {report['host']['torch_version']})",
        "device_init": "context + first allocation",
        "weights_read": f"{_fmt_bytes(tp['weights_read']['bytes'])} at {tp['weights_read']['gb_per_second']:.2f} GB/s"
                        + (f", raw read {raw['gb_per_second']:.2f} GB/s (ratio {tp['load_vs_raw_ratio']:.2f})"
                           if raw else "") + f"; {cache_note}",
        "weights_to_device": f"{_fmt_bytes(tp['weights_to_device']['bytes'])} at "
                             f"{tp['weights_to_device']['gb_per_second']:.2f} GB/s "
                             f"({report['phase_details']['weights_to_device'].get('mode')})",
        "first_inference": f"1 x {inf['request_tokens']} tokens",
        "warmup_shallow": f"{report['warmup']['shallow']['requests']} x {report['warmup']['shallow']['tokens']} tokens",
        "warmup_deep": f"{report['warmup']['deep']['requests']} requests, {report['warmup']['deep']['tokens']} tokens "
                       f"({report['warmup']['deep']['source']})",
        "warmup_concurrent": f"{report['warmup']['concurrent']['threads']} parallel x "
                             f"{report['warmup']['concurrent']['tokens']} tokens",
    }
    rows = list(report["phases"].items())
    ex = report["extras"]
    if ex["image_pull_seconds"]:
        rows.append(("image_pull (given)", ex["image_pull_seconds"]))
    if ex["scheduling_seconds"]:
        rows.append(("scheduling (given)", ex["scheduling_seconds"]))
    for name, seconds in rows:
        share = seconds / total * 100 if total > 0 else 0.0
        lines.append(f"{name:<20}{seconds:>10.3f}{share:>7.1f}%  {details.get(name, '')}")
    lines.append(f"{'T_cold':<20}{total:>10.3f}{100.0:>7.1f}%")
    steady = inf.get("steady")
    if steady:
        lines.append(f"after readiness (not in T_cold): {steady['requests']} steady requests, p50 "
                     f"{steady['p50_seconds'] * 1e3:.1f} ms, p95 {steady['p95_seconds'] * 1e3:.1f} ms; first-request "
                     f"penalty {inf['first_request_penalty']:.1f}x")
    if tp.get("h2d"):
        h = tp["h2d"]
        lines.append(f"host->device: pinned {h['pinned']['gb_per_second']:.2f} GB/s, "
                     f"pageable {h['pageable']['gb_per_second']:.2f} GB/s")
    preds = ", ".join(f"eta={p['eta']:g}: {p['t_cold_seconds']:.2f} s" for p in report["predictions"])
    lines.append(f"predicted T_cold by cache hit ratio: {preds}")
    return "\n".join(lines)


# ---------------------------------------------------------------- reading reports back

def load_report(path: str | os.PathLike) -> dict:
    """A validated, successful probe report; ProbeReportError (a ValueError) otherwise."""
    shown = os.fspath(path)
    hint = "a probe report is the file written by `forescale probe --json PATH`"
    try:
        with open(path, "r", encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise ProbeReportError(f"{shown}: cannot read the probe report ({exc.strerror or exc}); {hint}")
    except UnicodeDecodeError:
        raise ProbeReportError(f"{shown}: not a probe report (not UTF-8 text); {hint}")
    try:
        report = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProbeReportError(f"{shown}: not a probe report (not JSON: {exc.msg} at line {exc.lineno}); {hint}")
    if not isinstance(report, dict) or report.get("schema") != SCHEMA:
        found = report.get("schema") if isinstance(report, dict) else type(report).__name__
        raise ProbeReportError(f"{shown}: not a probe report (schema {found!r}, expected {SCHEMA!r}); {hint}")
    if report.get("status") != "ok":
        raise ProbeReportError(f"{shown}: the probe run failed ({report.get('reason') or 'no reason recorded'}); "
                               "it holds no T_cold")
    value = report.get("t_cold_seconds")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ProbeReportError(f"{shown}: t_cold_seconds {value!r} is not a positive number of seconds")
    phases, extras = report.get("phases"), report.get("extras")
    if not isinstance(phases, dict) or not isinstance(extras, dict) or set(phases) not in (set(PHASES), set(LEGACY_PHASES)):
        raise ProbeReportError(f"{shown}: damaged probe report (phases should be {', '.join(PHASES)})")
    try:
        total = t_cold({k: float(v) for k, v in phases.items()}, float(extras["image_pull_seconds"]),
                       float(extras["scheduling_seconds"]))
    except (KeyError, TypeError, ValueError):
        raise ProbeReportError(f"{shown}: damaged probe report (non-numeric phases or extras)")
    if not math.isclose(total, value, rel_tol=1e-6, abs_tol=1e-6):
        raise ProbeReportError(f"{shown}: damaged probe report (t_cold_seconds {value} differs from the sum of its "
                               f"phases and extras, {total})")
    return report


def read_cold_start(path: str | os.PathLike) -> float:
    """T_cold in seconds from a probe JSON report (``forescale probe --json PATH``).

    Raises ProbeReportError (a ValueError) naming the file when it is not a
    successful probe report.
    """
    return float(load_report(path)["t_cold_seconds"])
