"""Warm-up inputs: the deep warm-up file, a trivial byte tokenizer, default sets.

The deep warm-up file (``--warmup-inputs FILE``) holds one request per line:

* JSON lines (``.jsonl``/``.ndjson``/``.json``, or any file whose first
  non-blank line starts with ``[`` or ``{``): a list of token ids
  ``[1, 2, 3]``, or an object ``{"tokens": [1, 2, 3]}`` or
  ``{"text": "..."}`` (``"prompt"`` is accepted for ``"text"``). A ``.json``
  file may instead hold one JSON array of such items.
* Plain text otherwise: each non-blank line is one request, tokenised by the
  byte tokenizer.

The byte tokenizer maps each UTF-8 byte to one token id (0-255); it needs no
vocabulary file and is deterministic. It yields about 4x more tokens than a
real subword tokenizer on English text, so size text lines accordingly, or
give token ids directly. Token ids must be below the model's vocabulary size.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass

from .errors import ProbeError

FLAG = "--warmup-inputs"
ACCEPTED = ("JSON lines (a list of token ids, or {\"tokens\": [...]} or {\"text\": \"...\"} per line) "
            "or plain text (one request per line, byte-tokenised)")
DEFAULT_DEEP_LENGTHS = (16, 64, 256, 512, 1024, 2048)


def byte_tokenize(text: str) -> list[int]:
    """The trivial tokenizer: one token per UTF-8 byte (ids 0..255)."""
    return list(text.encode("utf-8"))


def synthetic(n_tokens: int, vocab_size: int, seed: int) -> list[int]:
    """Deterministic pseudo-random token ids in [0, vocab_size)."""
    rng = random.Random(seed)
    return [rng.randrange(vocab_size) for _ in range(n_tokens)]


@dataclass(frozen=True)
class WarmupSet:
    requests: list[list[int]]
    source: str          # the file path, or "default"
    format: str          # "jsonl" | "json" | "text" | "synthetic"
    truncated: int = 0   # requests cut to the maximum length

    @property
    def tokens(self) -> int:
        return sum(len(r) for r in self.requests)

    def describe(self) -> dict:
        lengths = [len(r) for r in self.requests]
        return {"source": self.source, "format": self.format, "requests": len(self.requests), "tokens": self.tokens,
                "min_tokens": min(lengths), "max_tokens": max(lengths), "truncated": self.truncated}


def _bad(path: str, why: str) -> ProbeError:
    return ProbeError(f"{FLAG} {path}: {why}; accepted: {ACCEPTED}", param=FLAG)


def _item(path: str, where: str, obj) -> list[int]:
    if isinstance(obj, dict):
        if "tokens" in obj:
            obj = obj["tokens"]
        elif isinstance(text := obj.get("text", obj.get("prompt")), str):
            obj = byte_tokenize(text)
        else:
            raise _bad(path, f"{where}: an object needs \"tokens\" (a list of ids) or \"text\" (a string)")
    elif isinstance(obj, str):
        obj = byte_tokenize(obj)
    if not isinstance(obj, list) or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in obj):
        raise _bad(path, f"{where}: token ids must be a list of integers >= 0")
    if not obj:
        raise _bad(path, f"{where}: empty request")
    return obj


def read_warmup_file(path: str) -> WarmupSet:
    p = os.path.expanduser(path)
    try:
        with open(p, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise _bad(path, f"cannot be read ({exc.strerror or exc})")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _bad(path, f"not UTF-8 text ({exc})")
    lines = [(i + 1, line.strip()) for i, line in enumerate(text.splitlines()) if line.strip()]
    if not lines:
        raise _bad(path, "no requests (the file is empty)")
    suffix = os.path.splitext(p)[1].lower()
    if suffix == ".json":
        try:
            whole = json.loads(text)
        except json.JSONDecodeError:
            whole = None
        if isinstance(whole, list) and whole and all(isinstance(x, (list, dict, str)) for x in whole):
            return WarmupSet([_item(path, f"item {i + 1}", x) for i, x in enumerate(whole)], path, "json")
    if suffix in (".json", ".jsonl", ".ndjson") or lines[0][1][0] in "[{":
        requests = []
        for no, line in lines:
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise _bad(path, f"line {no}: not JSON ({exc.msg})")
            requests.append(_item(path, f"line {no}", obj))
        return WarmupSet(requests, path, "jsonl")
    return WarmupSet([byte_tokenize(line) for _, line in lines], path, "text")


def default_deep(vocab_size: int, max_tokens: int) -> WarmupSet:
    """Representative prompt lengths, short to the model's longest, of synthetic ids."""
    lengths = sorted({min(n, max_tokens) for n in DEFAULT_DEEP_LENGTHS})
    return WarmupSet([synthetic(n, vocab_size, seed=1000 + i) for i, n in enumerate(lengths)], "default", "synthetic")


def fit(ws: WarmupSet, vocab_size: int, max_tokens: int | None) -> WarmupSet:
    """Check ids against the vocabulary and cut requests to ``max_tokens``."""
    for i, req in enumerate(ws.requests):
        top = max(req)
        if top >= vocab_size:
            where = f"request {i + 1}" if ws.format != "text" else f"text request {i + 1}"
            raise _bad(ws.source, f"{where}: token id {top} is not below the model's vocabulary size {vocab_size}")
    if max_tokens is None:
        return ws
    cut = sum(1 for r in ws.requests if len(r) > max_tokens)
    return WarmupSet([r[:max_tokens] for r in ws.requests], ws.source, ws.format, ws.truncated + cut)
