"""``forescale check FILE.yaml...|-``: lint ScaledObjects offline as KEDA and the scaler check them.

Every ScaledObject in the files or on stdin (``-``; multi-document YAML, ``kind: List`` too; read
with the manifest loader's bounds, ``scaler.manifest_yaml``: no anchors or aliases, no repeated key)
goes through ``scaler.kedacheck``: KEDA's CRD schema (strict, as ``kubectl apply``), its admission
webhook's and operator's rules and the HPA's (``backtest --scaledobject`` refuses the same, with the
same messages). Every forescale trigger (an ``external``/``external-push`` trigger whose
``scalerAddress`` names forescale or whose keys are forescale's; other scalers' triggers,
``prometheus``, ``cron``, another external scaler, are left alone) then goes through
``scaler.spec.parse_metadata``, the function the server runs on each KEDA call, so what passes here is
what the scaler accepts. Every bad key is reported (the parser stops at the first; here a bad
optional key is dropped and a bad required one replaced by a valid stand-in, then the
parse is repeated). Unknown keys and KEDA's own warnings are warnings. Each problem
names its file, its document (1-based, in the stream) and its path in it
(``spec.triggers[1].metadata.quantile``). Exit 0 when KEDA takes every ScaledObject and every
forescale trigger parses (a ScaledObject with only KEDA's own triggers is said and accepted), 2
otherwise (and for unreadable files or YAML, or input without a ScaledObject).
"""

from __future__ import annotations

from pathlib import Path

import click

STAND_IN = {"serverAddress": "http://stand-in:9090", "query": "vector(1)", "qpsPerReplica": "1"}
FORESCALE_TYPES = ("external", "external-push")
# keys an external trigger of another scaler may well have too: they alone do not make it forescale's
SHARED_KEYS = ("scalerAddress", "serverAddress", "query", "threshold", "activationThreshold", "ignoreNullValues",
               "queryParameters", "customHeaders", "unsafeSsl", "timeout", "metricName")


def _documents(path: Path) -> list[tuple[int, dict]]:
    """(1-based document number, document) for every mapping in ``path`` (``-``: stdin); a List's items
    keep their list's number. YAML is read with the manifest loader's bounds (``scaler.manifest_yaml``)."""
    from ..manifest_yaml import MAX_MANIFEST_BYTES, YamlError, load_all

    try:
        with click.open_file(str(path), "r", encoding="utf-8") as fh:  # "-": stdin
            text = fh.read(MAX_MANIFEST_BYTES + 1)
    except (OSError, UnicodeDecodeError) as e:
        raise click.BadParameter(f"{_name(path)}: cannot read ({getattr(e, 'strerror', None) or e})",
                                 param_hint="FILE")
    try:
        docs = load_all(text)
    except YamlError as e:
        raise click.BadParameter(f"{_name(path)}: {e}", param_hint="FILE")
    out: list[tuple[int, dict]] = []
    for n, d in enumerate(docs, start=1):
        if isinstance(d, dict) and d.get("kind") == "List":
            out.extend((n, i) for i in d.get("items") or [] if isinstance(i, dict))
        elif isinstance(d, dict):
            out.append((n, d))
    return out


def _name(path: Path) -> str:
    return "<stdin>" if str(path) == "-" else str(path)


def is_forescale(trig: dict) -> bool:
    """Whether a trigger is forescale's: external(-push), and its scalerAddress names forescale or one of its
    metadata keys is forescale's own (not one KEDA's Prometheus scaler shares)."""
    from ..spec import KNOWN

    if not isinstance(trig, dict) or trig.get("type") not in FORESCALE_TYPES:
        return False
    md = trig.get("metadata")
    if not isinstance(md, dict):
        return True  # malformed: reported as forescale's, never skipped silently
    if "forescale" in str(md.get("scalerAddress", "")).lower():
        return True
    return any(k in KNOWN and k not in SHARED_KEYS for k in md)


def trigger_errors(md, name: str, namespace: str) -> tuple[list[str], list[str]]:
    """(errors, warnings) for one trigger's metadata: every bad key, not only the first."""
    from ..durations import parse_duration
    from ..keys import HOLIDAY_HISTORY
    from ..spec import MetadataError, parse_metadata

    if not isinstance(md, dict):
        return [f"metadata: expected a map of string keys to string values, got {type(md).__name__}"], []
    errors: list[str] = []  # a value that is not a string is KEDA's schema's to refuse (scaler.kedacheck)
    work = {str(k): v for k, v in md.items() if isinstance(v, str)}
    for _ in range(len(work) + len(STAND_IN) + 1):
        try:
            spec, unknown = parse_metadata(work, name=name, namespace=namespace)
        except MetadataError as e:
            if not any(f"'{e.key}'" in x for x in errors):
                errors.append(str(e))
            if e.key in STAND_IN and work.get(e.key) != STAND_IN[e.key]:
                work[e.key] = STAND_IN[e.key]
            elif e.key in work:
                del work[e.key]
            else:
                break
            continue
        warnings = [f"metadata key '{k}': unknown to forescale, ignored" for k in unknown]
        if not errors and spec.holidays and spec.history_seconds < parse_duration(HOLIDAY_HISTORY):
            warnings.append(f"metadata key 'history': {work.get('history', 'the default')} with holidays "
                            f"'{spec.holidays}' rarely holds an earlier holiday to learn from (the similar-day rule); "
                            f"give it history {HOLIDAY_HISTORY} or more")
        return errors, warnings
    return errors, []


def keda_metric_note(md: dict, name: str, namespace: str, index: int) -> str:
    """The metric name KEDA will ask forescale for: ``s<trigger index>-<metricName>``. Each forescale trigger of a
    ScaledObject is its own workload (its metadata is part of its identity), so two triggers work side by side."""
    from ..spec import parse_metadata

    # the string values, as ``trigger_errors`` parsed them: a null is pruned by the API server, anything else not a
    # string is the schema's to refuse (kedacheck)
    spec, _ = parse_metadata({str(k): v for k, v in md.items() if isinstance(v, str)}, name=name, namespace=namespace)
    return f" (KEDA asks for metric 's{index}-{spec.metric_name}')"


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path, dir_okay=False, allow_dash=True))
@click.option("--quiet", "-q", is_flag=True, help="Print errors only.")
def check_command(files: tuple[Path, ...], quiet: bool) -> None:
    """Lint ScaledObjects in FILE.yaml... (- reads stdin) offline: against KEDA's CRD schema and the rules of
    KEDA's webhook, operator and the HPA, and their forescale triggers with the scaler's own parser (other
    scalers' triggers are left alone).

    Exit 0 when KEDA would take every ScaledObject and every forescale trigger is accepted, 2 when not
    (messages name the file, the ScaledObject, the field or key, the value and what is accepted, then the
    document and the path in it). YAML anchors, aliases and repeated keys are refused.
    """
    from .. import kedacheck

    bad = checked = objects = 0
    for path in files:
        for n, doc in _documents(path):
            if doc.get("kind") != "ScaledObject" or not str(doc.get("apiVersion", "")).startswith("keda.sh/"):
                continue
            objects += 1
            before = checked
            meta = m if isinstance(m := doc.get("metadata"), dict) else {}
            name, ns = str(meta.get("name", "")), str(meta.get("namespace", "default"))
            where = f"{_name(path)}: ScaledObject {ns}/{name}"
            spec = sp if isinstance(sp := doc.get("spec"), dict) else {}
            found = kedacheck.problems(doc)  # KEDA's schema, webhook and operator (backtest refuses the same)
            for p in found:
                if not (p.warning and quiet):
                    click.echo(f"{where}: {'warning: ' if p.warning else ''}{p.message} -- document {n}, {p.path}",
                               err=True)
            bad += any(not p.warning for p in found)
            triggers = ts if isinstance(ts := spec.get("triggers"), list) else []
            for i, trig in enumerate(triggers):
                if not is_forescale(trig):
                    if isinstance(trig, dict) and trig.get("type") in FORESCALE_TYPES and not quiet:
                        click.echo(f"{where}: trigger {i} ({trig.get('type')}): another external scaler's "
                                   f"(scalerAddress {str((trig.get('metadata') or {}).get('scalerAddress', '-'))[:80]}"
                                   f", no forescale key): left alone")
                    continue
                checked += 1
                label = f"{where}: trigger {i} ({trig.get('type')}{_trigger_name(trig)})"
                at = f"document {n}, spec.triggers[{i}]"
                errors, warnings = trigger_errors(trig.get("metadata"), name, ns)
                for w in warnings:
                    if not quiet:
                        click.echo(f"{label}: warning: {w} -- {at}{_path(w)}", err=True)
                for e in errors:
                    click.echo(f"{label}: error parsing forescale metadata: {e} -- {at}{_path(e)}", err=True)
                bad += bool(errors)
                if not errors and not quiet:
                    click.echo(f"{label}: ok{keda_metric_note(trig.get('metadata'), name, ns, i)}")
            if checked == before and not quiet:
                kinds = sorted({str(t.get("type")) for t in triggers if isinstance(t, dict)})
                click.echo(f"{where}: no forescale trigger ({', '.join(kinds) or 'no triggers'}): KEDA's alone, "
                           f"nothing to check -- document {n}")
    if objects == 0:
        click.echo(f"Error: no external trigger of a keda.sh ScaledObject: no ScaledObject (apiVersion keda.sh/..., "
                   f"kind ScaledObject) in {', '.join(_name(f) for f in files)}", err=True)
        raise SystemExit(2)
    if bad:
        click.echo(f"{bad} of {checked} trigger(s) or object(s) rejected", err=True)
        raise SystemExit(2)


def _trigger_name(trig: dict) -> str:
    return f", {trig['name']}" if isinstance(trig.get("name"), str) and trig["name"] else ""


def _path(message: str) -> str:
    """The path below the trigger a message is about (its key), e.g. ``.metadata.quantile``."""
    import re

    m = re.match(r"(metadata key|metricType) '([^']*)'", message)
    if m is None:
        return ".metadata"
    return f".metadata.{m.group(2)}" if m.group(1) == "metadata key" else ".metricType"
