"""The built-in model: a decoder-only transformer (torch.nn) of a chosen size.

The architecture is derived from the parameter count alone (GPT-like: pre-norm
blocks, learned positions, 4x MLP, 64-dim heads, untied LM head); weights are
generated deterministically from a seed and saved as safetensors in the cache
directory on first use, so a probe never downloads anything and two machines
probing "125M" load byte-identical files.
"""

from __future__ import annotations

import json
import math
import os
import time
import zlib
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

FORMAT_VERSION = 1
HEAD_DIM = 64
MAX_POSITIONS = 2048


@dataclass(frozen=True)
class Arch:
    vocab_size: int
    d_model: int
    n_layers: int
    max_positions: int = MAX_POSITIONS

    @property
    def n_heads(self) -> int:
        return self.d_model // HEAD_DIM

    @property
    def parameters(self) -> int:
        d, v, L, p = self.d_model, self.vocab_size, self.n_layers, self.max_positions
        return 2 * v * d + p * d + L * (12 * d * d + 13 * d) + 2 * d

    def key(self) -> str:
        return f"v{FORMAT_VERSION}-L{self.n_layers}-d{self.d_model}-V{self.vocab_size}-P{self.max_positions}"

    def as_dict(self) -> dict:
        return {**asdict(self), "n_heads": self.n_heads, "parameters": self.parameters}


def arch_for(params: int) -> Arch:
    """The architecture whose parameter count is closest to ``params`` (width/depth near GPT's ~64)."""
    vocab = 32000 if params >= 100_000_000 else 8192 if params >= 10_000_000 else 4096
    best, best_score = None, math.inf
    for layers in range(1, 97):
        for d in range(HEAD_DIM, 16384 + 1, HEAD_DIM):
            ratio = d / layers
            if ratio < 16 or ratio > 256:
                continue
            arch = Arch(vocab, d, layers)
            score = abs(arch.parameters - params) / params + 0.02 * abs(math.log2(ratio / 64))
            if score < best_score:
                best, best_score = arch, score
    assert best is not None
    return best


class Block(nn.Module):
    def __init__(self, d: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class DecoderLM(nn.Module):
    """forward(input_ids LongTensor[batch, tokens]) -> logits [batch, tokens, vocab]."""

    def __init__(self, vocab_size: int, d_model: int, n_layers: int, max_positions: int = MAX_POSITIONS) -> None:
        super().__init__()
        self.max_positions = max_positions
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_positions, d_model)
        self.blocks = nn.ModuleList(Block(d_model, d_model // HEAD_DIM) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        t = input_ids.shape[1]
        pos = torch.arange(t, device=input_ids.device)
        x = self.tok(input_ids) + self.pos(pos)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def build(arch: Arch) -> DecoderLM:
    return DecoderLM(arch.vocab_size, arch.d_model, arch.n_layers, arch.max_positions)


def _init_tensor(name: str, shape: tuple[int, ...], n_layers: int, seed: int, dtype: torch.dtype) -> torch.Tensor:
    parts = name.split(".")
    if parts[-1] == "bias":
        return torch.zeros(shape, dtype=dtype)
    if len(parts) >= 2 and parts[-2].startswith("ln"):  # LayerNorm scale
        return torch.ones(shape, dtype=dtype)
    g = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
    std = 0.02 / math.sqrt(2 * n_layers) if parts[-2] in ("proj", "out") else 0.02
    return torch.randn(shape, generator=g, dtype=dtype).mul_(std)


def generate(arch: Arch, dtype: torch.dtype, seed: int) -> dict[str, torch.Tensor]:
    """Deterministic weights for ``arch``: same arch, dtype, seed and torch -> same bytes."""
    with torch.device("meta"):
        shapes = {k: tuple(v.shape) for k, v in build(arch).state_dict().items()}
    return {name: _init_tensor(name, shape, arch.n_layers, seed, dtype) for name, shape in shapes.items()}


def weights_path(cache_dir: str, arch: Arch, dtype_name: str, seed: int) -> str:
    return os.path.join(os.path.expanduser(cache_dir), f"builtin-{arch.key()}-{dtype_name}-s{seed}.safetensors")


def ensure_weights(cache_dir: str, arch: Arch, dtype: torch.dtype, dtype_name: str, seed: int) -> tuple[str, float | None]:
    """Path of the cached safetensors file, generating it on first use.

    Returns (path, generation seconds or None when it was already cached). A
    cached file that fails validation is regenerated.
    """
    from safetensors.torch import save_file

    from .weights import inspect_weights

    path = weights_path(cache_dir, arch, dtype_name, seed)
    if os.path.isfile(path):
        try:
            inspect_weights(path, flag="--cache-dir")
            return path, None
        except Exception:  # corrupt cache entry: regenerate below
            pass
    os.makedirs(os.path.dirname(path), exist_ok=True)
    t0 = time.perf_counter()
    tensors = generate(arch, dtype, seed)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        save_file(tensors, tmp, metadata={"format": "pt", "forescale_builtin": json.dumps(arch.as_dict(), sort_keys=True),
                                          "seed": str(seed), "dtype": dtype_name})
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path, time.perf_counter() - t0
