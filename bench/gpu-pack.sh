#!/usr/bin/env bash
# bench/gpu-pack.sh — prepares .gpu/ (git-ignored) for bench/gpu-run.sh on the device machine,
# whose image has the CUDA toolkit but not pcre2, jansson, OpenBLAS, OpenSSL or libmicrohttpd:
# builds `make CUDA=1` here (sm_90a), copies the binaries and packs the shared libraries they need
# (without glibc, libstdc++ and the CUDA libraries, which are there). The GSM8K questions travel
# with the repository (data/gsm8k/test.jsonl). Then: device run with carry [".gpu"], command
# `OUT=$OUT bash bench/gpu-run.sh`.
set -eu
cd "$(dirname "$0")/.."
make -j"$(nproc)" CUDA=1 all build/release-cuda/tests/gpu-check build/release-cuda/tests/gpu-model \
  build/release-cuda/tests/test-rag build/release-cuda/tests/test-dllm build/release-cuda/tests/test-llada \
  build/release-cuda/tests/test-llada-generate-ref build/release-cuda/tests/test-kv-tiers \
  build/release-cuda/tests/test-repair build/release-cuda/tests/test-bd-generate-ref >/dev/null
rm -rf .gpu && mkdir -p .gpu/bin .gpu/lib
cp lazyinfer-cuda build/release-cuda/tests/{gpu-check,gpu-model,test-rag,test-repair,test-dllm,test-llada,test-llada-generate-ref,test-kv-tiers,test-bd-generate-ref} \
  .gpu/bin/
# debug sections stay here: the device call carries at most 64 MiB with the tree
strip --strip-debug .gpu/bin/*
ldd lazyinfer-cuda | awk '$3 ~ /^\// {print $3}' |
  grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*|libstdc\+\+|libgcc_s|libcudart|libcublas[^/]*)\.so' |
  xargs -I{} cp -L {} .gpu/lib/
(cd .gpu && tar -cJf libs.tar.xz lib && rm -rf lib)
# the binaries too (~4.5 MB each stripped, ~1 MB packed): the tree and .gpu stay under 64 MiB
(cd .gpu && tar -cJf bin.tar.xz bin && rm -rf bin)
du -sh .gpu
