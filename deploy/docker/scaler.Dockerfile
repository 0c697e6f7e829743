# syntax=docker/dockerfile:1
# Image names and the build-and-push steps: docs/deploying.md, "1. Build and push the images".
# forescale scaler image: `forescale serve` (KEDA external scaler). No torch.
#
# The install step is the README's: `pip install '.[fast]'` of the project (the compiled HPA loop; versions from the lock,
# constraints.txt), into a
# virtualenv that the runtime stage copies. tests/test_deploy.py runs this
# Dockerfile's COPY + pip steps in a fresh venv (no Docker engine in CI).
# Pin the base by digest for reproducible builds:
#   docker buildx imagetools inspect python:3.11.13-slim-bookworm
#   --build-arg PYTHON_IMAGE=python:3.11.13-slim-bookworm@sha256:<digest>
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/forescale
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY scaler/ scaler/
COPY forecaster/ forecaster/
RUN /opt/forescale/bin/pip install -c constraints.txt ".[fast]"

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="forescale" \
      org.opencontainers.image.description="Predictive KEDA external scaler for GPU inference services" \
      org.opencontainers.image.licenses="Apache-2.0"
# Prophet's bundled Stan binary needs libstdc++6, which Debian's base already
# has (apt depends on it): no extra system package.
COPY --from=build /opt/forescale /opt/forescale
ENV PATH=/opt/forescale/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    MPLCONFIGDIR=/tmp/matplotlib
# non-root (the Deployment also enforces runAsNonRoot and a read-only root fs;
# /tmp and the state directory are volumes there)
USER 65532:65532
EXPOSE 6000 8080
ENTRYPOINT ["forescale"]
CMD ["serve", "--port", "6000", "--http-port", "8080", "--host", "0.0.0.0", "--state-dir", "/tmp/forescale-state"]
