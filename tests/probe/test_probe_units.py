"""forescale probe: the pure parts (sizes, architecture, inputs, reports, page cache)."""

from __future__ import annotations

import json
import os

import pytest

from scaler.probe import ProbeError, ProbeReportError, parse_model_size, read_cold_start
from scaler.probe import inputs, pagecache
from scaler.probe.config import ProbeConfig, format_count
from scaler.probe.report import percentile, predictions


@pytest.mark.parametrize("text, expected", [
    ("125M", 125_000_000), ("5M", 5_000_000), ("1.3B", 1_300_000_000), ("1.3b", 1_300_000_000),
    ("2500000", 2_500_000), (7_000_000, 7_000_000), ("500K", None), ("1e7", 10_000_000), ("7G", 7_000_000_000),
    (" 13M params ", 13_000_000),
])
def test_parse_model_size(text, expected):
    if expected is None:
        with pytest.raises(ProbeError, match="out of range"):
            parse_model_size(text)
    else:
        assert parse_model_size(text) == expected


@pytest.mark.parametrize("text", ["", "M", "12Q", "1.2.3M", "-5M", "abc"])
def test_parse_model_size_rejects(text):
    with pytest.raises(ProbeError) as e:
        parse_model_size(text)
    assert e.value.param == "--model-size" and "accepted" in str(e.value)


def test_format_count():
    assert format_count(125_000_000) == "125M" and format_count(1_300_000_000) == "1.3B"


@pytest.mark.parametrize("params", [1_000_000, 5_000_000, 125_000_000, 1_300_000_000, 7_000_000_000])
def test_builtin_architecture_matches_the_size(params):
    torch = pytest.importorskip("torch")
    from scaler.probe import builtin

    arch = builtin.arch_for(params)
    assert abs(arch.parameters - params) / params < 0.15
    assert arch.d_model % builtin.HEAD_DIM == 0 and arch.vocab_size >= 256
    if params <= 5_000_000:  # the formula counts what torch counts
        with torch.device("meta"):
            model = builtin.build(arch)
        assert sum(p.numel() for p in model.parameters()) == arch.parameters


def test_builtin_weights_are_deterministic(tmp_path):
    torch = pytest.importorskip("torch")
    from scaler.probe import builtin

    arch = builtin.arch_for(1_000_000)
    a = builtin.generate(arch, torch.float16, seed=3)
    b = builtin.generate(arch, torch.float16, seed=3)
    c = builtin.generate(arch, torch.float16, seed=4)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["tok.weight"], c["tok.weight"])
    assert all(t.dtype == torch.float16 for t in a.values())
    p1, gen1 = builtin.ensure_weights(str(tmp_path), arch, torch.float16, "float16", 3)
    p2, gen2 = builtin.ensure_weights(str(tmp_path), arch, torch.float16, "float16", 3)
    assert p1 == p2 and gen1 is not None and gen2 is None
    with open(p1, "r+b") as f:  # a damaged cache entry is regenerated
        f.truncate(100)
    p3, gen3 = builtin.ensure_weights(str(tmp_path), arch, torch.float16, "float16", 3)
    assert p3 == p1 and gen3 is not None and os.path.getsize(p3) > 100


def test_byte_tokenizer():
    assert inputs.byte_tokenize("ab") == [97, 98]
    assert inputs.byte_tokenize("é") == [0xC3, 0xA9]


def test_warmup_file_formats(tmp_path):
    jl = tmp_path / "w.jsonl"
    jl.write_text('[1, 2]\n\n{"tokens": [3]}\n{"text": "hi"}\n{"prompt": "yo"}\n')
    ws = inputs.read_warmup_file(str(jl))
    assert ws.format == "jsonl" and ws.requests == [[1, 2], [3], [104, 105], [121, 111]]
    txt = tmp_path / "w.txt"
    txt.write_text("hello\n\n  world  \n")
    ws = inputs.read_warmup_file(str(txt))
    assert ws.format == "text" and ws.requests == [list(b"hello"), list(b"world")]
    arr = tmp_path / "w.json"
    arr.write_text(json.dumps([[1, 2], {"text": "a"}, "b"]))
    ws = inputs.read_warmup_file(str(arr))
    assert ws.format == "json" and ws.requests == [[1, 2], [97], [98]]
    sniffed = tmp_path / "w.data"
    sniffed.write_text("[7, 8]\n")
    assert inputs.read_warmup_file(str(sniffed)).requests == [[7, 8]]


def test_warmup_fit_truncates_and_checks_vocab():
    ws = inputs.WarmupSet([[1, 2, 3, 4], [5]], "f", "jsonl")
    cut = inputs.fit(ws, vocab_size=10, max_tokens=2)
    assert cut.requests == [[1, 2], [5]] and cut.truncated == 1
    with pytest.raises(ProbeError, match="vocabulary size 5"):
        inputs.fit(ws, vocab_size=5, max_tokens=None)


def test_default_deep_set_is_capped():
    ws = inputs.default_deep(vocab_size=100, max_tokens=300)
    assert [len(r) for r in ws.requests] == [16, 64, 256, 300]
    assert all(0 <= t < 100 for r in ws.requests for t in r)
    assert inputs.default_deep(100, 300).requests == ws.requests  # deterministic


def test_percentile():
    assert percentile([3, 1, 2], 0.5) == 2
    assert percentile([1, 2, 3, 4], 0.5) == 2.5
    assert percentile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], 0.95) == pytest.approx(10.5)
    assert percentile([5], 0.95) == 5


def test_predictions():
    phases = {"weights_read": 2.0, "weights_to_device": 1.0, "other": 7.0}
    preds = predictions(10.0, phases, size_bytes=1000, disk_bps=500, h2d_bps=1000)
    assert [(p["eta"], p["load_seconds"], p["t_cold_seconds"]) for p in preds] == [
        (0.0, 3.0, 10.0), (0.9, pytest.approx(0.3), pytest.approx(7.3)), (1.0, 0.0, 7.0)]


def test_config_validation_names_the_field():
    from scaler.probe.config import LoadSpec, ModelSpec, WarmupSpec

    with pytest.raises(ProbeError, match="--h2d"):
        ProbeConfig(load=LoadSpec(h2d="dma")).validated()
    with pytest.raises(ProbeError, match="--scheduling-seconds"):
        ProbeConfig(scheduling_seconds=float("inf")).validated()
    with pytest.raises(ProbeError, match="--steady-requests"):
        ProbeConfig(warmup=WarmupSpec(steady_requests=0)).validated()
    with pytest.raises(ProbeError, match="--module"):
        ProbeConfig(model=ModelSpec(weights="w.safetensors")).validated()
    assert ProbeConfig(model=ModelSpec(weights="/x/My-Model.safetensors", module="a:b")).model.display_name == "My-Model"
    assert ProbeConfig().model.display_name == "builtin-125M"


def test_page_cache_eviction_and_residency(tmp_path):
    path = tmp_path / "blob"
    path.write_bytes(os.urandom(1 << 20))
    before = pagecache.resident_fraction(path)
    if before is None:
        pytest.skip("mincore is not available here")
    assert before > 0.9  # just written
    ev = pagecache.evict(path, requested=True)
    assert ev.requested and ev.resident_before == pytest.approx(before)
    if ev.supported:
        assert ev.evicted and ev.resident_after <= 0.02
    kept = pagecache.evict(path, requested=False)
    assert not kept.requested and kept.as_dict()["method"] is None


# ------------------------------------------------------------------ read_cold_start on things that are not reports

def _report(**over) -> dict:
    phases = {p: 1.0 for p in ("runtime_import", "device_init", "weights_read", "weights_to_device",
                               "first_inference", "warmup_shallow", "warmup_deep", "warmup_concurrent",
                               "steady_inference")}
    base = {"schema": "forescale.probe/v1", "status": "ok", "phases": phases,
            "extras": {"image_pull_seconds": 2.0, "scheduling_seconds": 1.0}, "t_cold_seconds": 12.0}
    base.update(over)
    return base


def test_read_cold_start_accepts_a_report(tmp_path):
    p = tmp_path / "r.json"
    p.write_text(json.dumps(_report()))
    assert read_cold_start(p) == 12.0


@pytest.mark.parametrize("content, needle", [
    ("not json", "not JSON"),
    ("[1, 2]", "not a probe report"),
    (json.dumps({"trace": {}, "policies": {}}), "schema None"),
    (json.dumps(_report(schema="other/v9")), "schema 'other/v9'"),
    (json.dumps(_report(status="failed", reason="--weights x: no such file")), "no such file"),
    (json.dumps(_report(t_cold_seconds="12")), "not a positive number"),
    (json.dumps(_report(t_cold_seconds=-1)), "not a positive number"),
    (json.dumps(_report(t_cold_seconds=13.0)), "differs from the sum"),
    (json.dumps(_report(phases={"a": 1})), "phases should be"),
])
def test_read_cold_start_rejects(tmp_path, content, needle):
    p = tmp_path / "r.json"
    p.write_text(content)
    with pytest.raises(ProbeReportError) as e:
        read_cold_start(p)
    assert needle in str(e.value) and str(p) in str(e.value)
    assert isinstance(e.value, ValueError)


def test_read_cold_start_missing_file(tmp_path):
    with pytest.raises(ProbeReportError, match="cannot read the probe report"):
        read_cold_start(tmp_path / "absent.json")


def test_torch_files_legacy_and_wrapped(tmp_path):
    torch = pytest.importorskip("torch")
    from scaler.probe import weights

    sd = {"a": torch.randn(3, 4), "b": torch.arange(5)}
    legacy = tmp_path / "legacy.pt"
    torch.save(sd, legacy, _use_new_zipfile_serialization=False)  # not mmap-able: plain read fallback
    wrapped = tmp_path / "wrapped.bin"
    torch.save({"state_dict": sd}, wrapped)
    for path in (legacy, wrapped):
        info = weights.inspect_weights(str(path))
        assert info.format == "torch" and info.tensors is None
        out = weights.load(info)
        assert out.keys() == sd.keys() and all(torch.equal(out[k], sd[k]) for k in sd)


def test_safetensors_header_is_read_without_loading(tmp_path):
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    from scaler.probe import weights

    path = tmp_path / "w.safetensors"
    save_file({"x": torch.zeros(2, 3, dtype=torch.bfloat16), "y": torch.zeros(4, dtype=torch.int64)}, str(path),
              metadata={"k": "v"})
    info = weights.inspect_weights(str(path))
    assert info.tensors == {"x": ("bfloat16", (2, 3)), "y": ("int64", (4,))} and info.metadata == {"k": "v"}
    assert info.file_bytes == os.path.getsize(path)


def test_safetensors_mapping_matches_the_library_and_falls_back_when_misaligned(tmp_path):
    torch = pytest.importorskip("torch")
    import struct

    from safetensors.torch import load_file, save_file

    from scaler.probe import weights

    sd = {"a": torch.randn(3, 5), "b": torch.randn(7).half(), "c": torch.arange(3), "d": torch.zeros(0, 4),
          "e": torch.tensor(3.0), "f": torch.ones(5, dtype=torch.bool), "g": torch.randn(3).to(torch.bfloat16)}
    path = tmp_path / "t.safetensors"
    save_file(sd, str(path))
    info = weights.inspect_weights(str(path))
    assert weights._map_safetensors(info) is not None
    out, ref = weights.load(info), load_file(str(path))
    as_bytes = lambda t: t.reshape(-1).view(torch.uint8)  # noqa: E731
    for k in sd:
        assert out[k].dtype == ref[k].dtype and out[k].shape == ref[k].shape
        assert torch.equal(as_bytes(out[k]), as_bytes(ref[k]))
    out["a"].add_(1)  # a private mapping: the file is untouched
    assert torch.equal(load_file(str(path))["a"], sd["a"])

    header = json.dumps({"u": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
                         "f": {"dtype": "F32", "shape": [1], "data_offsets": [1, 5]}}).encode()
    header += b" " * (-len(header) % 8)
    odd = tmp_path / "odd.safetensors"
    odd.write_bytes(struct.pack("<Q", len(header)) + header + bytes([7]) + struct.pack("<f", 1.5))
    info = weights.inspect_weights(str(odd))
    assert weights._map_safetensors(info) is None  # F32 at an odd offset
    out = weights.load(info)
    assert out["u"].tolist() == [7] and out["f"].tolist() == [1.5]
