"""scaler.loadtest's import direction (cli -> loadtest; never loadtest -> serve | replay | cli | probe), checked
on the source with ``ast``; the project-wide rules live in tests/test_architecture.py."""

from __future__ import annotations

import ast

from support.paths import REPO

FORBIDDEN = ("scaler.serve", "scaler.replay", "scaler.cli", "scaler.probe", "click", "tqdm", "matplotlib")


def imported(path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: inside scaler.loadtest (level 1) or above it
                base = ".".join(["scaler", "loadtest"][: 3 - node.level] + ([base] if base else []))
            out |= {base} | {f"{base}.{a.name}" for a in node.names}
    return out


def test_loadtest_imports_neither_serve_replay_cli_nor_ui_libraries():
    files = sorted((REPO / "scaler" / "loadtest").glob("*.py"))
    assert len(files) >= 6
    bad = {f.name: sorted(n for n in imported(f) if any(n == p or n.startswith(p + ".") for p in FORBIDDEN))
           for f in files}
    assert not any(bad.values()), bad
    stats = imported(REPO / "scaler" / "loadtest" / "stats.py")  # the pure part: no I/O libraries either
    assert not any(n.split(".")[0] in ("aiohttp", "httpx", "asyncio", "socket", "json", "os") for n in stats), stats


def test_the_check_sees_a_violation(tmp_path):
    p = tmp_path / "x.py"
    p.write_text("from ..serve import server\nimport matplotlib.pyplot\n")
    found = imported(p)
    assert "scaler.serve.server" in found and "matplotlib.pyplot" in found
