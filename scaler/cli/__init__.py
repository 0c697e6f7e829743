"""VERBS: the ``forescale`` command line (click): serve, backtest, tune, check, probe, loadtest.

The only place for click, tqdm, matplotlib, files and "now-14d"; each verb is thin over ``scaler.replay``:

* ``options``  shared options (durations, traffic source, replica economics, the calendar); ``worldopts``: the
               world's options (cold-start phases, node pools, the queue, scenarios) and ``replay_settings`` (the
               ``Settings`` tune and its fleet build alike); ``clitypes``: ``fail`` (exit 2), the finite float
               type every float option uses, ``--prometheus``'s check; ``outputs``: every output checked before
               the run (alone and against the others), ``-`` for standard output, JSON files
* ``traces``   a trace CSV, the bundled real trace, a Prometheus range query; ``coldstarts``: sampled start-ups;
               ``tokenopts``: a replica's token budget (a trace with input_tokens, output_tokens), the closed loop's
               targets, the latency model, a capacity configured wrong
* ``backtest`` / ``tune`` / ``fleet``  the verbs over ``scaler.replay`` (``fleet``: ``tune --by``; ``fleetinput``: its
  workloads read from one query or a CSV; ``fleetbudget``: its ``--gpu-budget``, ``--budget-rule`` and
  ``--value-per-request``, the budget's table and ``DIR/budget.md``)
* ``scaledobjects``  ``backtest --scaledobject``: manifests and trigger series read for the replay;
               ``replayflags``: the world a printed ScaledObject was ranked in (its ``forescale.io/replay``
               annotation), written and read back; ``serveraddr``: a printed serverAddress without credentials
* ``pools``    ``--pools FILE`` (GPU node pools, placement, dollars): read into the world, its table and JSON
* ``render``   the table, the JSON contract, the frontier, trigger metadata, the policies' colours, progress bars;
               ``render_llm``: TTFT and ITL per policy and the closed loop (token columns or a loop target);
               ``render_world``: what the world options add (cluster, latency, scenario checks) and ``--advise``;
               ``calendarout``: the JSON ``calendar`` block and the ``holidays`` lines (what each holiday learned from)
* ``report``   ``--report DIR``: index.html and its PNGs (``report_plots``: the matplotlib plots); ``report_html``:
               the interactive charts (plotly, offline) and the per-tick CSV
* ``check``    ``forescale check FILE.yaml...``: ScaledObjects linted by the scaler's own parser
* ``loadtest`` ``forescale loadtest URL``; ``loadgrid``: its grid of prompt and answer lengths and the capacity
               model file; ``drill``: ``forescale drill``; ``docref``: the generated reference;
               ``__main__``: ``python -m``
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, MutableMapping

import click

from ..limits import BUDGET_SYNC_SECONDS, CAPACITY_DIRS, EVENTS_DIRS, MAX_TRACKED, MAX_TRACKED_PER_NAMESPACE
from ..spec import GRPC_PORT

# the verbs whose modules are imported when the verb is looked up (run, --help, the docs), so that a command
# pays for its own imports only: `tune` does not import the load tester, the probe or the linter (issue 26)
VERBS = {"probe": ("scaler.probe.cli", "probe_command"), "backtest": ("scaler.cli.backtest", "backtest_command"),
         "tune": ("scaler.cli.tune", "tune_command"), "check": ("scaler.cli.check", "check_command"),
         "loadtest": ("scaler.cli.loadtest", "loadtest_command"), "drill": ("scaler.cli.drill", "drill_command")}


class Commands(MutableMapping):
    """A click group's ``commands``: the ones added, and ``VERBS`` imported on first lookup."""

    def __init__(self, added: Mapping[str, click.Command], lazy: dict):
        self.added, self.lazy = dict(added), dict(lazy)

    def __getitem__(self, name: str) -> click.Command:
        if name not in self.added and name in self.lazy:
            module, attr = self.lazy.pop(name)
            self.added[name] = getattr(importlib.import_module(module), attr)
        return self.added[name]

    def __setitem__(self, name: str, cmd: click.Command) -> None:
        self.lazy.pop(name, None)
        self.added[name] = cmd

    def __delitem__(self, name: str) -> None:
        if self.lazy.pop(name, None) is None:
            del self.added[name]

    def __iter__(self):
        return iter([*self.added, *(n for n in self.lazy if n not in self.added)])

    def __len__(self) -> int:
        return len(set(self.added) | set(self.lazy))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="forescale", prog_name="forescale")
def main() -> None:
    """forescale: a predictive KEDA external scaler for GPU inference services."""


def _env(name: str) -> dict:
    """Every serve flag is also read from FORESCALE_<FLAG> (the flag wins); shown in --help."""
    return {"envvar": f"FORESCALE_{name}", "show_envvar": True}


def _learn(value: str | None) -> dict:
    """``--capacity-learn SETTLE,SAMPLES`` (hidden, for tests): the online capacity's settle and samples."""
    if value is None:
        return {}
    try:
        settle, samples = value.split(",")
        out = {"capacity_settle_seconds": float(settle), "capacity_min_samples": int(samples)}
    except ValueError:
        out = {}
    if not out or not (0 <= out["capacity_settle_seconds"] <= 86400 and 1 <= out["capacity_min_samples"] <= 4096):
        raise click.BadParameter(f"{value[:40]!r}: accepted: SETTLE,SAMPLES, e.g. 120,10", param_hint="--capacity-learn")
    return out


@main.command()
@click.option("--port", default=GRPC_PORT, show_default=True, type=click.IntRange(0, 65535), help="gRPC port (KEDA's scalerAddress).",
              **_env("PORT"))
@click.option("--http-port", default=8080, show_default=True, type=click.IntRange(0, 65535),
              help="HTTP port: / (status page), /metrics, /healthz.", **_env("HTTP_PORT"))
@click.option("--host", default="0.0.0.0", show_default=True, help="Address to listen on (127.0.0.1 for local use).",
              **_env("HOST"))
@click.option("--state-dir", type=click.Path(file_okay=False), default=None,
              help="Directory where forecasts, tuned choices and what each trigger learned online (capacity, "
                   "the closed loop's factor, the forecast error) survive restarts.", **_env("STATE_DIR"))
@click.option("--state-key-file", type=click.Path(dir_okay=False), default=None,
              help="Key (a mounted Secret, at least 16 bytes) the state files are signed with; default: one generated "
              "in --state-dir.", **_env("STATE_KEY_FILE"))
@click.option("--credentials-dir", type=click.Path(file_okay=False), default=None,
              help="Directory of credential sets, one sub-directory per name.", **_env("CREDENTIALS_DIR"))
@click.option("--tls-cert", type=click.Path(dir_okay=False), default=None, help="PEM certificate: serve gRPC over TLS.",
              **_env("TLS_CERT"))
@click.option("--tls-key", type=click.Path(dir_okay=False), default=None, help="PEM private key of --tls-cert.",
              **_env("TLS_KEY"))
@click.option("--tls-client-ca", type=click.Path(dir_okay=False), default=None,
              help="PEM CA bundle: require client certificates signed by it (mTLS).", **_env("TLS_CLIENT_CA"))
@click.option("--http-token-file", type=click.Path(dir_okay=False), default=None,
              help="A file holding a bearer token (a mounted Secret): every HTTP path but /healthz wants "
              "Authorization: Bearer <token>; re-read when it changes.", **_env("HTTP_TOKEN_FILE"))
@click.option("--http-hide-queries", is_flag=True, default=False,
              help="Leave the triggers' PromQL out of the status page and the decisions API.",
              **_env("HTTP_HIDE_QUERIES"))
@click.option("--events-dir", multiple=True, default=EVENTS_DIRS, show_default=True,
              type=click.Path(file_okay=False), help="A directory eventsFile may name a file under (repeatable); "
              "a file elsewhere is not read (its trigger says why).", **_env("EVENTS_DIR"))
@click.option("--capacity-dir", multiple=True, default=CAPACITY_DIRS, show_default=True,
              type=click.Path(file_okay=False), help="A directory capacityModel may name a file under (repeatable); "
              "a file elsewhere is not read (its trigger says why).", **_env("CAPACITY_DIR"))
@click.option("--capacity-learn", default=None, hidden=True, metavar="SETTLE,SAMPLES",
              help="Tests: the online capacity's settle seconds and samples (default 120,10).", **_env("CAPACITY_LEARN"))
@click.option("--max-triggers-per-namespace", default=MAX_TRACKED_PER_NAMESPACE, show_default=True,
              type=click.IntRange(1, MAX_TRACKED), help="Triggers one namespace may have tracked (of the "
              f"{MAX_TRACKED} in all); past it an unproven one is evicted, else the new one is refused.",
              **_env("MAX_TRIGGERS_PER_NAMESPACE"))
@click.option("--budget-file", type=click.Path(dir_okay=False), default=None,
              help="Fleet GPU budgets (YAML: budgets: [{name, gpus, rule: value|equal}]): a trigger with gpuBudget: "
              "NAME has its answer capped so that the budget's members fit in its GPUs (docs/gpus.md).",
              **_env("BUDGET_FILE"))
@click.option("--budget-peers", default="", metavar="URL,...",
              help="With --budget-file: the other scaler replicas' HTTP ports (http://HOST:PORT, or dns:NAME:PORT for "
              "every address of a headless Service), whose budget claims this replica fetches so that all agree.",
              **_env("BUDGET_PEERS"))
@click.option("--budget-sync-seconds", default=BUDGET_SYNC_SECONDS, show_default=True,
              type=click.FloatRange(0.1, 60.0),
              help="With --budget-peers: how often the peers' claims are fetched.", **_env("BUDGET_SYNC_SECONDS"))
@click.option("--fit-workers", default=1, show_default=True, type=click.IntRange(1, 64),
              help="Processes fitting forecasts in the background.", **_env("FIT_WORKERS"))
@click.option("--log-level", default="info", type=click.Choice(["debug", "info", "warning", "error"]), show_default=True,
              **_env("LOG_LEVEL"))
@click.option("--log-format", default="text", type=click.Choice(["text", "json"]), show_default=True,
              help="json: one JSON object per line (time, level, logger, message).", **_env("LOG_FORMAT"))
def serve(port: int, http_port: int, host: str, state_dir: str | None, state_key_file: str | None,
          credentials_dir: str | None,
          tls_cert: str | None, tls_key: str | None, tls_client_ca: str | None, http_token_file: str | None,
          http_hide_queries: bool, events_dir: tuple[str, ...], capacity_dir: tuple[str, ...], capacity_learn: str | None,
          max_triggers_per_namespace: int, budget_file: str | None, budget_peers: str, budget_sync_seconds: float,
          fit_workers: int, log_level: str, log_format: str) -> None:
    """Run the KEDA ExternalScaler gRPC server (until SIGTERM/SIGINT)."""
    from ..serve.registry import RegistryConfig
    from ..serve.server import ServerConfig, run
    from .options import fail

    if bool(tls_cert) != bool(tls_key):
        raise click.UsageError("--tls-cert and --tls-key go together (PEM files)")
    if tls_client_ca and not tls_cert:
        raise click.UsageError("--tls-client-ca needs --tls-cert and --tls-key (mTLS is TLS plus client certificates)")
    from forecaster.models import refused

    for name, why in refused().items():  # said once at start; a trigger naming one gets INVALID_ARGUMENT with it
        click.echo(f"forescale serve: model plugin {name!r} refused: {why}", err=True)
    try:
        run(ServerConfig(host=host, grpc_port=port, http_port=http_port, state_dir=state_dir,
                         state_key_file=state_key_file,
                         credentials_dir=credentials_dir, tls_cert=tls_cert, tls_key=tls_key,
                         tls_client_ca=tls_client_ca, http_token_file=http_token_file,
                         http_hide_queries=http_hide_queries, events_dirs=tuple(events_dir), capacity_dirs=tuple(capacity_dir),
                         fit_workers=fit_workers,
                         registry=RegistryConfig(max_tracked_per_namespace=max_triggers_per_namespace,
                                                 **_learn(capacity_learn)),
                         budget_file=budget_file, budget_sync_seconds=budget_sync_seconds,
                         budget_peers=tuple(p.strip() for p in budget_peers.split(",") if p.strip()),
                         log_level=log_level,
                         log_format=log_format))
    except (OSError, ValueError) as e:
        fail(str(e))


main.commands = Commands(main.commands, VERBS)
