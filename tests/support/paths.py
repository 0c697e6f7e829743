"""Where things are, from the tests' point of view."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
REPO = TESTS.parent
FIXTURES = TESTS / "fixtures"
GOLDEN = TESTS / "golden"
# the shared real traces sit next to the repository (a test that needs one fails, never skips, without them)
TRACES = REPO.parent / "shared" / "data" / "traces"
