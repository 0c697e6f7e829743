"""Architecture rules, checked on the source (``ast``), never by importing the code.

Production modules are the ``.py`` files under ``scaler/`` and ``forecaster/``, except the
generated stubs in ``scaler/_proto/``. Module-level and function-local imports count alike;
relative imports are resolved against the file's package.

1. Forbidden imports:
   * ``forecaster.*`` never imports ``scaler`` (anything under it);
   * ``scaler.replay.*`` never imports ``scaler.serve`` or ``scaler.cli``;
   * ``scaler.serve.*`` never imports ``scaler.cli``; only ``scaler.serve.tuning`` imports ``scaler.replay``;
   * the core (``scaler.spec``, ``scaler.keys``, ``scaler.params``, ``scaler.scaledobject``, ``scaler.policy``,
     ``scaler.deadband``, ``scaler.prom``) never imports
     ``scaler.serve``, ``scaler.replay``, ``scaler.cli`` or ``scaler.probe``;
   * ``click``, ``tqdm``, ``matplotlib`` are imported only by ``scaler.cli.*`` and ``scaler.probe.*``.
2. No module-private name of another project module: neither ``from x import _name`` nor
   ``alias._name`` with ``alias`` bound to an imported project module. Dunders are fine, and
   so is a package importing its own private submodule (``from . import _common``).
3. No production module over 400 lines (``LONG_MODULES`` lists the exceptions, each with its reason, and none of
   them over 500); no function over 100 lines, none over 80 in ``scaler/replay/`` (``LONG_FUNCTIONS`` lists the
   exceptions, each with its reason). An exception no longer needed (the module or function is back under its
   limit, or gone) fails too, so the lists only shrink.
5. No import circle among production modules: the graph of their imports (module-level, function-local and
   ``TYPE_CHECKING`` ones alike; ``from a import b`` is an import of ``a.b`` when that is a module, else of ``a``)
   has no cycle. ``tests/test_import_cycles.py`` checks the same with an independent tool (grimp).
4. Test files never import test files: outside ``tests/support/`` and ``conftest.py``, nothing
   under ``tests/`` imports a ``test_*`` module or any module of ``tests/`` but ``support.*``.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"
PACKAGES = ("scaler", "forecaster")
MAX_LINES = 400
MAX_LINES_CEILING = 500  # not even a stated exception goes past this
# production modules allowed over MAX_LINES (up to MAX_LINES_CEILING), and why
LONG_MODULES: dict[str, str] = {}  # path -> why it may exceed MAX_LINES (never MAX_LINES_CEILING); none today
UI_LIBS = ("click", "tqdm", "matplotlib")
MAX_FUNCTION = 100
MAX_REPLAY_FUNCTION = 80
# functions allowed over their limit, and why
LONG_FUNCTIONS: dict[tuple[str, str], str] = {}  # (file, function) -> why; none today
CORE = ("scaler.spec", "scaler.policy", "scaler.deadband", "scaler.prom", "scaler.keys", "scaler.params",
        "scaler.scaledobject")


# ----------------------------------------------------------------------------- walking

def under(name: str, *prefixes: str) -> bool:
    """``name`` is one of ``prefixes`` or inside one of them."""
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def module_name(rel: str) -> str:
    parts = list(Path(rel).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def from_base(node: ast.ImportFrom, rel: str) -> str:
    """The absolute module of ``from <base> import ...``, relative levels resolved."""
    if not node.level:
        return node.module or ""
    package = module_name(rel).split(".")[: None if rel.endswith("__init__.py") else -1]
    package = package[: len(package) - node.level + 1]
    return ".".join(package + ([node.module] if node.module else []))


@cache
def production_files() -> tuple[str, ...]:
    files = (p.relative_to(REPO).as_posix() for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py"))
    return tuple(sorted(f for f in files if not f.startswith("scaler/_proto/")))


def suite_files() -> list[str]:
    files = (p.relative_to(REPO).as_posix() for p in TESTS.rglob("*.py"))
    return sorted(f for f in files if not f.startswith("tests/support/") and Path(f).name != "conftest.py")


@cache
def project_modules() -> frozenset[str]:
    return frozenset(module_name(f) for f in production_files())


@cache
def parsed(rel: str) -> tuple[str, ast.Module]:
    text = (REPO / rel).read_text(encoding="utf-8")
    return text, ast.parse(text, filename=rel)


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and (base := dotted(node.value)):
        return f"{base}.{node.attr}"
    return None


def report(violations: list[str]) -> str:
    return f"{len(violations)} violation(s):\n" + "\n".join(sorted(set(violations)))


# ----------------------------------------------------------------------------- rules

def forbidden_reasons(importer: str, target: str) -> list[str]:
    """Why module ``importer`` may not import module ``target`` (empty: it may)."""
    rules = [
        (under(importer, "forecaster") and under(target, "scaler"), "forecaster must not import scaler"),
        (under(importer, "scaler.replay") and under(target, "scaler.serve", "scaler.cli"),
         "scaler.replay must not import scaler.serve/scaler.cli"),
        (under(importer, "scaler.serve") and under(target, "scaler.cli"), "scaler.serve must not import scaler.cli"),
        (under(importer, "scaler.serve") and under(target, "scaler.replay") and importer != "scaler.serve.tuning",
         "only scaler.serve.tuning may import scaler.replay"),
        (under(importer, "scaler.fleet") and under(target, "scaler.serve", "scaler.cli"),
         "scaler.fleet must not import scaler.serve/scaler.cli"),
        (under(importer, "scaler.replay") and under(target, "scaler.fleet", "scaler.loadtest"),
         "scaler.replay must not import scaler.fleet/scaler.loadtest"),
        (under(importer, "scaler.loadtest") and under(target, "scaler.serve", "scaler.replay", "scaler.cli",
                                                       "scaler.fleet"),
         "scaler.loadtest must not import scaler.serve/replay/cli/fleet"),
        (importer in CORE and under(target, "scaler.serve", "scaler.replay", "scaler.cli", "scaler.probe",
                                    "scaler.fleet", "scaler.loadtest"),
         "core (spec/policy/prom) must not import serve/replay/cli/probe"),
        (under(target, *UI_LIBS) and not under(importer, "scaler.cli", "scaler.probe"),
         "click/tqdm/matplotlib only in scaler.cli/scaler.probe"),
    ]
    return [why for broken, why in rules if broken]


def import_violations(rel: str, tree: ast.AST) -> list[str]:
    importer, found = module_name(rel), {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):  # `from a import b` may import module a or module a.b
            base = from_base(node, rel)
            targets = [base] + [f"{base}.{a.name}" for a in node.names if a.name != "*"]
        else:
            continue
        for target in targets:
            for why in forbidden_reasons(importer, target):  # keep the most specific target per line and rule
                if len(target) > len(found.get((node.lineno, why), "")):
                    found[node.lineno, why] = target
    return [f"{rel}:{line}: forbidden import: {why} (imports {t})" for (line, why), t in found.items()]


def private_violations(rel: str, tree: ast.AST, modules: frozenset[str]) -> list[str]:
    importer, out = module_name(rel), []
    bound: dict[str, str] = {}  # local name -> the module an import bound it to
    explicit: set[str] = set()  # modules named by `import a.b.c`, and their parents
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                top = a.name.partition(".")[0]
                bound[a.asname or top] = a.name if a.asname else top
                parts = a.name.split(".")
                explicit |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
        elif isinstance(node, ast.ImportFrom):
            base = from_base(node, rel)
            for a in node.names:
                target = f"{base}.{a.name}"
                if target in modules:
                    bound[a.asname or a.name] = target
                if is_private(a.name) and under(base, *PACKAGES) and not (target in modules and under(importer, base)):
                    out.append(f"{rel}:{node.lineno}: private name: `{a.name}` imported from {base}")
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and is_private(node.attr)):
            continue
        chain = dotted(node.value) or ""
        head = chain.partition(".")[0]
        if head not in bound:
            continue  # self, cls, instances, call results: not this rule
        owner = bound[head] + chain[len(head):]
        if (under(owner, *PACKAGES) and (owner in modules or owner in explicit)
                and f"{owner}.{node.attr}" not in explicit):  # `scaler._proto.x` after `import scaler._proto.x`
            out.append(f"{rel}:{node.lineno}: private name: `{chain}.{node.attr}` of module {owner}")
    return out


def import_edges(rel: str, tree: ast.AST, modules: frozenset[str]) -> set[str]:
    """The project modules ``rel`` imports (any import statement anywhere in it)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom):
            base = from_base(node, rel)
            for a in node.names:
                target = f"{base}.{a.name}"
                if target in modules:
                    out.add(target)
                elif base in modules:
                    out.add(base)
    out.discard(module_name(rel))
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def function_violations(rel: str, tree: ast.AST) -> list[str]:
    limit = MAX_REPLAY_FUNCTION if rel.startswith("scaler/replay/") else MAX_FUNCTION
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = node.end_lineno - node.lineno + 1
            if n > limit and (rel, node.name) not in LONG_FUNCTIONS:
                out.append(f"{rel}:{node.lineno}: function {node.name} is {n} lines > {limit}")
    return out


def size_violations(rel: str, text: str, exceptions: dict[str, str] = LONG_MODULES) -> list[str]:
    n = len(text.splitlines())
    limit = MAX_LINES_CEILING if rel in exceptions else MAX_LINES
    return [f"{rel}:{n}: size: {n} lines > {limit}"] if n > limit else []


def suite_local_names() -> frozenset[str]:
    """Top-level names that would import a file of tests/ (a folder of it, any file's stem), support aside."""
    names = {p.stem for p in TESTS.rglob("*.py") if p.parent != TESTS / "support"}
    names |= {p.name for p in TESTS.iterdir() if p.is_dir() and p.name[0] not in "_."} | {"tests"}
    return frozenset(names - {"support", "__init__", *PACKAGES})


def suite_import_violations(rel: str, tree: ast.AST, local: frozenset[str]) -> list[str]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            out.append(f"{rel}:{node.lineno}: test imports test: `from {'.' * node.level}{node.module or ''}`")
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names if a.name != "*"]
        else:
            continue
        bad = [n for n in names if not under(n, "support", *PACKAGES)
               and (n.split(".")[0] in local or any(p.startswith("test_") for p in n.split(".")))]
        if bad:
            out.append(f"{rel}:{node.lineno}: test imports test: `{bad[0]}`")
    return out


# ----------------------------------------------------------------------------- tests

def test_forbidden_imports():
    v = [x for f in production_files() for x in import_violations(f, parsed(f)[1])]
    assert not v, report(v)


def test_no_private_names_of_other_modules():
    v = [x for f in production_files() for x in private_violations(f, parsed(f)[1], project_modules())]
    assert not v, report(v)


def test_module_size():
    v = [x for f in production_files() for x in size_violations(f, parsed(f)[0])]
    assert not v, report(v)
    long = {f for f in production_files() if len(parsed(f)[0].splitlines()) > MAX_LINES}
    assert set(LONG_MODULES) <= long, "an exception no longer needed: " + repr(sorted(set(LONG_MODULES) - long))
    assert all(why.strip() for why in LONG_MODULES.values()), "each exception states its reason"


def test_no_import_cycle():
    modules = project_modules()
    graph = {module_name(f): import_edges(f, parsed(f)[1], modules) for f in production_files()}
    found = cycles(graph)
    assert not found, "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_function_size():
    v = [x for f in production_files() for x in function_violations(f, parsed(f)[1])]
    assert not v, report(v)
    long = {(f, n.name) for f in production_files() for n in ast.walk(parsed(f)[1])
            if isinstance(n, ast.FunctionDef) and n.end_lineno - n.lineno + 1 > MAX_REPLAY_FUNCTION}
    assert set(LONG_FUNCTIONS) <= long, "an exception no longer needed: " + repr(set(LONG_FUNCTIONS) - long)


def test_tests_never_import_test_files():
    local = suite_local_names()
    v = [x for f in suite_files() for x in suite_import_violations(f, parsed(f)[1], local)]
    assert not v, report(v)


def test_checker_sees_the_tree():
    files = production_files()
    assert len(files) > 30, files
    assert {"scaler/serve/tuning.py", "scaler/spec.py", "forecaster/base.py"} <= set(files)
    assert not any(f.startswith("scaler/_proto/") for f in files)
    assert len(suite_files()) > 20 and "tests/test_architecture.py" in suite_files()


FAKE_MODULES = frozenset({"scaler", "scaler.replay", "scaler.replay.backtest", "scaler.replay.engine",
                          "forecaster", "forecaster.models", "forecaster.models._common"})


def test_checker_flags_synthetic_sources():
    def imports(rel, src):
        return import_violations(rel, ast.parse(src))

    def private(rel, src):
        return private_violations(rel, ast.parse(src), FAKE_MODULES)  # fixed: the real tree moves

    for rel, src in [
        ("scaler/replay/x.py", "from ..serve import registry"),
        ("scaler/replay/x.py", "import scaler.cli.render"),
        ("scaler/replay/x.py", "def f():\n    from tqdm import tqdm"),  # function-local
        ("forecaster/models/x.py", "from scaler import spec"),
        ("forecaster/x.py", "import scaler"),
        ("scaler/serve/registry.py", "from ..replay import sweep"),
        ("scaler/serve/x.py", "from scaler.cli import main"),
        ("scaler/spec.py", "from .probe import report"),
        ("scaler/policy.py", "from . import serve"),
        ("scaler/serve/server.py", "import matplotlib.pyplot as plt"),
    ]:
        assert len(imports(rel, src)) == 1, (rel, src, imports(rel, src))
    assert imports("scaler/serve/tuning.py", "from ..replay import backtest as bt") == []
    assert imports("scaler/cli/x.py", "import matplotlib\nfrom ..replay import sweep\nfrom ..serve import server") == []
    assert imports("scaler/probe/cli.py", "import click\nfrom . import runner") == []
    assert imports("forecaster/models/x.py", "from ..base import Series\nfrom . import _common") == []

    for rel, src in [
        ("scaler/cli/x.py", "import scaler.replay.engine as e\ne._helper()"),
        ("scaler/cli/x.py", "import scaler.replay.backtest\nscaler.replay.backtest._slice(1)"),
        ("scaler/replay/x.py", "from . import backtest as bt\nbt._slice(1)"),
        ("scaler/replay/x.py", "from .backtest import _slice"),
        ("scaler/serve/x.py", "def f():\n    from forecaster.models import _common"),
    ]:
        assert len(private(rel, src)) == 1, (rel, src, private(rel, src))
    clean = ("from . import backtest as bt\nimport numpy as np\nfrom forecaster import __version__\n"
             "bt.run(self._x, np._private, bt.__name__, bt.Settings._fields)")
    assert private("scaler/replay/x.py", clean) == []
    assert private("forecaster/models/x.py", "from . import _common\nfrom ._common import grid") == []

    mods = frozenset({"scaler.a", "scaler.b", "scaler.c", "scaler.pkg", "scaler.pkg.m"})
    edges = import_edges("scaler/a.py", ast.parse("def f():\n    from . import b\nfrom .pkg import m, name"), mods)
    assert edges == {"scaler.b", "scaler.pkg.m", "scaler.pkg"}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []
    assert function_violations("scaler/replay/x.py", ast.parse("def f():\n" + "    x = 1\n" * 80))
    assert not function_violations("scaler/serve/x.py", ast.parse("def f():\n" + "    x = 1\n" * 80))

    assert size_violations("scaler/x.py", "x = 1\n" * (MAX_LINES + 1))
    assert not size_violations("scaler/x.py", "x = 1\n" * MAX_LINES)
    stated = {"scaler/x.py": "a reason"}
    assert not size_violations("scaler/x.py", "x = 1\n" * MAX_LINES_CEILING, stated)
    assert size_violations("scaler/x.py", "x = 1\n" * (MAX_LINES_CEILING + 1), stated)  # the ceiling holds for all
    assert size_violations("scaler/y.py", "x = 1\n" * (MAX_LINES + 1), stated)  # another module's reason is not its

    local = suite_local_names()
    for src in ("from test_spec import x", "import test_policy", "from cli.test_tune import run",
                "from e2e import helpers", "from .test_sweep import y", "import tests.support.paths"):
        assert suite_import_violations("tests/x/test_y.py", ast.parse(src), local), src
    clean = ("from support.paths import REPO\nfrom support import promfixture as pf\nimport scaler.cli\n"
             "from forecaster.models import make\nimport numpy as np\nfrom scaler.replay import sweep")
    assert suite_import_violations("tests/x/test_y.py", ast.parse(clean), local) == []
