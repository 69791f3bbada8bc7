#!/usr/bin/env bash
# Set up a fresh virtual environment with everything the test suite needs, then run the suite in it.
#
# Needs only Python >= 3.10 with pip and venv. The environment is new every run (no system site
# packages), so a dependency that pyproject.toml does not declare fails here instead of hiding behind
# what the machine happens to have; `pip check` must be clean. Arguments go to pytest
# (e.g. `bash scripts/test.sh -m slow`, `bash scripts/test.sh tests/unit/losses`, `bash scripts/test.sh --accel off`).
#
# RLVR_TEST_VENV=DIR keeps and reuses the environment in DIR (faster reruns while developing; CI never
# sets it). PYTHON=python3.11 picks the interpreter the environment is made from.
set -euo pipefail
cd "$(dirname "$0")/.."

PY="${PYTHON:-python3}"
if [ -n "${RLVR_TEST_VENV:-}" ]; then
  VENV="$RLVR_TEST_VENV"
else
  VENV="$(mktemp -d "${TMPDIR:-/tmp}/rlvr-test-venv.XXXXXX")"
  chmod 755 "$VENV"  # mktemp makes it 0700: the code sandbox's unprivileged uid must read its site-packages
  trap 'rm -rf "$VENV"' EXIT
fi

if [ ! -x "$VENV/bin/python" ]; then
  echo "test.sh: creating a fresh virtual environment in $VENV"
  "$PY" -m venv "$VENV"
fi
# shellcheck disable=SC1091
source "$VENV/bin/activate"
python -m pip install -q torch==2.13.0            # pinned; docs/install.md has the CPU and CUDA index commands
python -m pip install -q -e ".[dev,gym]"   # gym: reasoning-gym, an optional extra the tests use
python -m pip check

# bubblewrap gives the code sandbox its namespaces; without it rlvr falls back (and says so).
if ! command -v bwrap >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  (apt-get update -qq && apt-get install -y -qq bubblewrap) >/dev/null 2>&1 || echo "note: could not install bubblewrap"
fi
export OMP_WAIT_POLICY=PASSIVE
python -m pytest -q -p no:cacheprovider "$@"

# The core once more on the plain PyTorch / transformers path (rlvr.accel off: HF forward, PyTorch decode step,
# torch's AdamW), when the whole suite ran: the fast unit directories and the trainer tests of the update path
# (~1.7 min on 2 busy cores; the suite stays < 10 min). RLVR_TEST_ACCEL_OFF=all runs all of tests/unit/{trainers,
# models,rollout,losses} that way (~3.5 min), =none skips the pass.
ACCEL_OFF="${RLVR_TEST_ACCEL_OFF:-fast}"
if [ $# -eq 0 ] && [ "$ACCEL_OFF" != none ]; then
  if [ "$ACCEL_OFF" = all ]; then
    OFF_TESTS=(tests/unit/trainers tests/unit/models tests/unit/rollout tests/unit/losses)
  else
    OFF_TESTS=(tests/unit/models tests/unit/rollout tests/unit/losses tests/unit/trainers/test_rl_update.py
               tests/unit/trainers/test_micro_batch_plan.py tests/unit/trainers/test_sft_packing.py
               tests/unit/trainers/test_train_bf16.py)
  fi
  echo "test.sh: the core with the accelerations off (--accel off): ${OFF_TESTS[*]}"
  python -m pytest -q -p no:cacheprovider --accel off "${OFF_TESTS[@]}"
fi
