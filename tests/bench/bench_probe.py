"""Benchmark of `forescale probe`'s loading path and the first-request penalty (CPU).

1. Weights load throughput as a ratio to a raw sequential read of the same
   file, cold (evicted from the page cache with posix_fadvise DONTNEED) and
   cached, on a ~500 MB fp16 safetensors file generated here (the built-in
   250M model) and a torch.save copy of the same tensors:
     - safetensors, memory-mapped (the probe's path: one private mapping of the file,
       tensors viewed in it, every page touched in file order)
     - safetensors.torch.load_file (the library's own mmap loader) + every page touched
     - torch.load(mmap=True) + pages touched (the probe's path for .pt files)
     - torch.load without mmap (the common default)
   Goal: >= 0.9 of the raw read, cold, for the probe's safetensors path.
2. First-inference penalty (first request / steady p50) of the built-in
   model (default 125M, float32) on CPU, through the library API.

Both files are deleted at the end. Usage: python tests/bench/bench_probe.py [--size 250M] [--model 125M] [--repeats 5]
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

from scaler.probe import ModelSpec, ProbeConfig, WarmupSpec, builtin, pagecache, parse_model_size, weights  # noqa: E402
from scaler.probe.runner import Probe  # noqa: E402


def timed(fn) -> float:
    t0 = time.perf_counter()
    out = fn()
    dt = time.perf_counter() - t0
    del out
    gc.collect()
    return dt


def load_bench(size: int, repeats: int, workdir: str) -> None:
    arch = builtin.arch_for(size)
    t0 = time.perf_counter()
    st_path, _ = builtin.ensure_weights(workdir, arch, torch.float16, "float16", seed=0)
    tensors = weights.load(weights.inspect_weights(st_path))
    pt_path = os.path.join(workdir, "same-tensors.pt")
    torch.save({k: v.clone() for k, v in tensors.items()}, pt_path)
    del tensors
    gc.collect()
    print(f"files: {os.path.getsize(st_path) / 1e6:.0f} MB safetensors ({arch.parameters / 1e6:.0f}M params fp16), "
          f"{os.path.getsize(pt_path) / 1e6:.0f} MB torch.save of the same tensors; made in "
          f"{time.perf_counter() - t0:.1f} s")
    st_info, pt_info = weights.inspect_weights(st_path), weights.inspect_weights(pt_path)
    cases = [  # (name, file, fn); "raw" rows are the baselines of their file
        ("raw read (.safetensors)", st_path, lambda: weights.raw_read(st_path)),
        ("safetensors mmap (probe)", st_path, lambda: weights.load(st_info)),
        ("safetensors.load_file+touch", st_path, lambda: weights.touch(load_file(st_path))),
        ("raw read (.pt)", pt_path, lambda: weights.raw_read(pt_path)),
        ("torch.load mmap (probe)", pt_path, lambda: weights.load(pt_info)),
        ("torch.load (no mmap)", pt_path, lambda: torch.load(pt_path, map_location="cpu", weights_only=True)),
        ("torch.load mmap, untouched", pt_path,
         lambda: torch.load(pt_path, map_location="cpu", mmap=True, weights_only=True)),
    ]
    raw_names = ("raw read (.safetensors)", "raw read (.pt)")  # same size, same disk: one pooled baseline
    print(f"\n{'method':<28}{'state':>7}{'GB/s':>7}{'raw GB/s':>9}{'ratio':>7}{'  (min..max GB/s, evicted)'}")
    for state in ("cold", "cached"):
        speeds: dict[str, list[float]] = {name: [] for name, _, _ in cases}
        evicted = True
        for _ in range(repeats):  # interleaved, so load and raw read see the same (shared, noisy) machine
            for name, path, fn in cases:
                if state == "cold":
                    evicted &= pagecache.evict(path).evicted
                else:
                    weights.raw_read(path)
                speeds[name].append(os.path.getsize(path) / timed(fn) / 1e9)
        for name, path, _ in cases:
            med = statistics.median(speeds[name])
            raw = statistics.median(speeds[raw_names[0]] + speeds[raw_names[1]])
            note = f"  ({min(speeds[name]):.2f}..{max(speeds[name]):.2f}" + (
                f", {'yes' if evicted else 'NO'})" if state == "cold" else ")")
            print(f"{name:<28}{state:>7}{med:>7.2f}{raw:>9.2f}{med / raw:>7.2f}{note}")
    print("ratio = median GB/s / median GB/s of the raw sequential reads (both files pooled).\n"
          "An untouched mmap load only maps the file: its pages are read later, inside another phase;\n"
          "the probe touches every page inside weights_read.")


def penalty_bench(model_size: int, workdir: str) -> None:
    config = ProbeConfig(model=ModelSpec(size=model_size, cache_dir=workdir, dtype="float32"),
                         warmup=WarmupSpec(steady_requests=10, max_input_tokens=512), device="cpu")
    t0 = time.perf_counter()
    probe = Probe(config)
    report = probe.run()
    inf = report["inference"]
    print(f"\nbuilt-in {model_size / 1e6:.0f}M float32 on CPU ({report['device']['name']}, "
          f"{report['host']['cpus_usable']} usable cores), probe request {inf['request_tokens']} tokens:")
    print(f"  first request {inf['first_seconds'] * 1e3:.1f} ms, steady p50 {inf['steady']['p50_seconds'] * 1e3:.1f} ms, "
          f"p95 {inf['steady']['p95_seconds'] * 1e3:.1f} ms -> first-request penalty {inf['first_request_penalty']:.2f}x")
    print(f"  T_cold {report['t_cold_seconds']:.2f} s: " + ", ".join(f"{k} {v:.2f}" for k, v in report["phases"].items()))
    print(f"  (run incl. weight generation: {time.perf_counter() - t0:.0f} s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="250M", help="built-in model size for the load file (250M fp16 ~ 500 MB)")
    ap.add_argument("--model", default="125M", help="built-in model size for the first-request penalty")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--dir", default=None, help="work directory (default: a temporary one; deleted at the end)")
    args = ap.parse_args()
    workdir = tempfile.mkdtemp(prefix="forescale-bench-probe-", dir=args.dir)
    try:
        load_bench(parse_model_size(args.size), args.repeats, workdir)
        penalty_bench(parse_model_size(args.model), workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
