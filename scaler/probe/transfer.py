"""Host -> device: weights copied onto the device (pageable, or staged through pinned buffers) and the copy's
bandwidth, the ``weights_to_device`` phase of a cold start (``weights`` reads them from disk first)."""

from __future__ import annotations

import time
from typing import Any, Mapping

def to_device(tensors: Mapping[str, Any], device, mode: str) -> dict:
    """Host tensors -> device tensors (CUDA work finished when this returns).

    CPU: a copy out of the file mapping into the process's own memory (the
    CPU analogue of an upload). CUDA "pageable": ``tensor.to(device)``;
    CUDA "pinned": staged through two pinned buffers, the copy into one
    overlapping the DMA out of the other.
    """
    import torch

    if device.type != "cuda":
        return {k: t.clone() for k, t in tensors.items()}
    if mode == "pageable":
        out = {k: t.to(device) for k, t in tensors.items()}
        torch.cuda.synchronize(device)
        return out
    return _to_cuda_pinned(tensors, device)


def _to_cuda_pinned(tensors: Mapping[str, Any], device, chunk: int = 64 << 20) -> dict:
    import torch

    total = max((t.numel() * t.element_size() for t in tensors.values()), default=0)
    chunk = max(1 << 20, min(chunk, total))
    staging = [torch.empty(chunk, dtype=torch.uint8, pin_memory=True) for _ in range(2)]
    done: list[Any] = [None, None]
    stream = torch.cuda.Stream(device)
    out, k = {}, 0
    for name, t in tensors.items():
        dst = torch.empty(t.shape, dtype=t.dtype, device=device)
        out[name] = dst
        n = t.numel() * t.element_size()
        if n == 0:
            continue
        src = t.detach().contiguous().reshape(-1).view(torch.uint8)
        dst_b = dst.reshape(-1).view(torch.uint8)
        stream.wait_stream(torch.cuda.current_stream(device))  # dst's allocation happened on the default stream
        for off in range(0, n, chunk):
            m = min(chunk, n - off)
            i = k % 2
            if done[i] is not None:
                done[i].synchronize()               # the DMA out of this buffer has finished
            staging[i][:m].copy_(src[off:off + m])  # pageable (file mapping) -> pinned
            with torch.cuda.stream(stream):
                dst_b[off:off + m].copy_(staging[i][:m], non_blocking=True)
                ev = torch.cuda.Event()
                ev.record(stream)
            done[i] = ev
            k += 1
        dst.record_stream(stream)
    torch.cuda.synchronize(device)
    return out


def h2d_bandwidth(device, nbytes: int) -> dict:
    """Bytes/s of one host -> device copy of ``nbytes`` from pinned and from pageable memory (CUDA only)."""
    import torch

    result = {}
    dst = torch.empty(nbytes, dtype=torch.uint8, device=device)
    for mode in ("pinned", "pageable"):
        src = torch.empty(nbytes, dtype=torch.uint8, pin_memory=(mode == "pinned"))
        src.fill_(1)
        dst.copy_(src, non_blocking=(mode == "pinned"))  # warm the path once
        torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        dst.copy_(src, non_blocking=(mode == "pinned"))
        torch.cuda.synchronize(device)
        dt = time.perf_counter() - t0
        result[mode] = {"bytes": nbytes, "seconds": dt, "bytes_per_second": nbytes / dt, "gb_per_second": nbytes / dt / 1e9}
        del src
    return result
