"""VERBS: the ``forescale`` command line (click): serve, backtest, tune, probe, check.

The only place for click, tqdm, matplotlib, files and "now-14d":

* ``options``  shared options (durations, traffic source, replica economics), errors, JSON files
* ``traces``   a trace CSV, the bundled real trace, a Prometheus range query
* ``backtest`` / ``tune``  the verbs over ``scaler.replay``
* ``render``   the table, the JSON contract, the frontier, trigger metadata, progress bars
* ``report``   the interactive index.html (plotly, offline), the PNG plots, the per-tick series CSV
* ``check``    ``forescale check FILE.yaml...``: ScaledObjects linted by the scaler's own parser
"""

from __future__ import annotations

import click

from ..probe.cli import probe_command
from ..spec import GRPC_PORT
from .backtest import backtest_command
from .check import check_command
from .loadtest import loadtest_command
from .tune import tune_command


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="forescale", prog_name="forescale")
def main() -> None:
    """forescale: a predictive KEDA external scaler for GPU inference services."""


def _env(name: str) -> dict:
    """Every serve flag is also read from FORESCALE_<FLAG> (the flag wins); shown in --help."""
    return {"envvar": f"FORESCALE_{name}", "show_envvar": True}


@main.command()
@click.option("--port", default=GRPC_PORT, show_default=True, type=click.IntRange(0, 65535), help="gRPC port (KEDA's scalerAddress).",
              **_env("PORT"))
@click.option("--http-port", default=8080, show_default=True, type=click.IntRange(0, 65535),
              help="HTTP port: / (status page), /metrics, /healthz.", **_env("HTTP_PORT"))
@click.option("--host", default="0.0.0.0", show_default=True, help="Address to listen on (127.0.0.1 for local use).",
              **_env("HOST"))
@click.option("--state-dir", type=click.Path(file_okay=False), default=None,
              help="Directory where forecasts survive restarts.", **_env("STATE_DIR"))
@click.option("--credentials-dir", type=click.Path(file_okay=False), default=None,
              help="Directory of credential sets, one sub-directory per name.", **_env("CREDENTIALS_DIR"))
@click.option("--tls-cert", type=click.Path(dir_okay=False), default=None, help="PEM certificate: serve gRPC over TLS.",
              **_env("TLS_CERT"))
@click.option("--tls-key", type=click.Path(dir_okay=False), default=None, help="PEM private key of --tls-cert.",
              **_env("TLS_KEY"))
@click.option("--tls-client-ca", type=click.Path(dir_okay=False), default=None,
              help="PEM CA bundle: require client certificates signed by it (mTLS).", **_env("TLS_CLIENT_CA"))
@click.option("--fit-workers", default=1, show_default=True, type=click.IntRange(1, 64),
              help="Processes fitting forecasts in the background.", **_env("FIT_WORKERS"))
@click.option("--log-level", default="info", type=click.Choice(["debug", "info", "warning", "error"]), show_default=True,
              **_env("LOG_LEVEL"))
@click.option("--log-format", default="text", type=click.Choice(["text", "json"]), show_default=True,
              help="json: one JSON object per line (time, level, logger, message).", **_env("LOG_FORMAT"))
def serve(port: int, http_port: int, host: str, state_dir: str | None, credentials_dir: str | None,
          tls_cert: str | None, tls_key: str | None, tls_client_ca: str | None, fit_workers: int, log_level: str,
          log_format: str) -> None:
    """Run the KEDA ExternalScaler gRPC server (until SIGTERM/SIGINT)."""
    from ..serve.server import ServerConfig, run
    from .options import fail

    if bool(tls_cert) != bool(tls_key):
        raise click.UsageError("--tls-cert and --tls-key go together (PEM files)")
    if tls_client_ca and not tls_cert:
        raise click.UsageError("--tls-client-ca needs --tls-cert and --tls-key (mTLS is TLS plus client certificates)")
    try:
        run(ServerConfig(host=host, grpc_port=port, http_port=http_port, state_dir=state_dir,
                         credentials_dir=credentials_dir, tls_cert=tls_cert, tls_key=tls_key,
                         tls_client_ca=tls_client_ca, fit_workers=fit_workers, log_level=log_level,
                         log_format=log_format))
    except (OSError, ValueError) as e:
        fail(str(e))


main.add_command(probe_command, name="probe")
main.add_command(backtest_command, name="backtest")
main.add_command(tune_command, name="tune")
main.add_command(check_command, name="check")
main.add_command(loadtest_command, name="loadtest")
