"""What the probe will run, resolved before any timed phase, and how the module is assembled.

``build_plan(config, on_state)`` validates a :class:`ProbeConfig` against the host (device, weights,
module factory, warm-up inputs) and returns a :class:`Plan`; ``assemble(plan, host, found, h2d)``
puts the weights on the device as a ready module. Both raise :class:`ProbeError` on user errors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, cast

from . import inputs as inputs_mod
from . import transfer, weights
from .config import ProbeConfig, parse_device, parse_dtype, parse_model_size
from .errors import ProbeError


@dataclass
class Plan:
    """Everything validation resolved, before any timed phase."""

    device: Any
    dtype_name: str
    info: weights.WeightsInfo
    factory: Callable[..., Any]
    factory_kwargs: dict
    label: str
    meta_ok: bool
    expected_dtype: str | None
    vocab_size: int
    max_tokens: int | None
    deep: inputs_mod.WarmupSet
    model_facts: dict


def build_plan(cfg: ProbeConfig, on_state: Callable[[str], None]) -> Plan:
    """Validate ``cfg`` and resolve it into a :class:`Plan`; ``on_state("preparing")`` is called
    before built-in weights are generated or checked."""
    import torch

    spec = cfg.model
    device = resolve_device(torch, parse_device(cfg.device))
    dtype_flag = parse_dtype(spec.dtype)
    if spec.builtin:
        from . import builtin

        arch = builtin.arch_for(parse_model_size(spec.size))
        dtype_name = dtype_flag if dtype_flag != "auto" else ("float16" if device.type == "cuda" else "float32")
        on_state("preparing")
        path, gen_seconds = builtin.ensure_weights(spec.cache_dir, arch, getattr(torch, dtype_name), dtype_name,
                                                   spec.seed)
        info = weights.inspect_weights(path, flag="--cache-dir")
        factory: Callable[..., Any] = builtin.DecoderLM
        kwargs = {"vocab_size": arch.vocab_size, "d_model": arch.d_model, "n_layers": arch.n_layers,
                  "max_positions": arch.max_positions}
        label, meta_ok, expected, vocab = "builtin", True, None, arch.vocab_size
        # also warms torch's meta-device machinery (a one-off import of ~1 s that is the probe's, not the model's)
        meta_module = weights.instantiate(factory, kwargs, meta=True, label=label)
        weights.check_compatible(meta_module.state_dict(), info.tensors or {}, dtype=dtype_name, path=info.path,
                                 label=label)
        max_tokens: int | None = min(arch.max_positions, cfg.warmup.max_input_tokens or arch.max_positions)
        facts = {"source": "builtin", "module": None, "builtin": arch.as_dict(), "generated": gen_seconds is not None,
                 "generation_seconds": gen_seconds, "parameters": arch.parameters}
    else:
        assert spec.weights is not None  # not spec.builtin
        info = weights.inspect_weights(spec.weights)
        if info.format == "torch":
            info = weights.inspect_torch(info)
        factory = weights.resolve_factory(cast("str | Callable[..., Any]", spec.module))  # validated(): set
        kwargs = dict(spec.module_kwargs)
        label = spec.module if isinstance(spec.module, str) else getattr(spec.module, "__qualname__", "factory")
        try:
            meta_module = weights.instantiate(factory, kwargs, meta=True, label=label)
            meta_ok = True
        except weights.NotAModule:
            raise
        except ProbeError:
            meta_module, meta_ok = None, False  # retried for real (and reported) when the weights are placed
        expected = dtype_flag if dtype_flag != "auto" else (
            weights.module_float_dtype(meta_module) if meta_module is not None else None)
        if meta_module is not None and info.tensors is not None:
            weights.check_compatible(meta_module.state_dict(), info.tensors, dtype=expected, path=info.path,
                                     label=label)
        vocab = spec.vocab_size or embedding_vocab(meta_module) or 256
        max_tokens = cfg.warmup.max_input_tokens
        dtype_name = expected or (main_dtype(info.tensors) if info.tensors else "auto")
        facts = {"source": "user", "module": label, "builtin": None, "generated": False,
                 "generation_seconds": None, "parameters": None}
    if cfg.warmup.inputs:
        deep = inputs_mod.read_warmup_file(cfg.warmup.inputs)
    else:
        deep = inputs_mod.default_deep(vocab, max_tokens or max(inputs_mod.DEFAULT_DEEP_LENGTHS))
    deep = inputs_mod.fit(deep, vocab, max_tokens)
    facts.update(name=spec.display_name, weights_path=info.path, weights_format=info.format,
                 weights_file_bytes=info.file_bytes, vocab_size=vocab)
    return Plan(device, dtype_name, info, factory, kwargs, label, meta_ok, expected, vocab, max_tokens, deep, facts)


def assemble(plan: Plan, host: dict, found: dict, h2d: str):
    """Module with the weights on the device: built on the meta device and given the device tensors
    (``assign``), or, for modules that cannot be (a factory failing on meta, non-persistent buffers
    the state dict cannot fill), built for real on the host, loaded, then moved.

    ``h2d`` is the host-to-device copy mode (``config.load.h2d``). Returns ``(module, how)``."""
    meta = None
    if plan.meta_ok:
        meta = weights.instantiate(plan.factory, plan.factory_kwargs, meta=True, label=plan.label)
        if plan.info.tensors is None:  # legacy torch file: shapes and dtypes known only now
            weights.check_compatible(meta.state_dict(), found, dtype=plan.expected_dtype, path=plan.info.path,
                                     label=plan.label)
        persistent = set(meta.state_dict())
        if any(name not in persistent for name, _ in meta.named_buffers()):
            meta = None
    try:
        if meta is not None:
            dev = transfer.to_device(host, plan.device, h2d)
            meta.load_state_dict(dev, strict=True, assign=True)
            module, how = meta, "built on meta, device tensors assigned"
        else:
            how = "built on the host, loaded, moved with .to(device)"
            module = weights.instantiate(plan.factory, plan.factory_kwargs, meta=False, label=plan.label)
            module.load_state_dict(host, strict=True)
            module = module.to(plan.device)
            if plan.device.type == "cuda":
                import torch

                torch.cuda.synchronize(plan.device)
    except RuntimeError as exc:
        if "size mismatch" not in str(exc) and "Missing key" not in str(exc) and "Unexpected key" not in str(exc):
            raise
        raise ProbeError(f"--weights {plan.info.path} does not fit --module {plan.label}: {exc}",
                         param="--weights")
    module.eval()
    module.requires_grad_(False)
    return module, how


# ---------------------------------------------------------------- helpers

def resolve_device(torch, text: str):
    """The torch device for a parsed ``--device`` value (cpu, auto, cuda, cuda:N), or ProbeError."""
    if text == "cpu":
        return torch.device("cpu")
    compiled = torch.backends.cuda.is_built()
    count = torch.cuda.device_count() if compiled else 0
    if text == "auto":
        return torch.device("cuda", 0) if count > 0 else torch.device("cpu")
    if count == 0:
        why = (f"this torch ({torch.__version__}) is built without CUDA" if not compiled
               else "no CUDA device is visible (driver missing, or CUDA_VISIBLE_DEVICES empty)")
        raise ProbeError(f"--device {text}: CUDA is not available: {why}; accepted: --device cpu, or --device auto "
                         "(CUDA when present, else CPU)", param="--device")
    index = int(text.split(":")[1]) if ":" in text else 0
    if index >= count:
        raise ProbeError(f"--device {text}: there are {count} CUDA device(s); accepted: cuda:0 to cuda:{count - 1}",
                         param="--device")
    return torch.device("cuda", index)


def embedding_vocab(module) -> int | None:
    """The size of the first ``nn.Embedding`` in ``module``, or None."""
    if module is None:
        return None
    import torch

    for m in module.modules():
        if isinstance(m, torch.nn.Embedding):
            return m.num_embeddings
    return None


def main_dtype(found: dict) -> str:
    """The floating dtype holding most tensors (by count), e.g. float16."""
    counts: dict[str, int] = {}
    for dtype, _shape in found.values():
        if dtype in weights.FLOAT_NAMES:
            counts[dtype] = counts.get(dtype, 0) + 1
    return max(counts, key=counts.__getitem__) if counts else "auto"
