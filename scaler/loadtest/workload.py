"""Request bodies: a template (``--prompt``, ``--max-tokens``) or a JSONL file of real prompts (``--prompts``).

JSONL: one request per line, either a JSON string (the prompt) or an object with ``"prompt"`` (a
string) and optionally ``"max_tokens"`` (an integer >= 1); any other keys (``temperature``,
``stop``...) are sent as they are. Blank lines are skipped. Requests cycle through the file in
order, so its length mix is the mix offered. In a template prompt, ``{n}`` becomes the request's
sequence number (distinct prompts defeat response caches).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

ACCEPTED = ('JSON lines: a string (the prompt) or an object {"prompt": "...", "max_tokens": 16, ...} per line')
MAX_PROMPTS = 1_000_000


class WorkloadError(ValueError):
    """A prompts file or template that cannot be used; the message names the file, the line and what is accepted."""


@dataclass(frozen=True)
class Workload:
    bodies: tuple[dict, ...]   # request bodies (without "stream" and "model")
    source: str                # "template" or the file path
    template: bool = False

    def body(self, n: int, *, stream: bool, model: str | None) -> dict:
        base = self.bodies[n % len(self.bodies)]
        out = dict(base)
        if self.template:
            out["prompt"] = base["prompt"].replace("{n}", str(n))
        out["stream"] = stream
        if stream and "ignore_eos" in base:  # a grid point: the server's own token counts, in the last chunk
            out.setdefault("stream_options", {"include_usage": True})
        if model is not None:
            out.setdefault("model", model)
        return out

    def describe(self) -> dict:
        lengths = [len(b["prompt"]) for b in self.bodies]
        tokens = [b.get("max_tokens") for b in self.bodies]
        return {"source": self.source, "prompts": len(self.bodies), "prompt_chars_min": min(lengths),
                "prompt_chars_max": max(lengths), "max_tokens": sorted({t for t in tokens if t is not None})}


FILLER = "hello"  # one token in the common tokenizers (BPE vocabularies hold " hello" whole)


def shaped(input_tokens: int, output_tokens: int) -> Workload:
    """One grid point: a prompt of about ``input_tokens`` tokens (the request's number, then ``FILLER`` words: each
    prompt differs from its first token on, so no prefix cache serves it) asking for exactly ``output_tokens``
    (``ignore_eos``, as vLLM and SGLang read it; the lengths measured are the server's own counts where it reports
    them, ``stream_options.include_usage``)."""
    if input_tokens < 1 or output_tokens < 1:
        raise WorkloadError(f"grid point ({input_tokens}, {output_tokens}): accepted: token counts >= 1")
    prompt = "{n}" + (" " + FILLER) * (input_tokens - 1)
    return Workload(({"prompt": prompt, "max_tokens": output_tokens, "ignore_eos": True},),
                    f"grid {input_tokens} in, {output_tokens} out", template=True)


def template(prompt: str, max_tokens: int) -> Workload:
    if max_tokens < 1:
        raise WorkloadError(f"--max-tokens {max_tokens}: accepted: an integer >= 1")
    return Workload(({"prompt": prompt, "max_tokens": max_tokens},), "template", template=True)


def _item(path: str, lineno: int, obj: Any, max_tokens: int) -> dict:
    where = f"--prompts {path}: line {lineno}"
    if isinstance(obj, str):
        return {"prompt": obj, "max_tokens": max_tokens}
    if not isinstance(obj, dict):
        raise WorkloadError(f"{where}: a JSON {type(obj).__name__}; accepted: {ACCEPTED}")
    if not isinstance(obj.get("prompt"), str):
        raise WorkloadError(f'{where}: no "prompt" string; accepted: {ACCEPTED}')
    mt = obj.get("max_tokens", max_tokens)
    if isinstance(mt, bool) or not isinstance(mt, int) or mt < 1:
        raise WorkloadError(f'{where}: "max_tokens" {json.dumps(mt)[:40]} is not an integer >= 1')
    return {**obj, "max_tokens": mt}


def read_prompts(path: str, max_tokens: int) -> Workload:
    """The requests of a JSONL file; ``max_tokens`` for lines that do not set their own."""
    if not os.path.isfile(path):
        raise WorkloadError(f"--prompts {path}: no such file; accepted: a file of {ACCEPTED}")
    bodies: list[dict] = []
    try:
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise WorkloadError(f"--prompts {path}: line {lineno}: not JSON ({exc.msg}); "
                                        f"accepted: {ACCEPTED}") from None
                bodies.append(_item(path, lineno, obj, max_tokens))
                if len(bodies) > MAX_PROMPTS:
                    raise WorkloadError(f"--prompts {path}: more than {MAX_PROMPTS} prompts; accepted: a sample")
    except UnicodeDecodeError:
        raise WorkloadError(f"--prompts {path}: not UTF-8 text; accepted: {ACCEPTED}") from None
    except OSError as exc:
        raise WorkloadError(f"--prompts {path}: cannot be read ({exc.strerror or exc})") from None
    if not bodies:
        raise WorkloadError(f"--prompts {path}: no prompts (the file is empty); accepted: {ACCEPTED}")
    return Workload(tuple(bodies), path)
