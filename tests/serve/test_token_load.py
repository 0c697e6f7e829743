"""``tokenQuery``: the binding load of requests and tokens, read from a real Prometheus holding vLLM's counters."""

from __future__ import annotations

import numpy as np
import pytest

from scaler.prom import PrometheusClient
from scaler.serve.load import load_series, observed_load
from scaler.spec import PrometheusTarget, parse_metadata
from support import promfixture as pf

END = 1_780_000_000.0  # the data's last sample (epoch s; nothing scrapes: the head is empty)
SHIFT = END - 3600.0  # the output length doubles here
REQ = "sum(rate(vllm:request_success_total[2m]))"
TOK = "sum(rate(vllm:generation_tokens_total[2m])) + 0.02 * sum(rate(vllm:prompt_tokens_total[2m]))"


def counter(name: str, t: np.ndarray, rate: np.ndarray) -> pf.SeriesSpec:
    inc = np.concatenate([[0.0], np.diff(t) * rate[1:]])
    return pf.SeriesSpec(name, {"model_name": "m"}, "counter", t, np.cumsum(inc))


@pytest.fixture(scope="module")
def prom():
    # 2 h at 15 s: 10 requests/s of 2,000 prompt tokens each (20,000/s); 300 generated tokens/s, 600 after SHIFT
    t = pf.sample_times(END - 7200.0, END)
    gen = np.where(t < SHIFT, 300.0, 600.0)
    series = [counter("vllm:request_success", t, np.full(len(t), 10.0)),
              counter("vllm:prompt_tokens", t, np.full(len(t), 20000.0)),
              counter("vllm:generation_tokens", t, gen)]
    with pf.PrometheusServer(series) as p:
        yield PrometheusClient(PrometheusTarget(p.url, timeout_seconds=30.0))


def spec(token_query: str | None = TOK):
    md = {"serverAddress": "http://127.0.0.1:9", "query": REQ, "qpsPerReplica": "2"}
    if token_query:
        md.update(tokenQuery=token_query, tokensPerReplica="100")
    return parse_metadata(md)[0]


def test_the_observed_load_is_the_binding_one_of_requests_and_tokens(prom):
    # weighted tokens: 0.02 x 20,000 + 300 = 700/s before the shift, 0.02 x 20,000 + 600 = 1,000/s after;
    # x qps 2 / 100 tokens per replica = 14 and 20 request-equivalents, above the 10 req/s: the tokens bind
    assert observed_load(prom, spec(), SHIFT - 600) == pytest.approx(14.0, rel=1e-6)
    assert observed_load(prom, spec(), END - 300) == pytest.approx(20.0, rel=1e-6)
    assert observed_load(prom, spec(None), END - 300) == pytest.approx(10.0, rel=1e-6)  # requests alone


def test_the_history_the_server_forecasts_is_the_same_binding_load(prom):
    s, _ = load_series(prom, spec(), END - 5400, END - 60, 60.0)
    before, after = s.y[s.t < SHIFT - 180], s.y[s.t > SHIFT + 180]  # off the 2-min rate window across the shift
    assert np.allclose(before, 14.0, rtol=1e-6) and np.allclose(after, 20.0, rtol=1e-6)
    r, _ = load_series(prom, spec(None), END - 5400, END - 60, 60.0)
    assert np.allclose(r.y, 10.0, rtol=1e-6)


def test_a_token_query_that_returns_requests_per_second_is_refused(prom):
    with pytest.raises(ValueError, match="tokenQuery is 0.5 tokens per request"):
        load_series(prom, spec(f"{REQ} / 2"), END - 3000, END - 60, 60.0)
