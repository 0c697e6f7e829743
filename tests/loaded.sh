#!/usr/bin/env bash
# Run a command beside N CPU-burning processes (a loaded machine), then stop them: `make test-loaded` runs the
# whole suite this way, so a test that only passes on an idle machine fails here.
#   bash tests/loaded.sh N COMMAND...
set -uo pipefail
n="$1"; shift
burners=()
stop() { for p in "${burners[@]}"; do kill "$p" 2>/dev/null; done; wait "${burners[@]}" 2>/dev/null; }
trap stop EXIT INT TERM
for _ in $(seq "$n"); do
  python3 -c 'while True: pass' &
  burners+=("$!")
done
echo "tests/loaded.sh: $n CPU burners (${burners[*]}) beside: $*" >&2
"$@"
