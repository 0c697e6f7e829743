"""Weights files: validation, loading (disk -> host), raw reads, and the user's module (host -> device: ``transfer``).

Formats: safetensors (the header validated here; the file mapped once,
privately, with ``torch.UntypedStorage.from_file`` and each tensor a view into
it, or ``safetensors.torch.load_file`` for unusual layouts) and torch state
dicts (``.pt``, ``.pth``, ``.bin``; ``torch.load(mmap=True,
weights_only=True)``, falling back to a plain read for legacy non-zip files).
A memory-mapped load only maps the file; ``load`` then touches every page in
file order so that ``weights_read`` really is the disk -> host time and not a
cost that surfaces later inside another phase.
"""

from __future__ import annotations

import importlib
import json
import os
import struct
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, cast

from .errors import ProbeError

SUFFIXES = {".safetensors": "safetensors", ".pt": "torch", ".pth": "torch", ".bin": "torch"}
ACCEPTED = "a .safetensors file, or a torch state dict saved with torch.save (.pt, .pth, .bin)"
SAFETENSORS_DTYPES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2,
                      "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8, "C64": 8}
SAFETENSORS_TO_TORCH = {"F16": "float16", "BF16": "bfloat16", "F32": "float32", "F64": "float64",
                        "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool",
                        "F8_E5M2": "float8_e5m2", "F8_E4M3": "float8_e4m3fn", "C64": "complex64",
                        "U16": "uint16", "U32": "uint32", "U64": "uint64"}
FLOAT_NAMES = {"float16", "bfloat16", "float32", "float64", "float8_e5m2", "float8_e4m3fn"}
READ_CHUNK = 8 << 20


@dataclass(frozen=True)
class WeightsInfo:
    path: str
    format: str                     # "safetensors" | "torch"
    file_bytes: int
    # name -> (dtype name as torch spells it, shape); None where only a full load can tell (torch files)
    tensors: dict[str, tuple[str, tuple[int, ...]]] | None = None
    metadata: dict[str, str] = field(default_factory=dict)


def inspect_weights(path: str, flag: str = "--weights") -> WeightsInfo:
    """Check that ``path`` is a readable weights file of an accepted kind; read the safetensors header."""
    p = os.path.expanduser(str(path))
    if not os.path.exists(p):
        raise ProbeError(f"{flag} {path}: no such file; accepted: {ACCEPTED}", param=flag)
    if not os.path.isfile(p):
        raise ProbeError(f"{flag} {path}: not a regular file; accepted: {ACCEPTED}", param=flag)
    suffix = os.path.splitext(p)[1].lower()
    if suffix not in SUFFIXES:
        raise ProbeError(f"{flag} {path}: unknown extension {suffix or '(none)'!r}; accepted: {ACCEPTED}", param=flag)
    size = os.path.getsize(p)
    try:
        with open(p, "rb") as f:
            head = f.read(8)
            if SUFFIXES[suffix] == "safetensors":
                return _inspect_safetensors(p, f, head, size, flag, path)
    except OSError as exc:
        raise ProbeError(f"{flag} {path}: cannot be read ({exc.strerror or exc}); accepted: {ACCEPTED}", param=flag)
    # torch: a zip archive (torch.save since 1.6) or a legacy pickle stream
    if not (head.startswith(b"PK\x03\x04") or head[:1] == b"\x80"):
        raise ProbeError(f"{flag} {path}: not a torch checkpoint (neither a torch.save zip archive nor a pickle); "
                         f"accepted: {ACCEPTED}", param=flag)
    return WeightsInfo(p, "torch", size)


def _inspect_safetensors(p: str, f, head: bytes, size: int, flag: str, shown: str) -> WeightsInfo:
    def corrupt(why: str) -> ProbeError:
        return ProbeError(f"{flag} {shown}: corrupt or not a safetensors file ({why}); accepted: {ACCEPTED}", param=flag)

    if len(head) < 8:
        raise corrupt(f"{size} bytes, shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", head)
    if n < 2 or 8 + n > size or n > 100 << 20:
        raise corrupt(f"header length {n} does not fit a file of {size} bytes")
    try:
        header = json.loads(f.read(n).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise corrupt(f"header is not JSON: {exc}")
    if not isinstance(header, dict):
        raise corrupt("header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    data_len = size - 8 - n
    tensors: dict[str, tuple[str, tuple[int, ...]]] = {}
    end = 0
    for name, entry in header.items():
        try:
            dtype, shape, (begin, stop) = entry["dtype"], tuple(int(s) for s in entry["shape"]), entry["data_offsets"]
        except (TypeError, KeyError, ValueError) as exc:
            raise corrupt(f"tensor {name!r}: bad header entry ({exc})")
        if dtype not in SAFETENSORS_DTYPES:
            raise corrupt(f"tensor {name!r}: unknown dtype {dtype!r}")
        numel = 1
        for s in shape:
            numel *= s
        if not (0 <= begin <= stop) or stop - begin != numel * SAFETENSORS_DTYPES[dtype]:
            raise corrupt(f"tensor {name!r}: offsets {begin}..{stop} do not match shape {list(shape)} {dtype}")
        end = max(end, stop)
        tensors[name] = (SAFETENSORS_TO_TORCH.get(dtype, dtype.lower()), shape)
    if end != data_len:
        raise corrupt(f"the header describes {end} data bytes but the file holds {data_len} (truncated or padded?)")
    return WeightsInfo(p, "safetensors", size, tensors, {str(k): str(v) for k, v in metadata.items()})


def inspect_torch(info: WeightsInfo, flag: str = "--weights") -> WeightsInfo:
    """Names, dtypes and shapes of a torch zip checkpoint, read through a mapping (no tensor data is read).

    Legacy (non-zip) files are returned unchanged: only a full read can tell.
    """
    import dataclasses

    import torch

    with open(info.path, "rb") as f:
        if f.read(4) != b"PK\x03\x04":
            return info
    try:
        obj = torch.load(info.path, map_location="cpu", mmap=True, weights_only=True)
    except Exception as exc:
        raise ProbeError(f"{flag} {info.path}: cannot be loaded as torch ({type(exc).__name__}: {exc}); "
                         f"accepted: {ACCEPTED}", param=flag)
    sd = _as_state_dict(obj, info.path, flag)
    specs = {k: (str(t.dtype).removeprefix("torch."), tuple(t.shape)) for k, t in sd.items()}
    return dataclasses.replace(info, tensors=specs)


def tensor_bytes(tensors: Mapping[str, Any]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors.values())


def load(info: WeightsInfo, flag: str = "--weights") -> dict:
    """Disk -> host: a memory-mapped load whose every page is then resident (touched in file order)."""
    import torch

    try:
        if info.format == "safetensors":
            tensors = _map_safetensors(info)
            if tensors is None:  # an unusual layout: let the safetensors library place it
                from safetensors.torch import load_file

                tensors = load_file(info.path, device="cpu")
        else:
            try:
                obj = torch.load(info.path, map_location="cpu", mmap=True, weights_only=True)
            except RuntimeError as exc:
                if "mmap" not in str(exc):
                    raise
                obj = torch.load(info.path, map_location="cpu", weights_only=True)  # legacy (non-zip) format
            tensors = _as_state_dict(obj, info.path, flag)
    except ProbeError:
        raise
    except Exception as exc:  # safetensors and torch raise many types for a damaged file
        raise ProbeError(f"{flag} {info.path}: cannot be loaded as {info.format} ({type(exc).__name__}: {exc}); "
                         f"accepted: {ACCEPTED}", param=flag)
    touch(tensors)
    return tensors


def _map_safetensors(info: WeightsInfo) -> dict | None:
    """Map the whole file once (``torch.UntypedStorage.from_file``, private mapping) and view each tensor in it.

    Reading the mapping in file order (``touch``) then runs at about the disk's
    sequential speed; ``safetensors.torch.load_file`` (0.8) was measured ~30 %
    slower on a cold file here. None when a tensor's offset is not aligned
    to its element size or its dtype is unknown to this torch (the caller
    falls back to the safetensors library).
    """
    import torch

    if info.tensors is None or sys.byteorder != "little":
        return None
    with open(info.path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n).decode("utf-8"))
    header.pop("__metadata__", None)
    base_offset = 8 + n
    plan = []
    for name, entry in header.items():
        dtype = getattr(torch, SAFETENSORS_TO_TORCH.get(entry["dtype"], "-"), None)
        if not isinstance(dtype, torch.dtype):
            return None
        begin, stop = entry["data_offsets"]
        size = torch.empty(0, dtype=dtype).element_size()
        if (base_offset + begin) % size:
            return None
        plan.append((name, dtype, tuple(entry["shape"]), base_offset + begin, base_offset + stop))
    storage = torch.UntypedStorage.from_file(info.path, shared=False, nbytes=info.file_bytes)
    flat = torch.empty(0, dtype=torch.uint8).set_(cast(torch.UntypedStorage, storage))  # the stubs: _StorageBase
    return {name: flat[a:b].view(dtype).view(shape) for name, dtype, shape, a, b in plan}


def _as_state_dict(obj: Any, path: str, flag: str) -> dict:
    import torch

    if isinstance(obj, Mapping) and len(obj) == 1:
        (only,) = obj.values()
        if isinstance(only, Mapping) and next(iter(obj)) in ("state_dict", "model", "module"):
            obj = only
    if not isinstance(obj, Mapping) or not obj or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise ProbeError(f"{flag} {path}: the file holds a {type(obj).__name__}, not a state dict (a mapping of names "
                         f"to tensors, as model.state_dict() returns; {{'state_dict': ...}} is unwrapped); "
                         f"accepted: {ACCEPTED}", param=flag)
    return {str(k): v for k, v in obj.items()}


def touch(tensors: Mapping[str, Any]) -> int:
    """Read one byte per page of every tensor, lowest address first; returns a checksum (kept live)."""
    import torch

    total = 0
    step = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
    for t in sorted((t for t in tensors.values() if t.numel()), key=lambda t: t.data_ptr()):
        flat = t.detach().reshape(-1)
        if flat.dtype.is_complex:
            flat = torch.view_as_real(flat).reshape(-1)
        flat = flat.view(torch.uint8)
        total += int(flat[::step].sum()) + int(flat[-1])
    return total


def raw_read(path: str) -> int:
    """Plain sequential read of the whole file into one reused buffer; returns bytes read."""
    buf = bytearray(READ_CHUNK)
    view = memoryview(buf)
    n = 0
    with open(path, "rb", buffering=0) as f:
        if hasattr(os, "posix_fadvise"):
            try:
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
            except OSError:
                pass
        while True:
            k = f.readinto(view)
            if not k:
                return n
            n += k


# ---------------------------------------------------------------- user modules

class NotAModule(ProbeError):
    """The factory returned something other than a torch.nn.Module (on any device)."""


def resolve_factory(spec: str | Callable[..., Any], flag: str = "--module") -> Callable[..., Any]:
    """``"package.module:factory"`` (attribute path after the colon may be dotted) -> the callable."""
    if callable(spec):
        return spec
    text = str(spec)
    mod_name, sep, attr = text.partition(":")
    if not sep or not mod_name or not attr:
        raise ProbeError(f"{flag} {text!r}: accepted: package.module:factory (a callable returning a torch.nn.Module)",
                         param=flag)
    if os.getcwd() not in sys.path:  # like `python -m`: modules in the working directory are importable
        sys.path.append(os.getcwd())
    try:
        obj: Any = importlib.import_module(mod_name)
    except Exception as exc:
        raise ProbeError(f"{flag} {text!r}: cannot import module {mod_name!r} ({type(exc).__name__}: {exc}); "
                         "accepted: package.module:factory importable from the working directory or PYTHONPATH",
                         param=flag)
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ProbeError(f"{flag} {text!r}: module {mod_name!r} has no attribute {attr!r}; "
                             "accepted: package.module:factory", param=flag)
        obj = getattr(obj, part)
    if not callable(obj):
        raise ProbeError(f"{flag} {text!r}: {attr!r} is not callable; accepted: a factory returning a torch.nn.Module",
                         param=flag)
    return obj


def instantiate(factory: Callable[..., Any], kwargs: dict, *, meta: bool, label: str):
    """Call the factory (on the meta device when ``meta``: no memory, no init cost)."""
    import torch

    try:
        if meta:
            with torch.device("meta"):
                module = factory(**kwargs)
        else:
            module = factory(**kwargs)
    except ProbeError:
        raise
    except Exception as exc:
        raise ProbeError(f"--module {label}: the factory raised {type(exc).__name__}: {exc} "
                         f"(called with --module-kwargs {json.dumps(kwargs)})", param="--module")
    if not isinstance(module, torch.nn.Module):
        raise NotAModule(f"--module {label}: the factory returned a {type(module).__name__}; accepted: a torch.nn.Module",
                         param="--module")
    return module


def check_compatible(expected: Mapping[str, Any], found: Mapping[str, tuple[str, tuple[int, ...]]],
                     *, dtype: str | None, path: str, label: str) -> None:
    """Compare a module's state dict (meta tensors) with a file's (dtype, shape) per name.

    ``dtype``: the floating dtype every floating tensor must have (None: the file's own are used).
    """
    exp = {k: (str(v.dtype).removeprefix("torch."), tuple(v.shape)) for k, v in expected.items()}
    missing = sorted(set(exp) - set(found))
    unexpected = sorted(set(found) - set(exp))
    shapes = [f"{k}: file {list(found[k][1])}, module {list(exp[k][1])}"
              for k in exp if k in found and found[k][1] != exp[k][1]]
    dtypes = [f"{k}: {found[k][0]}" for k in found if dtype and found[k][0] in FLOAT_NAMES and found[k][0] != dtype]
    problems = []

    def some(items: list[str]) -> str:
        return ", ".join(items[:5]) + (f" and {len(items) - 5} more" if len(items) > 5 else "")

    if missing:
        problems.append(f"{len(missing)} tensor(s) the module needs are missing from the file ({some(missing)})")
    if unexpected:
        problems.append(f"{len(unexpected)} tensor(s) in the file are unknown to the module ({some(unexpected)})")
    if shapes:
        problems.append(f"{len(shapes)} shape mismatch(es) ({some(shapes)})")
    if dtypes:
        problems.append(f"{len(dtypes)} tensor(s) are not {dtype} ({some(dtypes)}); accepted: --dtype auto to use "
                        f"the file's dtypes, or weights saved in {dtype}")
    if problems:
        raise ProbeError(f"--weights {path} does not fit --module {label}: " + "; ".join(problems), param="--weights")


def module_float_dtype(module) -> str | None:
    """The one floating dtype of a module's parameters when it is not torch's default float32, else None."""
    found = {str(p.dtype).removeprefix("torch.") for p in module.parameters() if p.dtype.is_floating_point}
    if len(found) == 1:
        (d,) = found
        return None if d == "float32" else d
    return None
