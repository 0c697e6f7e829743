"""User models for the probe tests: factories as `--module support.probe_user_model:<name>` would name them
(with `tests/` on the path)."""

from __future__ import annotations

import torch
from torch import nn


class TinyLM(nn.Module):
    """forward(input_ids[batch, tokens]) -> logits; a few thousand parameters."""

    def __init__(self, hidden: int = 32, vocab: int = 300) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, hidden)
        self.mix = nn.Linear(hidden, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(input_ids)
        x = x + torch.relu(self.mix(x)).cumsum(dim=1) / (1 + torch.arange(x.shape[1], device=x.device))[:, None]
        return self.head(self.norm(x))


class BufferedLM(TinyLM):
    """Has a non-persistent buffer: not in the state dict, so meta construction cannot be completed by loading."""

    def __init__(self, hidden: int = 32, vocab: int = 300) -> None:
        super().__init__(hidden, vocab)
        self.register_buffer("scale", torch.full((hidden,), 0.5), persistent=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.emb(input_ids) * self.scale))


def build(hidden: int = 32, vocab: int = 300) -> TinyLM:
    return TinyLM(hidden, vocab)


def build_buffered(hidden: int = 32, vocab: int = 300) -> BufferedLM:
    return BufferedLM(hidden, vocab)


class NeedsMask(TinyLM):
    """Same weights as TinyLM, but forward wants a second argument: the probe cannot call it."""

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return super().forward(input_ids) * attention_mask


def build_needs_mask(hidden: int = 32, vocab: int = 300) -> NeedsMask:
    return NeedsMask(hidden, vocab)


def not_a_module(**kwargs):
    return {"not": "a module"}


def state_dict(hidden: int = 32, vocab: int = 300, dtype: torch.dtype = torch.float32, seed: int = 0) -> dict:
    torch.manual_seed(seed)
    return {k: v.to(dtype).contiguous() for k, v in TinyLM(hidden, vocab).state_dict().items()}


def build_meta_hostile(hidden: int = 32, vocab: int = 300) -> TinyLM:
    """Cannot be built on the meta device (reads a tensor's value): the probe builds it for real instead."""
    if torch.ones(1).sum().item() != 1.0:
        raise AssertionError("unreachable")
    return TinyLM(hidden, vocab)
