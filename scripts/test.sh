#!/usr/bin/env bash
# Set up everything the test suite needs on a fresh machine (Python >= 3.10 with pip), then run it.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q torch==2.13.0            # the CPU build; keep it pinned (a bare `torch` pulls CUDA)
python -m pip install -q -e ".[dev]"
# bubblewrap gives the code sandbox its namespaces; without it rlvr falls back (and says so).
if ! command -v bwrap >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  (apt-get update -qq && apt-get install -y -qq bubblewrap) >/dev/null 2>&1 || echo "note: could not install bubblewrap"
fi
export OMP_WAIT_POLICY=PASSIVE
python -m pytest -q -p no:cacheprovider "$@"
