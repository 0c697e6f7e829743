"""The loadtest grid and the capacity model it fits (issue 37, docs/llm.md), against an LLM server whose capacity
the clock sets: how close the knees come to the clock's capacity, and the fitted model to the clock's model.

The server (tests/support/fakeopenai.py ``FakeServer(tokens=(a, p, d))``): one request at a time, ``a + p x prompt +
d x answer`` seconds each, every token streamed at its time; here a = 4 ms, p = 0.2 ms per prompt token, d = 4 ms
per answer token, so its model is ``min(1 / a, (1 / d) / ((p / d) x prompt + answer)) = min(250, 250 / (0.05 x
prompt + answer))``. The grid: prompts 64, 256, 1024 tokens x answers 8, 32; the ramp from 1 req/s x 1.3 with 2
bisections, 5 s a step, held to TTFT p95 <= 1 s and ITL p95 <= 100 ms.

Printed per point: the knee, the clock's capacity and their ratio; then the fit against the clock's model.

Run: ``.venv/bin/python tests/bench/bench_capacity_grid.py [--duration S]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from click.testing import CliRunner  # noqa: E402

from support.fakeopenai import FakeServer  # noqa: E402
from scaler.capacity import read  # noqa: E402
from scaler.cli import main as cli  # noqa: E402

A, P, D = 0.004, 0.0002, 0.004


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", default="5s")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    srv = FakeServer(tokens=(A, P, D))
    with tempfile.TemporaryDirectory() as tmp:
        out, cap = Path(tmp) / "lt.json", Path(tmp) / "capacity.json"
        r = CliRunner().invoke(cli, ["loadtest", srv.url, "--grid-input", "64,256,1024", "--grid-output", "8,32",
                                     "--slo-ttft", "1s", "--slo-itl", "100ms", "--hardware", "the clock",
                                     "--duration", args.duration, "--start-rate", "1", "--ramp-factor", "1.3",
                                     "--refine", "2", "--margin", "0.2", "--json", str(out), "--capacity-model",
                                     str(cap), "--no-progress"])
        srv.stop()
        if r.exit_code != 0:
            print(r.output)
            return 1
        doc = json.loads(out.read_text())
        m = read(cap)
    print(f"{'prompt':>7} {'answer':>7} {'knee req/s':>11} {'clock req/s':>12} {'knee/clock':>11} {'model':>7} "
          f"{'error':>7}")
    for pt in doc["grid"]["points"]:
        i, o = pt["input_tokens"], pt["output_tokens"]
        clock = 1.0 / (A + P * i + D * o)
        knee = pt["capacity_rps"]
        model = float(m.capacity_rps(i, o, margin=False)[0])
        err = "-" if knee is None else f"{100 * (model / knee - 1):+.1f}%"
        print(f"{i:>7.0f} {o:>7.0f} {knee if knee is not None else float('nan'):>11.3g} {clock:>12.3g} "
              f"{'-' if knee is None else f'{knee / clock:.3f}':>11} {model:>7.3g} {err:>7}")
    f = m.fit
    print(f"\nfit: min({f.requests_per_second:.4g}, {f.tokens_per_second:.4g} / ({f.input_weight:.4g} x prompt + "
          f"answer)); fit error {100 * f.max_error:.1f} % (max), {100 * f.rms_error:.1f} % (rms) on {len(m.points)} "
          f"points")
    print(f"the clock's: min({1 / A:.4g}, {1 / D:.4g} / ({P / D:.4g} x prompt + answer)): T fit / clock "
          f"{f.tokens_per_second * D:.3f}, w fit / clock {f.input_weight / (P / D):.3f}")
    print(f"recommended (margin 0.2): qpsPerReplica {m.qps_per_replica:.4g}, tokensPerReplica "
          f"{m.token_capacity().tokens_per_replica:.4g}")
    print(f"\n{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
