#!/usr/bin/env bash
# bench/gpu-run.sh — everything one device call runs on the H200, each step's log under $OUT:
#   check   build/…/gpu-check: every CUDA op against the CPU oracle, timings only with BENCH_OPS=1
#           (LI_GPU_CHECK_ONLY=attention,bench,bench-prefill picks groups)
#   model   gpu-model: whole models on CUDA against the CPU holding the same bf16 weights
#   rag     test-rag with LI_TEST_BACKEND=cuda: lazy/copy/prefix/none agree on the GPU; test-repair
#           there: a repair of every document token = full attention
#   e2e     lazyinfer bench generate on synth:llama-3.1-8b: prefill 5×4096+64 = 20544 tokens and
#           decode (tg128) — ms = 1000 / (t/s)
#   e2eact  the same with LI_LLAMA_ACT=f32 (activations f32 between ops) and LI_LLAMA_FUSED=0
#           (gate and up as two GEMMs): the bf16 data path's same-run baselines
#   e2ebase the e2e run on .gpu/base/lazyinfer-cuda (same run)
#   e2efp8  the e2e run with --fp8 ffn and --fp8 all (FP8 prefill)
#   fp8q    bench fp8 on synth:llama-3.1-8b: greedy agreement and logits error of each FP8 scope
#   ragbench lazyinfer bench rag, the paper's setting (CSV per sweep)
#   ragrepair bench rag at 4G, rate 16: lazy, copy, lazy --repair head:16, lazy --repair blend:0.15
#   tiers   the document tiers (issue 21): test-kv-tiers on cuda (no Redis there), bench rag in
#           the paper's setting with a 2G GPU budget
#           plus --host-cache 32G (lazy, copy: pool only vs with the tier), and bench kernels'
#           H2D promotion rate against a plain pinned copy of the same bytes (same call)
#   torch   bench/torch_baselines.py: SDPA decode/prefill, eager Llama-3.1-8B, copy and GEMM
#           ceilings, in the same call
#   dllm    test-dllm on CUDA and bench dllm on synth:llada-8b (not in the default STEPS)
#   dllmtest test-dllm and test-llada (bf16 activations = f32 bit for bit) on CUDA only
#   dllmprof LI_CUDA_PROFILE=1 of bench dllm's GSM8K run at K = 4: +parallel, all combined (no FP8)
#   densepad gpu-check / test-llada with LI_CUDNN_DENSE_PAD=1, bench dllm GSM8K K = 4 without and with it
#   dllmstep bench dllm --canvas: one denoising step at canvas 512/1024/2048 per LaCache component
#   dllmact the same with f32 activations (LI_LLADA_ACT=f32): the bf16 path's same-call baseline
#   torchllada bench/torch_baselines.py --only eager_llada8b: PyTorch eager vanilla decoding of the
#           dllm step's own prompt (token ids, gen length, block, steps) — needs dllm in the same
#           STEPS, and fails without it
#   dllmserve bench/dllm_serve.py: `serve` on synth:llada-8b, 8 GSM8K requests (4-shot, cut to
#           575 tokens; gen 128, block 32, 128 steps) one by one, then 1, 4, 8 at once: generated
#           tokens/s and latency against one by one (goal: 8 at once >= 3x), every concurrent
#           answer equal to its solo one (exit status 1 names any that is not)
#   opsbench gpu-check's FP8 GEMM and prefill attention timings only
#   kernels lazyinfer bench kernels on the GPU: one Llama-3.1-8B layer's ops against the copy and
#           GEMM ceilings (decode attention at ctx 20K, batch 1/16/64)
#   profile LI_CUDA_PROFILE=1 runs: per-op time of a LLaDA step and of Llama decode
#   graphs  step graphs on (LI_CUDA_GRAPHS=1) and off: Llama-8B decode, a LLaDA step at 512/1024
#   bd      Fast-dLLM v2 on CUDA: test-bd-generate-ref (the reference cases, every LaCache
#           combination = all off bit for bit) and bench dllm on synth:fast-dllm-v2-7b
#   regress decode and a LLaDA step, these binaries against .gpu/base/lazyinfer-cuda (same call)
# Usage (on the GPU machine, from the repository root): STEPS=check,model,e2e bench/gpu-run.sh
# Then here: bench/report.py RESULTS.tgz prints the markdown tables for docs/BENCHMARKS.md.
# Binaries: .gpu/bin/{lazyinfer-cuda,gpu-check,gpu-model,test-*} when present (made by
# bench/gpu-pack.sh on the dev machine and carried xz-packed in .gpu/bin.tar.xz, with the shared
# libraries of .gpu/libs.tar.xz, which the GPU image lacks), otherwise built here with
# `make CUDA=1`. Only 8 files come back from
# $OUT: pack the logs (tar) when running many steps.
set -u
OUT=${OUT:-/tmp/lazyinfer-out}
mkdir -p "$OUT"
# Logs go to W and come back packed as $OUT/results.tgz plus $OUT/summary.txt: the device tool
# returns at most 8 files.
FINAL=$OUT
OUT=$(mktemp -d)
trap 'tar czf "$FINAL/results.tgz" -C "$OUT" . && cp "$OUT/summary.txt" "$FINAL/" 2>/dev/null' EXIT
STEPS=${STEPS:-check,model,rag,e2e,torch}
has() { case ",$STEPS," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
[ -f .gpu/bin.tar.xz ] && tar -xJf .gpu/bin.tar.xz -C .gpu
if [ -d .gpu/bin ]; then
  B=.gpu/bin
  [ -f .gpu/libs.tar.xz ] && tar -xJf .gpu/libs.tar.xz -C .gpu
  export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  LI=$B/lazyinfer-cuda
else
  make -j16 CUDA=1 all build/release-cuda/tests/gpu-check build/release-cuda/tests/gpu-model \
    build/release-cuda/tests/test-rag build/release-cuda/tests/test-repair \
    build/release-cuda/tests/test-dllm >"$OUT/build.log" 2>&1 ||
    { tail -30 "$OUT/build.log"; exit 1; }
  B=build/release-cuda/tests
  LI=./lazyinfer-cuda
fi
# cuDNN is loaded at run time (src/backend/cuda/attention-cudnn.h): the GPU machine's is the one
# PyTorch loads (nvidia-cudnn-cu13 in its venv); LI_CUDNN_LIB names it for every binary below.
if [ -z "${LI_CUDNN_LIB:-}" ]; then
  LI_CUDNN_LIB=$(python3 -c 'import nvidia.cudnn, os; print(os.path.join(nvidia.cudnn.__path__[0], "lib", "libcudnn.so.9"))' 2>/dev/null)
  [ -f "$LI_CUDNN_LIB" ] || LI_CUDNN_LIB=$(find / -name libcudnn.so.9 -not -path '/proc/*' 2>/dev/null | head -1)
  export LI_CUDNN_LIB
  # its engine libraries (libcudnn_engines_*.so.9) sit beside it
  [ -n "$LI_CUDNN_LIB" ] && export LD_LIBRARY_PATH=$(dirname "$LI_CUDNN_LIB")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
exec > >(tee "$OUT/summary.txt") 2>&1
echo "cuDNN: ${LI_CUDNN_LIB:-not found}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used --format=csv | tee "$OUT/gpu.txt"
date -u | tee -a "$OUT/gpu.txt"
status=0
# The device tool stops a call at 600 s and then nothing is packed: every step ends by
# DEADLINE_S (default 560) seconds after the start, whatever its own limit.
T_END=$(( $(date +%s) + ${DEADLINE_S:-560} ))
run() {  # run NAME TIMEOUT_S CMD...: log to $OUT/NAME.log, print its last lines
  local name=$1 t=$2; shift 2
  local left=$(( T_END - $(date +%s) ))
  [ "$left" -lt "$t" ] && t=$left
  [ "$t" -le 0 ] && { echo "== $name: skipped, no time left"; status=1; return; }
  local t0=$(date +%s%N)
  timeout "$t" "$@" >"$OUT/$name.log" 2>&1; local rc=$?
  echo "== $name: rc $rc, $(( ($(date +%s%N) - t0) / 1000000 )) ms"
  grep -E "^(FAIL|SKIP)" "$OUT/$name.log" | head -20
  tail -4 "$OUT/$name.log"
  [ "$rc" -eq 0 ] || status=1
}
if [ -n "${BENCH_OPS:-}" ]; then nobench="-u LI_GPU_CHECK_NO_BENCH"; else nobench="LI_GPU_CHECK_NO_BENCH=1"; fi
has check && run gpu-check 300 env $nobench CUBLASLT_LOG_LEVEL=${CUBLASLT_LOG_LEVEL:-1} $B/gpu-check
# attention through cuDNN against the oracle, and its timings against our kernels (same call)
has cudnn && run gpu-check-cudnn 240 env -u LI_GPU_CHECK_NO_BENCH LI_GPU_CHECK_ONLY=cudnn,bench-cudnn $B/gpu-check
# the FP8 GEMM timings (and which path cuBLASLt gave) and the prefill attention kernels alone
has opsbench && run gpu-check-bench 200 env -u LI_GPU_CHECK_NO_BENCH LI_GPU_CHECK_ONLY=bench-fp8,bench-prefill,bench-dllm-x0 \
  CUBLASLT_LOG_LEVEL=${CUBLASLT_LOG_LEVEL:-1} $B/gpu-check
has model && run gpu-model 300 env LI_CUDA_GRAPH_STATS=1 $B/gpu-model
has model && run gpu-model-f32kv 300 env LI_TEST_KV_DTYPE=f32 $B/gpu-model
# the same with step graphs on (off by default)
has model && run gpu-model-graphs 300 env LI_CUDA_GRAPHS=1 LI_CUDA_GRAPH_STATS=1 $B/gpu-model
has rag && run test-rag-cuda 300 env LI_TEST_BACKEND=cuda $B/test-rag
has rag && run test-rag-cuda-f32kv 300 env LI_TEST_BACKEND=cuda LI_TEST_KV_DTYPE=f32 $B/test-rag
# cross-document repair on the GPU: blend:1 / head:K = full, shared pages unwritten
has rag && [ -x $B/test-repair ] && run test-repair-cuda 300 env LI_TEST_BACKEND=cuda $B/test-repair
has kernels && run bench-kernels 180 $LI bench kernels --backend cuda -m synth:llama-3.1-8b
has e2e && run e2e-8b 300 $LI bench generate --backend cuda -m synth:llama-3.1-8b -p 20544 -n 128 -r 2
# the same with f32 activations between ops (LI_LLAMA_ACT=f32: the bf16 path's same-run
# baseline) and with gate and up as two GEMMs (LI_LLAMA_FUSED=0: the fused GEMM's)
has e2eact && run e2e-8b-f32act 300 env LI_LLAMA_ACT=f32 $LI bench generate --backend cuda \
  -m synth:llama-3.1-8b -p 20544 -n 128 -r 2
has e2eact && run e2e-8b-split 300 env LI_LLAMA_FUSED=0 $LI bench generate --backend cuda \
  -m synth:llama-3.1-8b -p 20544 -n 128 -r 2
# FP8 prefill (--fp8 ffn, all): the same runs, and bench fp8's greedy agreement and logits error
# against off on random prompts of the 8B shapes
has e2efp8 && for s in ffn all; do
  run e2e-8b-fp8$s 300 $LI bench generate --backend cuda -m synth:llama-3.1-8b -p 20544 -n 128 -r 2 --fp8 $s
done
has fp8q && for s in ffn all; do
  run fp8-quality-$s 240 $LI bench fp8 --backend cuda -m synth:llama-3.1-8b --random 4 --random-len 1024 -n 32 --fp8 $s
done
# the same on .gpu/base/lazyinfer-cuda (a build from before a change, put there by hand)
has e2ebase && [ -x .gpu/base/lazyinfer-cuda ] && run e2e-8b-base 300 .gpu/base/lazyinfer-cuda \
  bench generate --backend cuda -m synth:llama-3.1-8b -p 20544 -n 128 -r 2
# the same with the engine's own prefill attention (the cuDNN path's same-call baseline)
has e2enative && run e2e-8b-native 300 $LI bench generate --backend cuda -m synth:llama-3.1-8b \
  -p 20544 -n 128 -r 2 --attn-impl native
# step graphs against the same steps launched op by op, in the same call
if has graphs; then
  for g in 1 0; do
    run decode-graphs$g 150 env LI_CUDA_GRAPHS=$g LI_CUDA_GRAPH_STATS=1 $LI bench generate --backend cuda \
      -m synth:llama-3.1-8b -p 512 -n 128 -r 2
    [ "${GRAPH_DLLM:-1}" = 1 ] && run dllmstep-graphs$g 150 env LI_CUDA_GRAPHS=$g LI_CUDA_GRAPH_STATS=1 \
      $LI bench dllm --backend cuda -m synth:llada-8b --canvas 512,1024 --block-length 32
  done
fi
# the same binaries against .gpu/base/lazyinfer-cuda (a build from before a change, put there by
# hand): Llama decode and a LLaDA step at canvas 1024, old and new alternating, twice
if has regress && [ -x .gpu/base/lazyinfer-cuda ]; then
  for r in 1 2; do
    for v in new old; do
      bin=$LI; [ $v = old ] && bin=.gpu/base/lazyinfer-cuda
      run regress-decode-$v$r 90 $bin bench generate --backend cuda -m synth:llama-3.1-8b -p 512 -n 128 -r 2
      run regress-step-$v$r 120 $bin bench dllm --backend cuda -m synth:llada-8b --canvas 1024 --block-length 32
    done
  done
fi
# The paper's RAG setting (docs/RAG-BENCH.md): 100 documents x 2048 tokens, 5 per request in random
# order, 64-token queries, 32 output tokens. bf16 KV (the GPU default): a document is 256 MiB, so
# 1G cannot hold one request's five (reported as such), 2G / 4G / 8G / 32G hold 8 / 16 / 32 /
# 128 documents. `none` re-prefills every document of every request.
# RAG_RATES, RAG_BUDGETS, RAG_MODES, RAG_TIMEOUT change the zipf sweep; RAG_UNIFORM_* the uniform
# one; RAG_KV_DTYPE the pool (default bf16).
RAG="$LI bench rag --backend cuda -m synth:llama-3.1-8b --synthetic --docs 100 --doc-len 2048 --k 5
     --query-len 64 --out-len 32 --max-batch 8 --requests ${RAG_REQUESTS:-16} --kv-dtype ${RAG_KV_DTYPE:-bf16}"
has ragbench && run ragbench-zipf ${RAG_TIMEOUT:-120} $RAG --alpha 2.1 --mode ${RAG_MODES:-lazy,copy,prefix} \
  --rates ${RAG_RATES:-4,16} --budgets ${RAG_BUDGETS:-8G,24G} --csv "$OUT/ragbench-zipf.csv"
# cross-document repair in the paper's setting at 4G, rate 16: lazy and copy without it, then
# lazy with head:16 and with blend:0.15 (TTFT p50 against lazy's and copy's)
if has ragrepair; then
  run ragrepair-base 120 $RAG --alpha 2.1 --mode lazy,copy --rates 16 --budgets 4G \
    --csv "$OUT/ragrepair-base.csv"
  for r in head:16 blend:0.15; do
    run ragrepair-${r%%:*} 120 $RAG --alpha 2.1 --mode lazy --rates 16 --budgets 4G --repair $r \
      --csv "$OUT/ragrepair-${r%%:*}.csv"
  done
fi
# RAG_EXTRA=0 skips the two runs below (none, uniform)
[ "${RAG_EXTRA:-1}" = 1 ] && has ragbench && run ragbench-none 45 $RAG --alpha 2.1 --mode none --rates ${RAG_NONE_RATES:-16} --budgets 4G \
  --csv "$OUT/ragbench-none.csv"
[ "${RAG_EXTRA:-1}" = 1 ] && has ragbench && run ragbench-uniform ${RAG_UNIFORM_TIMEOUT:-45} $RAG --alpha 0 \
  --mode ${RAG_UNIFORM_MODES:-lazy,copy} --rates ${RAG_UNIFORM_RATES:-16} --budgets ${RAG_UNIFORM_BUDGETS:-4G} \
  --csv "$OUT/ragbench-uniform.csv"
# The document tiers: 2G of GPU pool holds 8 documents of 256 MiB, the 32G pinned host tier 128
# (all 100): lazy and copy each run pool-only, then "+tiers" (a second table: where documents
# came from, promotion time). Then the promotion bandwidth: one 2,048-token document (256 MiB,
# 128 pages none adjacent) from pinned host memory into the pool against one plain pinned
# cudaMemcpy of the same bytes, both printed (goal: promotion >= 80 % of the plain rate).
# the tier round trips on the GPU (pinned arena, async D2H / H2D): promoted = fresh, bit for bit
has tiers && run test-kv-tiers-cuda 120 env LI_TEST_BACKEND=cuda LI_TEST_NO_REDIS=1 $B/test-kv-tiers
has tiers && run ragbench-tiers ${RAG_TIERS_TIMEOUT:-300} $RAG --alpha 2.1 --mode lazy,copy \
  --rate ${RAG_TIERS_RATE:-16} --budget 2G --host-cache 32G
has tiers && run tiers-promotion-bw 120 $LI bench kernels --backend cuda -m synth:llama-3.1-8b \
  --batch 1 --ctx 4096 --prefill 2048 --iters 10
has torch && run torch 300 python3 bench/torch_baselines.py ${TORCH_ONLY:+--only $TORCH_ONLY} \
  --out "$OUT/torch.jsonl"
# DLLM_TESTS=0: step dllm runs its benchmarks only (dllmtest still runs the suites)
dllm_tests() { has dllmtest || { has dllm && [ "${DLLM_TESTS:-1}" = 1 ]; }; }
# LLaDA on the GPU (issue 5): the decoder suite (every LaCache combination = all-off) and a
# benchmark of the methods on synth:llada-8b (random weights: a fixed commit schedule)
dllm_tests && run test-dllm-cuda 300 env LI_TEST_BACKEND=cuda $B/test-dllm
dllm_tests && run test-llada-cuda 200 env LI_TEST_BACKEND=cuda $B/test-llada
dllm_tests && run test-llada-generate-ref-cuda 120 env LI_TEST_BACKEND=cuda \
  $B/test-llada-generate-ref
dllm_tests && run test-dllm-cuda-graphs 300 env LI_TEST_BACKEND=cuda LI_CUDA_GRAPHS=1 \
  LI_CUDA_GRAPH_STATS=1 $B/test-dllm
# where a step's time goes (LI_CUDA_PROFILE: per op, printed at exit): a LLaDA step at canvas
# 1024 and Llama decode
has profile && run profile-dllm 120 env LI_CUDA_PROFILE=1 $LI bench dllm --backend cuda -m synth:llada-8b \
  --canvas 1024 --block-length 32 --methods "LaCache (caches + trunc)"
has profileprefill && run profile-prefill 120 env LI_CUDA_PROFILE=1 $LI bench generate --backend cuda \
  -m synth:llama-3.1-8b -p 20544 -n 1 -r 1
has profile && run profile-decode 120 env LI_CUDA_PROFILE=1 $LI bench generate --backend cuda \
  -m synth:llama-3.1-8b -p 512 -n 128 -r 1
# one denoising step at canvas 512/1024/2048, each LaCache component and FP8 (issue 5's table)
has dllmstep && run bench-dllm-canvas 240 $LI bench dllm --backend cuda -m synth:llada-8b \
  --canvas 512,1024,2048 --block-length 32
has dllmact && run bench-dllm-canvas-f32act 240 env LI_LLADA_ACT=f32 $LI bench dllm --backend cuda \
  -m synth:llada-8b --canvas 512,1024,2048 --block-length 32
GSM8K="--prompts data/gsm8k/test.jsonl -n 1 --shots 4 --prompt-tokens 575 --gen-length 256
       --block-length 32 --steps 256"
# cuDNN's dense plans per exact length (the default: a plan build, ~65 ms, per canvas length,
# which DPad changes every block) against padded plans of 256-row size classes
# (LI_CUDNN_DENSE_PAD=1): first gpu-check's dense cases with it (the oracle, K / V slack filled
# with large values), then GSM8K at K = 4, +parallel and all combined (no FP8), each its own
# process; the profile's last line gives plans built and their build time
if has densepad; then
  run gpu-check-densepad 120 env LI_CUDNN_DENSE_PAD=1 LI_GPU_CHECK_NO_BENCH=1 LI_GPU_CHECK_ONLY=bf16,flash \
    $B/gpu-check
  run test-llada-densepad 120 env LI_CUDNN_DENSE_PAD=1 LI_TEST_BACKEND=cuda $B/test-llada
  for d in 0 1; do  # DENSEPAD_AB=0: the checks only
    [ "${DENSEPAD_AB:-1}" = 1 ] || break
    run densepad$d 150 env LI_CUDNN_DENSE_PAD=$d LI_CUDA_PROFILE=1 $LI bench dllm --backend cuda \
      -m synth:llada-8b $GSM8K --commit-per-step 4 --methods "+parallel,all combined (no FP8)"
    grep -E "^\||^cudnn" "$OUT/densepad$d.log" | head -8
  done
  # DENSEPAD_ADOPT=1: when both correctness runs passed, the later steps run with padded plans
  if [ "${DENSEPAD_ADOPT:-0}" = 1 ] && grep -q "passed, 0 failed" "$OUT/gpu-check-densepad.log" &&
     grep -q "passed, 0 failed" "$OUT/test-llada-densepad.log"; then
    export LI_CUDNN_DENSE_PAD=1; echo "densepad: adopted for the later steps"
  fi
fi
# GSM8K: one 4-shot question cut to its last 575 tokens, gen 256, block 32, 256 steps. The K = 2
# run writes the prompt it decoded (token ids, gen length, block, steps) to llada-prompt.json,
# which the torchllada step decodes with PyTorch. "all combined" has the FP8 FFN on, "all combined
# (no FP8)" is the same without it.
has dllm && run bench-dllm 300 $LI bench dllm --backend cuda -m synth:llada-8b $GSM8K \
  --commit-per-step ${DLLM_MAIN_K:-2} --prompt-out "$OUT/llada-prompt.json" ${DLLM_METHODS:+--methods "$DLLM_METHODS"} \
  ${DLLM_ARGS:-}
# parallel decoding with larger fixed schedules (4 and 8 per step) for the combinations that use it
for k in ${DLLM_KS:-4 8}; do  # DLLM_MAIN_K / DLLM_KS: which K first (a short call)
  has dllm && run bench-dllm-k$k 200 $LI bench dllm --backend cuda -m synth:llada-8b $GSM8K \
    --commit-per-step $k --methods "+parallel,all combined,all combined (no FP8)"
done
# where the K = 4 step goes: LI_CUDA_PROFILE=1 per-op time of +parallel alone and of all combined
# (no FP8), each its own process
if has dllmprof; then
  run dllmprof-parallel 150 env LI_CUDA_PROFILE=1 $LI bench dllm --backend cuda -m synth:llada-8b \
    $GSM8K --commit-per-step 4 --methods "+parallel"
  run dllmprof-combined 150 env LI_CUDA_PROFILE=1 $LI bench dllm --backend cuda -m synth:llada-8b \
    $GSM8K --commit-per-step 4 --methods "all combined (no FP8)"
fi
# Fast-dLLM v2 (block diffusion over the Qwen2 forward): its reference suite on the GPU, then the
# LaCache table on the 7B shapes (GSM8K questions, block 32, sub-block 8)
has bd && run test-bd-generate-ref-cuda 200 env LI_TEST_BACKEND=cuda $B/test-bd-generate-ref
has bd && run bench-dllm-fdllm2 ${BD_TIMEOUT:-240} $LI bench dllm --backend cuda -m synth:fast-dllm-v2-7b \
  ${BD_ARGS:-}
# the PyTorch eager LLaDA-8B of the same shapes: step at 512/1024/2048 and vanilla decoding of
# exactly the prompt bench-dllm decoded (its llada-prompt.json, this call's): the token ids, and
# the prompt length, gen length, block and steps passed explicitly (torch_baselines.py checks them
# against the file). Without that file the step fails: no other prompt length is a baseline.
if has torchllada; then
  LLADA_E2E=$(python3 -c 'import json, sys; d = json.load(open(sys.argv[1]))
print(d["prompts"][0]["n_tokens"], d["gen_length"], d["block_length"], d["steps"])' \
    "$OUT/llada-prompt.json" 2>/dev/null)
  if [ -n "$LLADA_E2E" ]; then
    read -r LLADA_P LLADA_G LLADA_B LLADA_S <<<"$LLADA_E2E"
    echo "torch-llada: bench-dllm's prompt ids ($LLADA_P tokens), gen $LLADA_G, block $LLADA_B," \
      "steps $LLADA_S"
    run torch-llada 300 python3 bench/torch_baselines.py --only eager_llada8b \
      --llada-prompt-ids "$OUT/llada-prompt.json" --llada-prompt "$LLADA_P" --llada-gen "$LLADA_G" \
      --llada-block "$LLADA_B" --llada-steps "$LLADA_S" --out "$OUT/torch-llada.jsonl"
  else
    echo "== torch-llada: FAILED: no readable $OUT/llada-prompt.json from bench-dllm in this call;" \
      "run STEPS=...,dllm,torchllada so that PyTorch decodes the engine's own prompt"
    status=1
  fi
fi
# Diffusion serving: the GSM8K prompts of bench-dllm, with gen 128 / 128 steps instead of 256:
# a warm-up, 8 requests one by one and the level 1 are 10 x 128 steps alone (~32 s at ~25 ms a
# step), then one batch of 4 and one of 8 (128 steps each): about 90 s with the model's load,
# where gen 256 / 256 steps would need twice that. The server's log comes back as
# dllm-serve-server.log. DLLM_SERVE_ARGS: more arguments of the driver (after `--`: serve's).
has dllmserve && run dllm-serve ${DLLM_SERVE_TIMEOUT:-240} python3 bench/dllm_serve.py --bin "$LI" \
  -m synth:llada-8b --backend cuda --levels 1,4,8 --shots 4 --prompt-tokens 575 --gen-length 128 \
  --block-length 32 --steps 128 --json "$OUT/dllm-serve.json" --log "$OUT/dllm-serve-server.log" \
  ${DLLM_SERVE_ARGS:-}
exit $status
