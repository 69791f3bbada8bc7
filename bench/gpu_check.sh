#!/usr/bin/env bash
# One device check on a lent GPU machine (see docs/results.md): the gpu-marked tests, then the whole
# quickstart on CUDA with timings. Needs the wheels in .whl/ for packages that image lacks (pydantic).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD/src || exit 1
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
nvidia-smi -L
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
python3 -m pytest -q -p no:cacheprovider tests/gpu tests/unit/rollout 2>&1 | tail -15 | tee $OUT/gpu_tests.log
( time timeout 300 python3 -m rlvr.cli quickstart --out /tmp/qs --set threads=8 --set stages.sft.max_steps=300 \
    --set stages.grpo.max_steps=40 --set stages.grpo.eval_every=20 ) > $OUT/quickstart.log 2>&1
tail -25 $OUT/quickstart.log
cp /tmp/qs/summary.json $OUT/quickstart_summary.json 2>/dev/null
for s in sft dpo grpo; do tail -1 /tmp/qs/$s/metrics.jsonl | cut -c1-600; done
