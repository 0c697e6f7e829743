#!/usr/bin/env bash
# System packages the tests need: a real Prometheus (server + promtool) and kubectl.
set -euo pipefail
need=()
command -v prometheus >/dev/null || need+=(prometheus)
command -v promtool >/dev/null || need+=(prometheus)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing ${need[*]} (Debian, --no-install-recommends)"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  # the package starts a system service on :9090 on some hosts; the tests run their own
  $SUDO systemctl stop prometheus 2>/dev/null || true
fi
command -v kubectl >/dev/null || { echo "kubectl not found: the deploy tests need it (kubectl kustomize works offline)" >&2; exit 1; }
prometheus --version 2>&1 | head -1
