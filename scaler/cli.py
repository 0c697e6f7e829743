"""The ``forescale`` command line (click): serve, backtest, probe, tune."""

from __future__ import annotations

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="forescale")
def main() -> None:
    """forescale: a predictive KEDA external scaler for GPU inference services."""


@main.command()
@click.option("--port", default=9090, show_default=True, type=click.IntRange(0, 65535), help="gRPC port (KEDA's scalerAddress).")
@click.option("--http-port", default=8080, show_default=True, type=click.IntRange(0, 65535), help="HTTP port for /metrics and /healthz.")
@click.option("--host", default="0.0.0.0", show_default=True, help="Address to listen on (127.0.0.1 for local use).")
@click.option("--state-dir", type=click.Path(file_okay=False), default=None, help="Directory where forecasts survive restarts.")
@click.option("--credentials-dir", type=click.Path(file_okay=False), envvar="FORESCALE_CREDENTIALS_DIR", default=None,
              help="Directory of credential sets, one sub-directory per name (env FORESCALE_CREDENTIALS_DIR).")
@click.option("--log-level", default="info", type=click.Choice(["debug", "info", "warning", "error"]), show_default=True)
def serve(port: int, http_port: int, host: str, state_dir: str | None, credentials_dir: str | None, log_level: str) -> None:
    """Run the KEDA ExternalScaler gRPC server."""
    from .server import ServerConfig, run

    run(ServerConfig(host=host, grpc_port=port, http_port=http_port, state_dir=state_dir,
                     credentials_dir=credentials_dir, log_level=log_level))


if __name__ == "__main__":
    main()
