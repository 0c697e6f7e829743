"""Capacity model files for tests (``scaler.capacity``'s format), written with known figures."""

from __future__ import annotations

import json
from pathlib import Path

from scaler.capacity import CapacityModel, Fit, Point, document


def azure_model_file(tmp_path: Path, lengths: tuple[float, float], name: str = "azure-code-llm") -> Path:
    """Q 2.5 req/s and T 125 weighted tokens/s at w 0.02, margin 0.2: in force Q' = 2 and T' = 100 (the budget of
    tests/cli/test_backtest_tokens.py: --qps-per-replica 2 --tokens-per-replica 100 --input-token-weight 0.02),
    measured on ``lengths`` weighted tokens per request."""
    m = CapacityModel(name, "1x test GPU", Fit(2.5, 125.0, 0.02, 0.03, 0.02), 0.2, lengths, (100.0, 8000.0),
                      (1.0, 500.0), (Point(100, 1, 2.5), Point(8000, 500, 125 / 660)))
    p = tmp_path / f"{name}.json"
    p.write_text(json.dumps(document(m, version="test")))
    return p
