"""No import circle in ``scaler/`` and ``forecaster/``, by an independent tool: grimp (import-linter's graph
builder) reads the packages' imports itself, and a circle is an import ``a -> b`` for which grimp finds a chain
``b -> ... -> a``. ``tests/test_architecture.py`` checks the same on its own ``ast`` graph; the two must agree."""

from __future__ import annotations

import grimp


def test_grimp_finds_no_import_circle():
    graph = grimp.build_graph("scaler", "forecaster", include_external_packages=False)
    modules = sorted(m for m in graph.modules if not m.startswith("scaler._proto"))
    assert len(modules) > 100, len(modules)  # it sees the tree
    circles = []
    for a in modules:
        for b in sorted(graph.find_modules_directly_imported_by(a)):
            if b.startswith("scaler._proto") or b == a:
                continue
            chain = graph.find_shortest_chain(importer=b, imported=a)
            if chain is not None:
                circles.append(" -> ".join((a,) + tuple(chain)))
    assert not circles, "import circles:\n" + "\n".join(circles)
