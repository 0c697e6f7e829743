"""The probe's inference endpoint: the batcher's arithmetic on a real torch model, and POST /v1/completions."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from scaler.probe import ModelSpec, ProbeConfig, WarmupSpec
from scaler.probe.completions import Engine, Overloaded, Rejected, decode, encode
from scaler.probe.runner import Probe

torch = pytest.importorskip("torch")
from scaler.probe.builtin import Arch, build  # noqa: E402


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build(Arch(vocab_size=512, d_model=64, n_layers=2, max_positions=64)).eval()


def greedy(model, prompt: list[int], n: int) -> list[int]:
    """The reference: one request alone, the whole sequence through the model at every step."""
    ids = list(prompt)
    with torch.inference_mode():
        for _ in range(n):
            ids.append(int(model(torch.tensor([ids]))[0, -1].argmax()))
    return ids[len(prompt):]


def test_batched_requests_get_the_tokens_they_would_get_alone(model):
    prompts = [[1, 2, 3], list(range(10, 30)), [7] * 11]
    engine = Engine(model, torch.device("cpu"), 512, 64, max_batch=3)
    # queued before the worker starts: the three share every step, right-padded to the longest sequence
    reqs = [engine.submit(p, 6) for p in prompts]
    engine.start()
    try:
        got = [list(c.results(timeout=30)) for c in reqs]
        late = engine.submit([5, 6], 4)  # joins an idle engine later: the batch admits it between steps
        assert list(late.results(timeout=30)) == greedy(model, [5, 6], 4)
    finally:
        engine.stop()
    assert got == [greedy(model, p, 6) for p in prompts]
    assert all(len(t) == 6 for t in got)


def test_a_user_module_is_served_the_same_way(monkeypatch):
    """A user's module (forward(ids) -> logits, any vocabulary): no position limit unless one is given."""
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent))
    from support import probe_user_model as um

    torch.manual_seed(1)
    user = um.build(hidden=16, vocab=300).eval()
    engine = Engine(user, torch.device("cpu"), 300, None, max_batch=2).start()
    try:
        a, b = engine.submit(encode("hello", 300), 5), engine.submit(encode("a longer prompt", 300), 3)
        assert list(a.results(timeout=30)) == greedy(user, encode("hello", 300), 5)
        assert list(b.results(timeout=30)) == greedy(user, encode("a longer prompt", 300), 3)
    finally:
        engine.stop()


def test_queue_bound_and_positions(model):
    engine = Engine(model, torch.device("cpu"), 512, 64, max_batch=1, max_queue=2)  # not started: nothing drains
    engine.submit([1], 1)
    engine.submit([2], 1)
    with pytest.raises(Overloaded, match="queue is full \\(2 requests waiting\\)"):
        engine.submit([3], 1)
    with pytest.raises(Rejected, match="prompt \\(60 tokens\\) \\+ max_tokens \\(5\\) exceeds this model's 64"):
        engine.submit([0] * 60, 5)
    engine.stop()


def test_byte_tokenizer_round_trip():
    assert encode("hé", 4096) == [104, 195, 169] and decode([104, 195, 169]) == "hé"
    assert encode("", 4096) == [0]
    assert encode("z", 100) == [122 % 100]   # folded below a small vocabulary
    assert decode([72, 300, 105]) == "H<300>i"


# ------------------------------------------------------------------ over HTTP, from a library probe

def post(url: str, body, raw: bool = False) -> tuple[int, str]:
    data = body if raw else json.dumps(body).encode()
    req = urllib.request.Request(url + "/v1/completions", data=data, method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    config = ProbeConfig(model=ModelSpec(size=1_000_000, cache_dir=str(tmp_path_factory.mktemp("cmpl-cache"))),
                         warmup=WarmupSpec(steady_requests=2, shallow_requests=1, shallow_tokens=16,
                                           request_tokens=8, max_input_tokens=64))
    probe = Probe(config)
    server = probe.serve("127.0.0.1", 0, max_batch=4)
    try:
        code, body = post(server.url, {"prompt": "early"})  # pending: not ready, nothing to serve yet
        assert code == 503 and json.loads(body)["error"]["message"].startswith("not ready")
        probe.start()
        assert probe.wait(120) and probe.error is None
        yield probe, server.url
    finally:
        probe.mark_stopping()
        probe.close()


def test_completion_and_its_stream_agree(served):
    probe, url = served
    code, body = post(url, {"prompt": "Hello", "max_tokens": 5})
    assert code == 200, body
    doc = json.loads(body)
    assert doc["object"] == "text_completion" and doc["model"] == "builtin-1M"
    assert doc["usage"] == {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}
    choice = doc["choices"][0]
    assert choice["finish_reason"] == "length"
    code, body = post(url, {"prompt": "Hello", "max_tokens": 5, "stream": True})
    assert code == 200
    events = [line[len("data: "):] for line in body.split("\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]" and len(events) == 5 + 2  # a token per event, the finish event, [DONE]
    texts = [json.loads(e)["choices"][0]["text"] for e in events[:-1]]
    assert "".join(texts) == choice["text"]  # greedy: the same tokens either way
    assert json.loads(events[-2])["choices"][0]["finish_reason"] == "length"


def test_concurrent_requests_all_answered(served):
    _, url = served
    results: list[int] = []
    threads = [threading.Thread(target=lambda i=i: results.append(post(url, {"prompt": f"r{i}", "max_tokens": 3})[0]))
               for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == [200] * 8


@pytest.mark.parametrize("body, needle, param", [
    (b"{nope", "the body is not JSON", None),
    (b"[1]", "the body is a JSON list", None),
    (b'{"max_tokens": 3}', "prompt: missing or not a string", "prompt"),
    (b'{"prompt": "x", "max_tokens": 0}', "max_tokens: '0' is not an integer >= 1", "max_tokens"),
    (b'{"prompt": "x", "stream": "yes"}', "stream: accepted: true or false", "stream"),
    (b'{"prompt": "x", "max_tokens": 100}', "exceeds this model's 64 positions", "max_tokens"),
])
def test_bad_requests_are_400_and_counted(served, body, needle, param):
    probe, url = served
    def count() -> float:
        return probe.metrics.registry.get_sample_value("forescale_requests_total",
                                                       {"model": "builtin-1M", "code": "400"}) or 0.0

    before = count()
    code, text = post(url, body, raw=True)
    err = json.loads(text)["error"]
    assert code == 400 and needle in err["message"] and err["param"] == param
    assert err["type"] == "invalid_request_error"
    assert count() == before + 1


def test_metrics_count_what_was_served(served):
    _, url = served
    with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
        families = {f.name: f for f in text_string_to_metric_families(r.read().decode())}
    ok = sum(s.value for s in families["forescale_requests"].samples
             if s.name == "forescale_requests_total" and s.labels["code"] == "200")
    latency = next(s.value for s in families["forescale_request_duration_seconds"].samples if s.name.endswith("_count"))
    ttft = next(s.value for s in families["forescale_time_to_first_token_seconds"].samples if s.name.endswith("_count"))
    assert ok >= 2 and latency == ok and ttft == ok
    assert families["forescale_queue_depth"].samples[0].value == 0
    req = urllib.request.Request(url + "/v1/other", data=b"{}", method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=5)
    assert e.value.code == 404
