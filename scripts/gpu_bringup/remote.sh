#!/usr/bin/env bash
# On the offline GPU machine (route B of shared/docs/gpu-bringup.md), from the repository root:
#
#   bash scripts/gpu_bringup/remote.sh install STAGE   # join + verify the carried pieces, pip install --target,
#                                                      # probe the image, write the dummy-weight model folders
#   bash scripts/gpu_bringup/remote.sh bench [ARGS]    # start serve_bench in the background (it outlives the call)
#   bash scripts/gpu_bringup/remote.sh wait [SECONDS]  # poll it; tables, each step trace's report and
#                                                      # results.tgz (JSON, plots, server logs, TRACE=1 step
#                                                      # traces) into $OUT
#   bash scripts/gpu_bringup/remote.sh smollm2 STAGE   # the carried SmolLM2 GGUF -> its HF folder; then
#   MODEL=smollm2 bash scripts/gpu_bringup/remote.sh bench   # serves it with its shipped drafts, real acceptance
#
# Device calls last at most 10 minutes and a lease 30, so the benchmark runs under setsid and later calls poll it.
# Models: Llama-3-8B shapes with an EAGLE head and random weights (--load-format dummy), so acceptance comes from
# serve_bench's BENCHMARK-ONLY --synthetic-acceptance (per-request rates, default 0.3:0.95; outputs are not the
# model's). Set MODEL/DRAFT to a carried real pair (e.g. the Qwen2.5-Coder 1.5B/0.5B HF folders) and ACCEPT=none
# to measure real acceptance instead; LOAD_FORMAT=auto then loads their weights.
set -euo pipefail
S=${S:-$HOME/sgl}
mkdir -p "$S"
# the repo's sglang_faser over the carried wheel's; no_cutlass/ stands in for two Blackwell/MLA-only imports
export PYTHONPATH="$PWD/scripts/gpu_bringup/no_cutlass:$PWD:$S/site${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
export SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK=1 PYTORCH_SKIP_CUDNN_COMPATIBILITY_CHECK=1
# the wheel's Rust radix-tree core misreads tensor dtypes under the image's torch 2.11 ("insert value must be an
# int64 tensor, got Half/Float" at the first prefill, FASER or not; benchmarks/results/gpu/): use SGLang's Python one
export SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND=${SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND:-python}
# every Triton compile after the server is up goes to its log (SGLang warns from 1 s by default): the stalls of the
# third lease (benchmarks/results/gpu/README.md) were 60-430 ms each
export SGLANG_TRITON_SLOW_COMPILE_THRESHOLD_SECS=${SGLANG_TRITON_SLOW_COMPILE_THRESHOLD_SECS:-0.02}
export SGLANG_FASER_CACHE=$S/cache SGLANG_JIT_CACHE_DIR=$S/jit FLASHINFER_WORKSPACE_BASE=$S TRITON_CACHE_DIR=$S/triton
export PATH="$(dirname "$(command -v python3)"):$PATH"
if [ -d "$S/site/nvidia/cu13/include" ]; then export CPATH="$S/site/nvidia/cu13/include${CPATH:+:$CPATH}"; fi

command=${1:?install STAGE | smollm2 STAGE | bench [serve_bench args] | wait [seconds]}
shift
case "$command" in
install)
  stage=${1:?the folder the pieces were copied into}
  wheels=$(python3 scripts/gpu_bringup/carry.py unpack "$stage" --out "$S")
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$S/site" "$wheels"/*.whl
  python3 -V; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  ldd --version | sed -n 1p; which nvcc c++ ninja || true   # not head: its SIGPIPE under pipefail ends the script
  python3 -c "import torch, triton, sglang, sgl_kernel, sglang_faser.engine.plugin as p; \
print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available(), 'triton', triton.__version__, \
'sglang', sglang.__version__)"
  python3 scripts/gpu_bringup/make_models.py "$S/m"
  ;;
smollm2)
  stage=${1:?the folder the SmolLM2 pieces were copied into}
  gguf_dir=$(python3 scripts/gpu_bringup/carry.py unpack "$stage" --out "$S/smollm2-carried")
  mkdir -p "$SGLANG_FASER_CACHE/smollm2-135m-instruct"
  cp "$gguf_dir"/*.gguf "$SGLANG_FASER_CACHE/smollm2-135m-instruct/"
  python3 -m sglang_faser.models.smollm2   # sha256 check, then the one-time conversion
  ;;
bench)
  if [ "${MODEL:-}" = smollm2 ]; then   # the real model and its shipped drafts: real acceptance, real weights
    model_args=(--model smollm2) accept=${ACCEPT:-none} load_format=${LOAD_FORMAT:-auto}
  else
    model_args=(--model-path "${MODEL:-$S/m/llama8b}" --draft-model-path "${DRAFT:-$S/m/llama8b-eagle}")
    accept=${ACCEPT:-0.3:0.95} load_format=${LOAD_FORMAT:-dummy}
  fi
  args=(--tag gpu --out-dir "$S/results" "${model_args[@]}" --algorithm EAGLE
        --max-total-tokens 262144 --server-timeout 540
        --server-arg=--load-format --server-arg="$load_format"
        --server-arg=--attention-backend --server-arg=triton --server-arg=--sampling-backend --server-arg=pytorch
        --server-arg=--mem-fraction-static --server-arg=0.8 --server-arg=--cuda-graph-max-bs-decode
        --server-arg=64)
  if [ "$accept" != none ]; then args+=(--synthetic-acceptance "$accept"); fi
  if [ $# -eq 0 ]; then   # what fits a 15-minute lease beside the pieces: 5 servers (~75 s to start each), 2 rates,
    # 10 minutes on an H200 (benchmarks/results/gpu/README.md)
    # faser-k0 (every length 0) in fixed-1's place: what a step without speculation costs on a GPU (the fourth lease:
    # a parked step at batch 1 above no-spec's time per token), beside fixed-3, the best fixed length there so far
    set -- --configs no-spec faser sglang-adaptive fixed-3 faser-k0 --rates 4 32 --arrivals poisson --requests 48 \
           --max-new-tokens 128
  fi
  rm -f "$S/bench.rc"
  mkdir -p "$S/results"
  # TRACE=1: each FASER configuration's step trace, steps_<config>.jsonl (serve_bench.py trace_env)
  if [ -n "${TRACE:-}" ]; then export SGLANG_FASER_STEP_TRACE="$S/results/steps.jsonl"; fi
  setsid nohup bash -c 'python3 benchmarks/serve_bench.py "$@"; echo $? > "'"$S"'/bench.rc"' _ "${args[@]}" "$@" \
    > "$S/bench.log" 2>&1 < /dev/null &
  echo "serve_bench started (pid $!); log $S/bench.log"
  ;;
wait)
  deadline=$((SECONDS + ${1:-540}))
  while [ ! -f "$S/bench.rc" ] && [ $SECONDS -lt $deadline ]; do sleep 10; done
  tail -c 3000 "$S/bench.log" | tr '\r' '\n' | tail -25
  if [ -n "${OUT:-}" ]; then   # at most 8 files come back from a call: the tables, and everything in one archive
    cp "$S"/results/serve_bench_*.md "$OUT"/ 2>/dev/null || true
    for trace in "$S"/results/steps_*.jsonl; do   # each step trace's cost and choice table (trace_report.py)
      [ -f "$trace" ] && python3 benchmarks/trace_report.py "$trace" > "$OUT/trace_$(basename "$trace" .jsonl).md" || true
    done
    tail -c 4000000 "$S/bench.log" > "$S/results/bench.log"
    tar -czf "$OUT/results.tgz" -C "$S" results
  fi
  if [ -f "$S/bench.rc" ]; then exit "$(cat "$S/bench.rc")"; else echo "still running"; fi
  ;;
*)
  echo "unknown command $command (install, smollm2, bench, wait)" >&2; exit 2
  ;;
esac
