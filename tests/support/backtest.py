"""``forescale backtest`` on the bundled Azure LLM trace, for the command-line tests of tokens and the closed loop."""

from __future__ import annotations

from click.testing import CliRunner

from scaler.cli import main

from .paths import REPO

AZURE = REPO / "scaler" / "data" / "azure_llm_code" / "per_10s.csv"
# its 45 minutes at 10 s, 10 min of history, T_cold 60 s, 2 req/s per replica, reactive alone (no model: fast)
AZURE_ARGS = ["--span", "45m", "--history", "10m", "--step", "10s", "--cold-start", "60", "--refit", "15m",
              "--policies", "reactive", "--qps-per-replica", "2", "--no-progress"]


def backtest(*args: str):
    return CliRunner().invoke(main, ["backtest", *args], catch_exceptions=False)
