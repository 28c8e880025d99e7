#!/usr/bin/env bash
# On the GPU machine (no network): install the carried wheels over the image's torch 2.11, start sglang-faser on
# real model shapes with dummy weights, and run the serving benchmark against it (shared/docs/gpu-bringup.md).
#   bash scripts/gpu_bringup/remote.sh WHEELS [MODEL_DIR]
# MODEL_DIR: a config.json + tokenizer for --load-format dummy (default: the embedded tiny model's shapes).
set -euo pipefail
WHEELS=${1:?wheel directory}
MODEL=${2:-}
SITE=${SITE:-$PWD/.gpu-site}
python3 -m pip install --no-index --no-deps --target "$SITE" "$WHEELS"/*.whl
export PYTHONPATH="$SITE:$PWD:${PYTHONPATH:-}"
export SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK=1 PYTORCH_SKIP_CUDNN_COMPATIBILITY_CHECK=1
python3 -c "import torch, sglang, sgl_kernel; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
args=(--tag gpu --server-arg=--attention-backend --server-arg=triton --server-arg=--sampling-backend
      --server-arg=pytorch)
if [ -n "$MODEL" ]; then args+=(--model-path "$MODEL" --server-arg=--load-format --server-arg=dummy); fi
python3 benchmarks/serve_bench.py "${args[@]}"
