#!/usr/bin/env bash
# scripts/setup-cuda.sh — the headers the CUDA build's cuDNN attention (src/backend/cuda/
# attention-cudnn.cpp) compiles against, pinned, from PyPI, into third_party/ (git-ignored):
#   third_party/cudnn-frontend/include   nvidia-cudnn-frontend==$FE_VERSION (header-only C++ API)
#   third_party/cudnn/include            nvidia-cudnn-cu13==$CUDNN_VERSION's headers, only when the
#                                        CUDA toolkit's own cudnn_version.h is not that version
# The library itself is not linked: the engine loads libcudnn.so.9 at run time (dlopen), so the
# binary runs against the GPU machine's cuDNN (the one PyTorch loads there; docs/CUDA.md) and
# without cuDNN at all (then attention falls back to the engine's kernels).
# Idempotent: third_party/.cudnn-stamp records what was installed. Run by `make CUDA=1`.
set -euo pipefail
cd "$(dirname "$0")/.."
FE_VERSION=1.32.0
CUDNN_VERSION=9.19.0.56          # the cuDNN that the GPU machine's PyTorch 2.11 loads
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
STAMP=third_party/.cudnn-stamp
want="frontend $FE_VERSION cudnn $CUDNN_VERSION"
[ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && [ -f third_party/cudnn-frontend/include/cudnn_frontend.h ] && exit 0

say() { echo "setup-cuda: $*" >&2; }
PIP=python3
[ -x .venv/bin/python ] && PIP=.venv/bin/python
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fetch() {  # fetch PACKAGE==VERSION: the wheel into $tmp (from PyPI, or pip's cache)
  "$PIP" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --python-version 3.11 -d "$tmp" "$1" ||
    { say "cannot download $1 from PyPI (needed to build the CUDA backend's cuDNN attention)"; exit 1; }
}

say "cuDNN frontend $FE_VERSION headers -> third_party/cudnn-frontend"
fetch "nvidia-cudnn-frontend==$FE_VERSION"
rm -rf third_party/cudnn-frontend && mkdir -p third_party/cudnn-frontend
(cd third_party/cudnn-frontend && unzip -q "$tmp"/nvidia_cudnn_frontend-*.whl 'include/*' &&
  unzip -q -o "$tmp"/nvidia_cudnn_frontend-*.whl '*LICENSE*' 2>/dev/null || true)

# cuDNN's own headers: the toolkit's when they are the pinned version, else the wheel's
ver() { awk '/define CUDNN_(MAJOR|MINOR|PATCHLEVEL)/ {v = v (v ? "." : "") $3} END {print v}' "$1"; }
have=""
[ -f "$CUDA_HOME/include/cudnn_version.h" ] && have=$(ver "$CUDA_HOME/include/cudnn_version.h")
pinned=$(echo "$CUDNN_VERSION" | cut -d. -f1-3)
rm -rf third_party/cudnn
if [ "$have" = "$pinned" ]; then
  say "cuDNN $have headers: the CUDA toolkit's ($CUDA_HOME/include)"
else
  say "cuDNN headers $CUDNN_VERSION from PyPI (the toolkit has '${have:-none}'; ~370 MB download)"
  fetch "nvidia-cudnn-cu13==$CUDNN_VERSION"
  mkdir -p third_party/cudnn
  (cd "$tmp" && unzip -q nvidia_cudnn_cu13-*.whl 'nvidia/cudnn/include/*' 'nvidia/cu13/include/*' 2>/dev/null || true)
  inc=$(find "$tmp" -name cudnn_version.h -path '*include*' | head -1)
  [ -n "$inc" ] || { say "no cudnn_version.h in nvidia-cudnn-cu13==$CUDNN_VERSION"; exit 1; }
  cp -r "$(dirname "$inc")" third_party/cudnn/include
fi
echo "$want" > "$STAMP"
