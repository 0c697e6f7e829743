"""forescale probe: measure T_cold of a torch model on the device at hand.

Library use (e.g. inside an inference server)::

    from scaler.probe import Probe, ProbeConfig, ModelSpec

    probe = Probe(ProbeConfig(model=ModelSpec(weights="/models/m.safetensors", module="mypkg.model:build")))
    probe.serve(host="0.0.0.0", port=8081)   # optional: /metrics, /health/{startup,ready,live}
    probe.start()                            # background thread
    probe.state()                            # ProbeState(state, phase, ready, healthy, reason, ...)
    probe.wait(); model = probe.model        # the loaded, warmed module; probe.report() -> dict

Scaler integration: the trigger metadata ``coldStartQuery`` can read the
measured T_cold from Prometheus, e.g.
``max(forescale_cold_start_seconds{phase="total",model="my-model"})``; the
backtest reads it from the JSON report with ``read_cold_start(path)``.
See README.md in this package.

Modules: ``runner`` (the timed cold start, phase by phase), ``plan`` (what it runs, resolved first), ``config``
(settings), ``builtin`` (the built-in transformer), ``weights`` (weights files), ``transfer`` (host -> device),
``pagecache``, ``inputs`` (warm-up inputs), ``inference`` (the first request, the warm-up, the figures after
readiness), ``completions`` (the inference endpoint), ``server`` (health and metrics endpoints), ``metrics``,
``report`` and ``facts`` (the report), ``errors``, ``cli`` (``forescale probe``), ``watch`` (``probe --watch``),
``exits`` (how the command ends and writes its report).
"""

from .config import LoadSpec, ModelSpec, ProbeConfig, WarmupSpec, parse_model_size
from .errors import ProbeError, ProbeReportError
from .report import PHASES, SCHEMA, load_report, read_cold_start

__all__ = ["Probe", "ProbeState", "ProbeConfig", "ModelSpec", "WarmupSpec", "LoadSpec", "ProbeError",
           "ProbeReportError", "read_cold_start", "load_report", "parse_model_size", "PHASES", "SCHEMA"]


def __getattr__(name: str):
    # Probe pulls in the runner lazily so that `import scaler.probe` (read_cold_start in the backtest) stays light.
    if name in ("Probe", "ProbeState"):
        from . import runner

        return getattr(runner, name)
    raise AttributeError(f"module 'scaler.probe' has no attribute {name!r}")
