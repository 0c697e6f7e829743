"""``forescale check FILE.yaml...``: lint ScaledObjects offline with the scaler's own parser.

Every ``external``/``external-push`` trigger of every ScaledObject in the files
(multi-document YAML, ``kind: List`` too) goes through ``scaler.spec.parse_metadata``,
the function the server runs on each KEDA call, so what passes here is what the
scaler accepts. Every bad key is reported (the parser stops at the first; here a bad
optional key is dropped and a bad required one replaced by a valid stand-in, then the
parse is repeated). Unknown keys are warnings, as in the server's log. Exit 0 when
every trigger parses, 2 otherwise (and for unreadable files or YAML).
"""

from __future__ import annotations

from pathlib import Path

import click

STAND_IN = {"serverAddress": "http://stand-in:9090", "query": "vector(1)", "qpsPerReplica": "1"}
FORESCALE_TYPES = ("external", "external-push")


def _documents(path: Path) -> list:
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise click.BadParameter(f"{path}: cannot read ({getattr(e, 'strerror', None) or e})", param_hint="FILE")
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise click.BadParameter(f"{path}:{where}: not valid YAML ({getattr(e, 'problem', None) or e})",
                                 param_hint="FILE")
    out = []
    for d in docs:
        if isinstance(d, dict) and d.get("kind") == "List":
            out.extend(i for i in d.get("items") or [] if isinstance(i, dict))
        elif isinstance(d, dict):
            out.append(d)
    return out


def trigger_errors(md, name: str, namespace: str) -> tuple[list[str], list[str]]:
    """(errors, warnings) for one trigger's metadata: every bad key, not only the first."""
    from ..spec import MetadataError, parse_metadata

    if not isinstance(md, dict):
        return [f"metadata: expected a map of string keys to string values, got {type(md).__name__}"], []
    errors = [f"metadata key '{k}': got {v!r} ({type(v).__name__}); accepted: a string (KEDA's metadata is "
              f"map[string]string: quote numbers and booleans)" for k, v in md.items() if not isinstance(v, str)]
    work = {str(k): v for k, v in md.items() if isinstance(v, str)}
    for _ in range(len(work) + len(STAND_IN) + 1):
        try:
            _, unknown = parse_metadata(work, name=name, namespace=namespace)
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
        return errors, [f"metadata key '{k}': unknown to forescale, ignored" for k in unknown]
    return errors, []


def keda_metric_note(md: dict, name: str, namespace: str, index: int) -> str:
    """The metric name KEDA will ask forescale for: ``s<trigger index>-<metricName>``. Each forescale trigger of a
    ScaledObject is its own workload (its metadata is part of its identity), so two triggers work side by side."""
    from ..spec import parse_metadata

    spec, _ = parse_metadata({str(k): v for k, v in md.items()}, name=name, namespace=namespace)
    return f" (KEDA asks for metric 's{index}-{spec.metric_name}')"


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path, dir_okay=False))
@click.option("--quiet", "-q", is_flag=True, help="Print errors only.")
def check_command(files: tuple[Path, ...], quiet: bool) -> None:
    """Lint the forescale triggers of ScaledObjects in FILE.yaml... offline, with the scaler's own parser.

    Exit 0 when every trigger is accepted, 2 when any is not (messages name the
    file, the ScaledObject, the trigger, the key, the value and what is accepted).
    """
    bad = checked = 0
    for path in files:
        for doc in _documents(path):
            if doc.get("kind") != "ScaledObject" or not str(doc.get("apiVersion", "")).startswith("keda.sh/"):
                continue
            meta = doc.get("metadata") or {}
            name, ns = str(meta.get("name", "")), str(meta.get("namespace", "default"))
            where = f"{path}: ScaledObject {ns}/{name}"
            spec = doc.get("spec") or {}
            lo, hi = spec.get("minReplicaCount", 0), spec.get("maxReplicaCount", 100)
            if isinstance(lo, int) and isinstance(hi, int) and lo > hi:
                click.echo(f"{where}: minReplicaCount {lo} is greater than maxReplicaCount {hi}", err=True)
                bad += 1
            for i, trig in enumerate(spec.get("triggers") or []):
                if not isinstance(trig, dict) or trig.get("type") not in FORESCALE_TYPES:
                    continue
                checked += 1
                label = f"{where}: trigger {i} ({trig.get('type')}{', ' + trig['name'] if trig.get('name') else ''})"
                errors, warnings = trigger_errors(trig.get("metadata"), name, ns)
                if spec.get("fallback") and trig.get("metricType", "AverageValue") != "AverageValue":
                    errors.append(f"metricType '{trig.get('metricType')}': KEDA's fallback needs AverageValue")
                for w in warnings:
                    if not quiet:
                        click.echo(f"{label}: warning: {w}", err=True)
                for e in errors:
                    click.echo(f"{label}: error parsing forescale metadata: {e}", err=True)
                bad += bool(errors)
                if not errors and not quiet:
                    click.echo(f"{label}: ok{keda_metric_note(trig.get('metadata'), name, ns, i)}")
    if checked == 0:
        click.echo(f"Error: no external trigger of a keda.sh ScaledObject in {', '.join(map(str, files))}", err=True)
        raise SystemExit(2)
    if bad:
        click.echo(f"{bad} of {checked} trigger(s) or object(s) rejected", err=True)
        raise SystemExit(2)
