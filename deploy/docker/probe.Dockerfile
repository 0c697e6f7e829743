# syntax=docker/dockerfile:1
# Image names and the build-and-push steps: docs/deploying.md, "1. Build and push the images".
# forescale probe image: the project with its `probe` extra (torch==2.13.0),
# for `forescale probe` in the inference pod (deploy/example).
# GPU by default (CUDA build of torch); CPU with
#   --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
#
# CUDA: torch's CUDA wheels from the PyTorch wheel index bring the CUDA
# runtime, cuDNN and NCCL as pip packages (nvidia-*), so the base stays a
# plain, pinned Python image and only the driver comes from the node (NVIDIA
# device plugin / GPU Operator). Choose the index suffix (cu126, cu128,
# cu130, ...) among those torch 2.13.0 is published for and that your node
# driver supports. torch is installed first from that index, pinned to
# 2.13.0; the project install (`pip install '.[probe]'`, the README's step)
# then finds torch==2.13.0 already satisfied.
# tests/test_deploy.py runs these COPY + pip steps against the local package
# index (torch 2.13.0 CPU), without a Docker engine.
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu130
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/forescale
RUN /opt/forescale/bin/pip install --index-url ${TORCH_INDEX_URL} torch==2.13.0
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY scaler/ scaler/
COPY forecaster/ forecaster/
RUN /opt/forescale/bin/pip install -c constraints.txt ".[probe]"

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="forescale-probe" \
      org.opencontainers.image.description="forescale warm-up probe: measures T_cold of a torch model" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /opt/forescale /opt/forescale
ENV PATH=/opt/forescale/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    MPLCONFIGDIR=/tmp/matplotlib
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["forescale"]
CMD ["probe", "--serve", "8080"]
