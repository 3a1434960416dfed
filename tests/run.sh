#!/usr/bin/env bash
# tests/run.sh — runs every C test program in $BUILD/tests and every tests/test_*.py (pytest, in
# the project venv), counts PASS/FAIL lines, and ends with one line "N passed, N failed".
# A test program that exits non-zero without printing a FAIL line (a crash) counts as one failure.
# Each program's seed line ("# test-ops: LI_TEST_SEED=N", tests/test.h) is shown, and a failing
# program's replay command. LI_TEST_SEED passes through (unset: every program's fixed default).
#   tests/run.sh            everything (make test)
#   tests/run.sh --c-only   the C programs and their variants only (make test-random)
set -u
BUILD=${BUILD:-build/release}
c_only=0
[ "${1:-}" = "--c-only" ] && c_only=1
pass=0; fail=0; failed_names=()
# run_test NAME [VAR=VALUE ...] PROGRAM: runs one test program, counts its PASS/FAIL lines
run_test() {
  local name=$1; shift
  echo "== $name"
  out=$(env "$@" 2>"$BUILD/tests/$name.stderr"); rc=$?
  echo "$out" | grep -E "^(PASS|FAIL|SKIP):|^# [^ ]+: LI_TEST_SEED=" || true
  p=$(echo "$out" | grep -c "^PASS:"); f=$(echo "$out" | grep -c "^FAIL:")
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; echo "FAIL: $name exited with status $rc"; fi
  if [ "$f" -ne 0 ]; then
    failed_names+=("$name"); sed 's/^/  | /' "$BUILD/tests/$name.stderr" | tail -40
    seed=$(echo "$out" | grep -oE "LI_TEST_SEED=[0-9]+" | head -1)
    [ -n "$seed" ] && echo "  replay: $seed $*"
  fi
  pass=$((pass + p)); fail=$((fail + f))
}
for t in "$BUILD"/tests/test-*; do
  [ -x "$t" ] || continue
  run_test "$(basename "$t")" "$t"
done
# The include rule of docs/ARCHITECTURE.md §1 (layer order, public header, CUDA headers).
run_test check-includes python3 tests/check_includes.py
# The device data path (weights moved into backend memory, index arrays staged and uploaded) on
# the CPU standing in for a GPU: bit-identical to the CPU, and the LazyAttention suite on it.
run_test gpu-model-devsim LI_TEST_BACKEND=cpu-devsim LI_TEST_ORACLE=cpu "$BUILD/tests/gpu-model"
run_test gpu-model-devsim-f32kv LI_TEST_BACKEND=cpu-devsim LI_TEST_ORACLE=cpu LI_TEST_KV_DTYPE=f32 "$BUILD/tests/gpu-model"
run_test test-rag-devsim LI_TEST_BACKEND=cpu-devsim "$BUILD/tests/test-rag"
run_test test-rag-bf16kv LI_TEST_KV_DTYPE=bf16 "$BUILD/tests/test-rag"
run_test test-repair-devsim LI_TEST_BACKEND=cpu-devsim "$BUILD/tests/test-repair"
run_test test-dllm-devsim LI_TEST_BACKEND=cpu-devsim "$BUILD/tests/test-dllm"
run_test test-llada-generate-ref-devsim LI_TEST_BACKEND=cpu-devsim "$BUILD/tests/test-llada-generate-ref"
run_test test-bd-generate-ref-devsim LI_TEST_BACKEND=cpu-devsim "$BUILD/tests/test-bd-generate-ref"
# The CUDA backend must keep compiling even where no GPU runs it (make CUDA=1, sm_90a).
[ "$c_only" -eq 0 ] && echo "== cuda build"
if [ "$c_only" -eq 1 ]; then
  :
elif [ -n "${LI_SKIP_CUDA_BUILD:-}" ]; then
  echo "SKIP: cuda build: LI_SKIP_CUDA_BUILD is set"
elif command -v "${NVCC:-nvcc}" >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  if PATH="$PATH:/usr/local/cuda/bin" make --no-print-directory CUDA=1 all dev-cuda >"$BUILD/cuda-build.log" 2>&1; then
    echo "PASS: make CUDA=1 builds the CUDA backend and the dev/cuda workbench"; pass=$((pass + 1))
  else
    echo "FAIL: make CUDA=1 (see $BUILD/cuda-build.log)"; tail -20 "$BUILD/cuda-build.log" | sed 's/^/  | /'
    fail=$((fail + 1)); failed_names+=("cuda-build")
  fi
else
  echo "SKIP: cuda build: no nvcc on this machine"
fi
if [ "$c_only" -eq 0 ] && ls tests/test_*.py >/dev/null 2>&1; then
  echo "== pytest"
  out=$(BIN=${BIN:-./lazyinfer} .venv/bin/python -m pytest -q -p no:cacheprovider tests/ 2>&1); rc=$?
  echo "$out" | tail -30
  line=$(echo "$out" | grep -E "[0-9]+ (passed|failed)" | tail -1)
  p=$(echo "$line" | grep -oE "[0-9]+ passed" | grep -oE "[0-9]+" || echo 0)
  f=$(echo "$line" | grep -oE "[0-9]+ failed" | grep -oE "[0-9]+" || echo 0)
  e=$(echo "$line" | grep -oE "[0-9]+ error" | grep -oE "[0-9]+" || echo 0)
  p=${p:-0}; f=$(( ${f:-0} + ${e:-0} ))
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ] && [ "$f" -eq 0 ]; then f=1; failed_names+=("pytest"); fi
  pass=$((pass + p)); fail=$((fail + f))
fi
[ ${#failed_names[@]} -gt 0 ] && echo "failed: ${failed_names[*]}"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
