"""The probe's inference endpoint: a request queue and an iteration-level batcher over the warmed model.

``POST /v1/completions`` (see :mod:`scaler.probe.server`) hands each request to an :class:`Engine`:
a bounded FIFO queue and one worker thread that generates greedily, one token per step for every
request in the batch. Between steps, queued requests join the batch (up to ``max_batch``) and
finished ones leave it, the way continuous-batching model servers (vLLM, TGI) schedule work. There
is no KV cache: each step runs the model over the whole (right-padded) sequences; with causal
attention the padding after a sequence's last token cannot change its logits, so every request gets
the tokens it would get alone.

Text is tokenised with the probe's byte tokenizer (one id per UTF-8 byte, folded below the
vocabulary); generated ids below 256 decode as bytes, others as ``<id>``.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

DONE = object()  # end of a completion's token stream


class Overloaded(Exception):
    """The queue is full: the request is refused (HTTP 503)."""


class Rejected(ValueError):
    """The request cannot be served as asked (HTTP 400); the message names the field."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def encode(text: str, vocab_size: int) -> list[int]:
    """Byte tokenizer folded below the vocabulary; an empty prompt is one token 0."""
    ids = [b % vocab_size for b in text.encode("utf-8")]
    return ids or [0]


def decode(ids: list[int]) -> str:
    out, buf = [], bytearray()
    for i in ids:
        if i < 256:
            buf.append(i)
        else:
            if buf:
                out.append(buf.decode("utf-8", errors="replace"))
                buf = bytearray()
            out.append(f"<{i}>")
    if buf:
        out.append(buf.decode("utf-8", errors="replace"))
    return "".join(out)


@dataclass
class Completion:
    """One request in flight: its prompt, its budget, and the queue its tokens arrive on."""

    prompt: list[int]
    max_tokens: int
    enqueued: float
    tokens: "queue.SimpleQueue" = field(default_factory=queue.SimpleQueue)
    generated: list[int] = field(default_factory=list)
    cancelled: bool = False
    error: BaseException | None = None

    def cancel(self) -> None:
        """The client went away: the worker drops it at the next step."""
        self.cancelled = True

    def results(self, timeout: float | None = None):
        """Yield generated token ids as they come; raises the worker's error, or queue.Empty on timeout."""
        while True:
            item = self.tokens.get(timeout=timeout)
            if item is DONE:
                if self.error is not None:
                    raise self.error
                return
            yield item


class Engine:
    """A bounded queue and one batching worker over ``model`` (forward(ids[batch, tokens]) -> logits)."""

    def __init__(self, model, device, vocab_size: int, max_positions: int | None, *, max_batch: int = 8,
                 max_queue: int = 256, on_queue: Callable[[int], None] | None = None, step_delay: float = 0.0) -> None:
        if max_batch < 1 or max_queue < 1:
            raise ValueError("max_batch and max_queue must be >= 1")
        self.model, self.device = model, device
        self.vocab_size, self.max_positions = vocab_size, max_positions
        self.max_batch, self.max_queue = max_batch, max_queue
        self._on_queue = on_queue
        # testing aid: every batch step lasts at least this long on the clock (a device's step time, costing no CPU;
        # the step's CPU work is done within it), so time, not a contended CPU, sets the capacity
        self.step_delay = step_delay
        self._waiting: deque[Completion] = deque()
        self._cv = threading.Condition()
        self._stop = False
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ requests

    def check(self, prompt_tokens: int, max_tokens: int) -> None:
        """Raise Rejected when the request cannot fit the model's positions."""
        if self.max_positions is not None and prompt_tokens + max_tokens > self.max_positions:
            raise Rejected(f"prompt ({prompt_tokens} tokens) + max_tokens ({max_tokens}) exceeds this model's "
                           f"{self.max_positions} positions; accepted: a shorter prompt or a smaller max_tokens",
                           param="max_tokens")

    def submit(self, prompt: list[int], max_tokens: int) -> Completion:
        self.check(len(prompt), max_tokens)
        c = Completion(prompt=list(prompt), max_tokens=max_tokens, enqueued=time.perf_counter())
        with self._cv:
            if self._stop:
                raise Overloaded("the server is shutting down")
            if len(self._waiting) >= self.max_queue:
                raise Overloaded(f"the queue is full ({self.max_queue} requests waiting)")
            self._waiting.append(c)
            depth = len(self._waiting)
            self._cv.notify()
        self._report_queue(depth)
        return c

    # ------------------------------------------------------------ lifecycle

    def start(self) -> "Engine":
        self._thread = threading.Thread(target=self._loop, name="forescale-probe-batcher", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        with self._cv:
            self._stop = True
            left = list(self._waiting)
            self._waiting.clear()
            self._cv.notify_all()
        for c in left:
            c.error = Overloaded("the server is shutting down")
            c.tokens.put(DONE)
        if self._thread is not None:
            self._thread.join(timeout)

    # ------------------------------------------------------------ the worker

    def _report_queue(self, depth: int) -> None:
        if self._on_queue is not None:
            self._on_queue(depth)

    def _admit(self, active: list[Completion]) -> bool:
        """Move queued requests into the batch; block while there is nothing to do. False: stop."""
        with self._cv:
            while not active and not self._waiting and not self._stop:
                self._cv.wait(0.5)
            if self._stop:
                return False
            while self._waiting and len(active) < self.max_batch:
                active.append(self._waiting.popleft())
            depth = len(self._waiting)
        self._report_queue(depth)
        return True

    def _loop(self) -> None:
        import torch

        active: list[Completion] = []
        while self._admit(active):
            for c in [c for c in active if c.cancelled]:
                active.remove(c)
                c.tokens.put(DONE)
            if not active:
                continue
            began = time.perf_counter()
            seqs = [c.prompt + c.generated for c in active]
            width = max(len(s) for s in seqs)
            batch = torch.zeros((len(seqs), width), dtype=torch.long)
            for i, s in enumerate(seqs):
                batch[i, : len(s)] = torch.tensor(s, dtype=torch.long)
            try:
                with torch.inference_mode():
                    logits = self.model(batch.to(self.device))
                    last = torch.tensor([len(s) - 1 for s in seqs], device=logits.device)
                    picked = logits[torch.arange(len(seqs), device=logits.device), last].argmax(dim=-1)
                    picked = picked.remainder(self.vocab_size).tolist()
                if self.step_delay:
                    time.sleep(max(0.0, began + self.step_delay - time.perf_counter()))
            except Exception as exc:  # the model failed on this batch: fail its requests, keep serving
                for c in active:
                    c.error = exc
                    c.tokens.put(DONE)
                active.clear()
                continue
            keep = []
            for c, tok in zip(active, picked):
                c.generated.append(int(tok))
                c.tokens.put(int(tok))
                if len(c.generated) >= c.max_tokens:
                    c.tokens.put(DONE)
                else:
                    keep.append(c)
            active[:] = keep
        for c in active:
            c.error = Overloaded("the server is shutting down")
            c.tokens.put(DONE)
