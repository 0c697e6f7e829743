"""Helpers shared by the tests (never imported by the product, never a test file):

* ``paths``            where the repository, fixtures, golden files and the shared traces are
* ``clock``            ``FakeClock``, moved by hand
* ``fakes``            a scripted fake Prometheus client for the serving parts' unit tests
* ``promfixture``      a real Prometheus on loopback, backfilled with promtool
* ``scaler``           a real forescale server in-process, driven over real gRPC
* ``grpc_bench``       the round-robin GetMetrics caller shared by the gRPC benchmarks
* ``probe_user_model`` a user's model module for ``forescale probe --module``
* ``procs``            stopping a process a test started (SIGTERM, then SIGKILL), the URL it announces
* ``traces``           synthetic trace files (a daily ramp) for the CLI tests
* ``fakeopenai``       a fake OpenAI-compatible server whose capacity the clock sets (the load generator's tests)
* ``fakevllm``         a fake vLLM: completions served on the clock, vLLM's metric names on /metrics
* ``capacityfiles``    capacity model files with known figures
"""
