"""forescale loadtest: what one replica can serve at a latency SLO (the trigger's ``qpsPerReplica``).

* ``stats``     pure: Poisson schedules, per-step statistics, the knee, the recommendation
* ``workload``  request bodies: a template or a JSONL file of prompts
* ``generator`` the aiohttp client: open loop (Poisson) and closed loop, preflight, settling
* ``run``       the plan of steps (rates, ramp, concurrency, step test) -> an Outcome
* ``report``    the JSON result (``forescale.loadtest/v1``) and reading it back (``read_qps_per_replica``)

The command is ``scaler.cli.loadtest``; this package never imports ``scaler.serve`` or ``scaler.replay``.
"""

from .report import SCHEMA, LoadtestReportError, read_capacity, read_qps_per_replica

__all__ = ["SCHEMA", "LoadtestReportError", "read_capacity", "read_qps_per_replica"]
