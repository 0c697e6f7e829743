"""``backtest --scaledobject FILE.yaml`` and ``--trigger-series NAME=CSV``: manifests and series read for the replay."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import click
import numpy as np

from .options import fail

from ..manifest_yaml import MAX_MANIFEST_BYTES


def scaledobject_options(f):
    """--scaledobject, --trigger-series and --events-map; the command gets ``plans`` (the ScaledObjects read, before
    anything else) instead of the files, and its world options from their ``forescale.io/replay`` annotations where
    the command line left them at their defaults (``replayflags.apply``)."""

    @functools.wraps(f)
    def wrapper(*args, scaledobject_files: tuple[str, ...] = (), **kw):
        from . import replayflags

        plans = load_plans(scaledobject_files)
        if plans:
            replayflags.apply(click.get_current_context(), plans, kw)
        return f(*args, plans=plans, **kw)

    for opt in reversed((
        click.option("--scaledobject", "scaledobject_files", multiple=True, metavar="FILE.yaml",
                     help="Also replay each KEDA ScaledObject in this file (several documents are fine, other kinds "
                          "are skipped; - for stdin) exactly as KEDA and the HPA run it, as a policy named by its "
                          "metadata.name. Repeatable."),
        click.option("--trigger-series", "trigger_series", multiple=True, metavar="NAME=CSV",
                     help="A prometheus trigger's series for --scaledobject: NAME is the trigger's name (or "
                          "SCALEDOBJECT/TRIGGER), CSV a file with a header timestamp,value; NAME=observed uses "
                          "the trace's own rate over 2 min. With --prometheus, a trigger without one has its own query fetched from "
                          "there. Repeatable."),
        click.option("--events-map", "events_map", multiple=True, metavar="PATH=FILE",
                     help="For --scaledobject: a forescale trigger whose eventsFile is PATH (a path in the scaler's "
                          "pod, where its ConfigMap is mounted) reads FILE here instead. Without it such a trigger "
                          "reads --events, else PATH itself if it is a file here, else the run stops naming it. "
                          "Repeatable."),
    )):
        wrapper = opt(wrapper)
    return wrapper


def load_plans(files: tuple[str, ...]) -> list:
    """The ScaledObjects of the files as ``manifest.Plan``s; exits 2 naming the file, document and field."""
    from ..manifest_yaml import YamlError, load_all
    from ..replay.manifest import plans
    from ..replay.manifestfields import ManifestError

    docs = []
    for name in files:
        try:
            if name == "-":
                text = sys.stdin.read(MAX_MANIFEST_BYTES + 1)
                label = "stdin"
            else:
                p = Path(name)
                if not p.is_file():
                    fail(f"--scaledobject {name}: no such file (a YAML file holding KEDA ScaledObjects)")
                if p.stat().st_size > MAX_MANIFEST_BYTES:
                    fail(f"--scaledobject {name}: larger than {MAX_MANIFEST_BYTES // 1024 // 1024} MiB; a "
                         f"ScaledObject manifest is a few KiB")
                text, label = p.read_text(encoding="utf-8", errors="replace"), name
            for i, doc in enumerate(load_all(text)):
                docs.append((f"{label} document {i + 1}", doc))
        except YamlError as e:
            fail(f"--scaledobject {name}: {e}")
    try:
        out = plans(docs)
    except ManifestError as e:
        fail(str(e))
    from ..replay.variants import POLICIES
    from ..replay.world import PLACEHOLDER

    for plan in out:
        if plan.name in POLICIES or plan.name == PLACEHOLDER:
            fail(f"{plan.where}: ScaledObject {plan.name!r} has the name of a policy of the table; rename it "
                 f"(metadata.name): {', '.join(POLICIES + (PLACEHOLDER,))} are taken")
    if files and not out:
        fail(f"--scaledobject {', '.join(files)}: no ScaledObject (apiVersion keda.sh/v1alpha1, kind ScaledObject) "
             f"in {len(docs)} document(s)")
    return out


def load_series(items: tuple[str, ...]) -> dict[str, object]:
    """``NAME=CSV`` / ``NAME=observed`` pairs as ``{name: (t, y) or "observed"}``; exits 2 on bad input."""
    out: dict[str, object] = {}
    for item in items:
        name, sep, src = item.partition("=")
        if not sep or not name or not src:
            fail(f"--trigger-series {item[:80]!r}: accepted is NAME=FILE.csv or NAME=observed")
        if src == "observed":
            out[name] = "observed"
            continue
        from ..replay.engine import ReplayError
        from .traces import text_file

        try:  # the trace reader's byte sniffing: gzip, UTF-16, a byte that is not UTF-8 named with its line
            with text_file(Path(src), "a CSV with a header timestamp,value", f"--trigger-series {name}:") as plain:
                data = np.genfromtxt(plain, delimiter=",", names=True, dtype=None, encoding="utf-8-sig",
                                     max_rows=5_000_000)
            cols = data.dtype.names or ()
            if len(cols) < 2:
                raise ValueError("need two columns")
            t = _times(data[cols[0]])
            y = np.asarray(data[cols[1]], dtype=np.float64)
        except ReplayError as e:
            fail(str(e))
        except (ValueError, TypeError) as e:
            fail(f"--trigger-series {name}: {src}: expected a CSV with a header timestamp,value (epoch seconds or "
                 f"ISO-8601, a number or empty for a failed poll): {str(e)[:120]}")
        order = np.argsort(t, kind="stable")
        out[name] = (t[order], y[order])
    return out


def check_series(plans: list, series: dict[str, object]) -> None:
    """Every prometheus trigger has its series before any fit starts, and every series a prometheus trigger;
    else exit 2 naming it."""
    known = {k for p in plans for t in p.triggers if t.kind == "prometheus" for k in (t.name, f"{p.name}/{t.name}")}
    for name in series:
        if name not in known:
            fail(f"--trigger-series {name}: no prometheus trigger of the --scaledobject files has that name; "
                 f"accepted: {', '.join(sorted(known)) or '(no prometheus trigger)'}")
    for p in plans:
        for t in p.triggers:
            if t.kind == "prometheus" and t.name not in series and f"{p.name}/{t.name}" not in series:
                fail(f"{p.where} (ScaledObject {p.name!r}): {t.where} (prometheus trigger {t.name!r}) needs its "
                     f"series: give --trigger-series {t.name}=FILE.csv (timestamp,value) or {t.name}=observed (the "
                     f"trace's own rate over 2 min), or read the traffic with --prometheus to fetch its query")


def _times(col) -> np.ndarray:
    try:
        return np.asarray(col, dtype=np.float64)
    except (ValueError, TypeError):
        from .traces import parse_time

        return np.array([parse_time(str(x), now=0.0) for x in col], dtype=np.float64)


def fetch_missing(plans: list, series: dict[str, object], prometheus_url: str | None, trace) -> dict[str, object]:
    """With ``--prometheus``: each prometheus trigger without a ``--trigger-series`` gets its own ``query`` over
    the trace's range and step, from the same Prometheus (``traces.load_prometheus``). Exits 2 on failure."""
    if not prometheus_url:
        return series
    from ..replay.engine import ReplayError
    from . import traces

    out = dict(series)
    s = trace.series
    for p in plans:
        for t in p.triggers:
            if t.kind != "prometheus" or t.name in out or f"{p.name}/{t.name}" in out:
                continue
            if not t.query:
                fail(f"{p.where} (ScaledObject {p.name!r}): {t.where}.metadata.query is empty: nothing to fetch")
            try:
                tr = traces.load_prometheus(prometheus_url, t.query, float(s.t[0]), float(s.t[-1] + s.step), s.step)
            except ReplayError as e:
                fail(f"{p.where} (ScaledObject {p.name!r}), {t.where}: {e}")
            out[f"{p.name}/{t.name}"] = (np.asarray(tr.series.t, dtype=float), np.asarray(tr.series.y, dtype=float))
    return out


def resolve_events(plans: list, items: tuple[str, ...], run_events: tuple | None) -> list:
    """Each forescale trigger that sets ``eventsFile`` with its events, read from (first that applies)
    ``--events-map PATH=FILE``, the run's ``--events`` (``run_events``), or PATH itself when it is a file here;
    else exit 2 naming the field and what is accepted. A floor above maxReplicaCount x qpsPerReplica exits 2."""
    from forecaster.calendar import CalendarError
    from forecaster.eventsfile import check_floors, load_events

    from ..replay.manifest import with_events

    mapping: dict[str, str] = {}
    for item in items:
        path, sep, local = item.partition("=")
        if not sep or not path or not local:
            fail(f"--events-map {item[:80]!r}: accepted is PATH=FILE (PATH: a trigger's eventsFile, FILE: a file here)")
        mapping[path] = local
    declared = {t.spec.events_file for p in plans for t in p.triggers if t.spec is not None and t.spec.events_file}
    for path in mapping:
        if path not in declared:
            fail(f"--events-map {path}: no forescale trigger of the --scaledobject files has eventsFile {path!r}; "
                 f"accepted: {', '.join(repr(x) for x in sorted(declared)) or '(no trigger sets eventsFile)'}")

    def read(p, t) -> tuple[tuple, str]:
        path, events = t.spec.events_file, None
        where = f"{p.where} (ScaledObject {p.name!r}): {t.where}.metadata.eventsFile {path!r}"
        if path in mapping:
            source = mapping[path]
        elif run_events is not None:
            events, source = run_events, "--events"
        elif Path(path).is_file():
            source = path
        else:
            fail(f"{where} is not a file here (it is a path in the scaler's pod, where the ConfigMap is mounted); "
                 f"accepted: --events FILE (for every trigger that sets eventsFile) or --events-map {path}=FILE")
        try:
            if events is None:
                events = load_events(source)
            check_floors(events, p.hpa.max_replicas * t.spec.qps_per_replica, source=source)
        except CalendarError as e:
            fail(f"{where}: {e}" + (f" (maxReplicaCount {p.hpa.max_replicas} x qpsPerReplica "
                                     f"{t.spec.qps_per_replica:g})" if "maxReplicaCount" in str(e) else ""))
        return events, source

    return with_events(plans, read)
