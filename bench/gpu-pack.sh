#!/usr/bin/env bash
# bench/gpu-pack.sh — prepares .gpu/ (git-ignored through .git/info/exclude) for bench/gpu-run.sh on
# the device machine, whose image has the CUDA toolkit but not pcre2, jansson, OpenBLAS, OpenSSL
# or libmicrohttpd: builds `make CUDA=1` here (sm_90a), copies the binaries, packs the shared
# libraries they need (without glibc, libstdc++ and the CUDA libraries, which are there) and the
# GSM8K questions. Then: device run with carry [".gpu"], command `OUT=$OUT bash bench/gpu-run.sh`.
set -eu
cd "$(dirname "$0")/.."
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo '/.gpu/' >>.git/info/exclude; }
make -j"$(nproc)" CUDA=1 all build/release-cuda/tests/gpu-check build/release-cuda/tests/gpu-model \
  build/release-cuda/tests/test-rag build/release-cuda/tests/test-dllm build/release-cuda/tests/test-llada >/dev/null
rm -rf .gpu && mkdir -p .gpu/bin .gpu/lib
cp lazyinfer-cuda build/release-cuda/tests/{gpu-check,gpu-model,test-rag,test-dllm,test-llada} .gpu/bin/
ldd lazyinfer-cuda | awk '$3 ~ /^\// {print $3}' |
  grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*|libstdc\+\+|libgcc_s|libcudart|libcublas[^/]*)\.so' |
  xargs -I{} cp -L {} .gpu/lib/
(cd .gpu && tar -cJf libs.tar.xz lib && rm -rf lib)
[ -f ../shared/data/gsm8k/test.jsonl ] && cp ../shared/data/gsm8k/test.jsonl .gpu/gsm8k.jsonl
du -sh .gpu
