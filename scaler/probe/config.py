"""Probe settings: small frozen dataclasses, grouped by concern, and parsers.

Nothing here imports torch, so the CLI can validate flags quickly.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from .errors import ProbeError

DTYPES = {"auto": "auto", "float16": "float16", "fp16": "float16", "half": "float16",
          "bfloat16": "bfloat16", "bf16": "bfloat16", "float32": "float32", "fp32": "float32", "float": "float32"}
DTYPE_CHOICES = ("auto", "float16", "bfloat16", "float32", "fp16", "bf16", "fp32")
H2D_MODES = ("pinned", "pageable")
MIN_BUILTIN_PARAMS = 1_000_000
MAX_BUILTIN_PARAMS = 200_000_000_000
DEFAULT_CACHE_DIR = os.path.join("~", ".cache", "forescale")

_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKmMbBgGtT]?)\s*(?:params?)?\s*$")
_SUFFIX = {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}


def parse_model_size(text: str | int) -> int:
    """``"125M"`` -> 125_000_000; accepts K, M, B (or G), T suffixes, decimals and plain ints."""
    if isinstance(text, int):
        value = float(text)
    else:
        m = _SIZE_RE.match(str(text))
        if not m:
            raise ProbeError(f"--model-size {text!r}: not a parameter count; accepted: an integer or a number "
                             "with a K/M/B suffix, e.g. 5M, 125M, 1.3B", param="--model-size")
        value = float(m.group(1)) * _SUFFIX[m.group(2).lower()]
    if not math.isfinite(value) or value < MIN_BUILTIN_PARAMS or value > MAX_BUILTIN_PARAMS:
        raise ProbeError(f"--model-size {text!r}: {value:.3g} parameters is out of range; accepted: "
                         f"{MIN_BUILTIN_PARAMS / 1e6:g}M to {MAX_BUILTIN_PARAMS / 1e9:g}B, e.g. 5M, 125M, 1.3B",
                         param="--model-size")
    return int(round(value))


def format_count(n: int) -> str:
    """125_000_000 -> '125M', 1_300_000_000 -> '1.3B'."""
    for div, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return f"{n / div:.4g}{suffix}"
    return str(n)


def parse_dtype(text: str) -> str:
    key = str(text).strip().lower()
    if key not in DTYPES:
        raise ProbeError(f"--dtype {text!r}: unknown; accepted: auto, float16 (fp16), bfloat16 (bf16), float32 (fp32)",
                         param="--dtype")
    return DTYPES[key]


def parse_device(text: str) -> str:
    key = str(text).strip().lower()
    if key in ("auto", "cpu", "cuda") or re.fullmatch(r"cuda:\d+", key):
        return key
    raise ProbeError(f"--device {text!r}: unknown; accepted: auto (CUDA when present, else CPU), cpu, cuda, cuda:N",
                     param="--device")


@dataclass(frozen=True)
class ModelSpec:
    """Which model: the built-in transformer of ``size`` parameters, or a user's weights + module.

    ``module`` is ``"package.module:factory"`` or, for library use, the factory itself.
    """

    size: int = 125_000_000
    weights: str | None = None
    module: str | Callable[..., Any] | None = None
    module_kwargs: dict = field(default_factory=dict)
    name: str | None = None
    dtype: str = "auto"
    seed: int = 0
    cache_dir: str = DEFAULT_CACHE_DIR
    vocab_size: int | None = None

    @property
    def builtin(self) -> bool:
        return self.weights is None

    @property
    def display_name(self) -> str:
        if self.name:
            return self.name
        if self.builtin:
            return f"builtin-{format_count(self.size)}"
        base = os.path.basename(str(self.weights))
        for suffix in (".safetensors", ".pt", ".pth", ".bin"):
            if base.endswith(suffix):
                base = base[: -len(suffix)]
        return base or "model"


@dataclass(frozen=True)
class WarmupSpec:
    """The tiered warm-up and the inference measurements around it."""

    inputs: str | None = None          # deep warm-up file (JSON lines or text lines); None: default set
    request_tokens: int = 128          # the probe request: first_inference and steady_inference
    shallow_requests: int = 3
    shallow_tokens: int = 256
    concurrency: int = 4
    steady_requests: int = 20
    max_input_tokens: int | None = None  # truncate longer inputs (the built-in model caps at its positions)
    delay_seconds: float = 0.0         # testing aid: sleep inside warmup_deep


@dataclass(frozen=True)
class LoadSpec:
    """How weights are read and moved."""

    evict: bool = True                 # posix_fadvise(DONTNEED) before reading, for a cold figure
    raw_read: bool = True              # also time a plain sequential read of the same file
    h2d: str = "pinned"                # CUDA: pinned (staged) or pageable host->device copies


@dataclass(frozen=True)
class ProbeConfig:
    model: ModelSpec = field(default_factory=ModelSpec)
    warmup: WarmupSpec = field(default_factory=WarmupSpec)
    load: LoadSpec = field(default_factory=LoadSpec)
    device: str = "auto"
    image_pull_seconds: float = 0.0
    scheduling_seconds: float = 0.0

    def validated(self) -> "ProbeConfig":
        """Check the plain values (no files, no torch); raises ProbeError naming the field."""
        parse_device(self.device)
        parse_dtype(self.model.dtype)
        if self.model.builtin:
            parse_model_size(self.model.size)
        elif self.model.module is None:
            raise ProbeError("--weights needs --module package.module:factory (the code that builds the model "
                             "the state dict belongs to)", param="--module")
        if self.load.h2d not in H2D_MODES:
            raise ProbeError(f"--h2d {self.load.h2d!r}: accepted: pinned, pageable", param="--h2d")
        for flag, value in (("--image-pull-seconds", self.image_pull_seconds),
                            ("--scheduling-seconds", self.scheduling_seconds)):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ProbeError(f"{flag} {value!r}: accepted: a finite number of seconds >= 0", param=flag)
        w = self.warmup
        for flag, value, lo in (("--request-tokens", w.request_tokens, 1), ("--shallow-requests", w.shallow_requests, 1),
                                ("--shallow-tokens", w.shallow_tokens, 1), ("--concurrency", w.concurrency, 1),
                                ("--steady-requests", w.steady_requests, 1)):
            if not isinstance(value, int) or value < lo:
                raise ProbeError(f"{flag} {value!r}: accepted: an integer >= {lo}", param=flag)
        if w.max_input_tokens is not None and w.max_input_tokens < 1:
            raise ProbeError(f"--max-input-tokens {w.max_input_tokens!r}: accepted: an integer >= 1",
                             param="--max-input-tokens")
        return self
