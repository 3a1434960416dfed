#!/usr/bin/env bash
# scripts/test-fresh-machine.sh — the README's two commands on a fresh Debian 12 machine.
#
# Makes a minimal Debian 12 (bookworm) root with debootstrap from Debian's registry, holding only
# git, make and ca-certificates, clones this repository's HEAD into it and runs, each as the very
# first command on its own pristine copy of that root (chroot, as root, a clean environment):
#   1. `make demo`  — must succeed and print the completion;
#   2. `make test`  — must succeed and end with "N passed, 0 failed".
# Either failing fails the script (exit 1) with the tail of its log. The host lends the chroot only
# its network settings (resolv.conf, locally added CA certificates, PIP_*/proxy variables), so that
# apt-get and pip reach their registries as they do on the host.
#
#   scripts/test-fresh-machine.sh            both commands (`make test-fresh-machine`; ~20 min)
#   scripts/test-fresh-machine.sh demo       `make demo` only (~6 min)
#   LI_FRESH_KEEP=1 ...                      keep the roots under $LI_FRESH_DIR (default: a temp dir)
#
# Needs root (debootstrap, chroot, mount) and Debian's registry; installs debootstrap if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
case "${1:-all}" in
  all) CMDS=(demo test) ;;
  demo) CMDS=(demo) ;;
  test) CMDS=(test) ;;
  *) echo "usage: scripts/test-fresh-machine.sh [all|demo|test]" >&2; exit 2 ;;
esac
say() { echo "fresh-machine: $*" >&2; }
[ "$(id -u)" = 0 ] || { say "needs root (debootstrap, chroot and mount)"; exit 2; }
if ! command -v debootstrap >/dev/null; then
  say "installing debootstrap"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi

WORK=${LI_FRESH_DIR:-$(mktemp -d /tmp/lazyinfer-fresh.XXXXXX)}
mkdir -p "$WORK"
MOUNTS=()
cleanup() {
  local m
  for m in "${MOUNTS[@]}"; do umount -l "$m" 2>/dev/null || true; done
  if [ "${LI_FRESH_KEEP:-0}" != 1 ]; then rm -rf --one-file-system "$WORK"; fi
}
trap cleanup EXIT

# ---- the pristine root: Debian 12 with git, make and ca-certificates, nothing of ours ---------
BASE=$WORK/base
if [ ! -x "$BASE/usr/bin/git" ]; then
  say "debootstrap bookworm into $BASE"
  # A second try only for the download (a registry hiccup), never for our commands below.
  for try in 1 2; do
    rm -rf --one-file-system "$BASE"
    debootstrap --variant=minbase --include=git,make,ca-certificates bookworm "$BASE" \
      http://deb.debian.org/debian >"$WORK/debootstrap.log" 2>&1 && break
    tail -20 "$WORK/debootstrap.log" >&2
    [ $try = 2 ] && { say "debootstrap failed twice"; exit 1; }
    say "debootstrap failed; trying once more in 30 s"; sleep 30
  done
fi

# The host's network settings, and nothing else of it.
lend_network() {
  local root=$1
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
    chroot "$root" update-ca-certificates >/dev/null 2>&1
  fi
}

# run_first CMD: a copy of the pristine root, a clone of HEAD in it, `make CMD` as its first command.
run_first() {
  local cmd=$1 root=$WORK/$1 log=$WORK/$1.log rc
  rm -rf --one-file-system "$root"
  cp -a "$BASE" "$root"
  lend_network "$root"
  git clone -q --no-hardlinks "$REPO" "$root/root/lazyinfer"
  git -C "$root/root/lazyinfer" checkout -q --detach "$(git -C "$REPO" rev-parse HEAD)"
  mount -t proc proc "$root/proc"; MOUNTS+=("$root/proc")
  mount --bind /dev "$root/dev"; MOUNTS+=("$root/dev")
  local envs=(HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
              LANG=C.UTF-8 CI=true)
  local v
  for v in $(compgen -e); do
    case "$v" in
      PIP_FIND_LINKS) ;;  # a folder of the host's, absent in the chroot
      PIP_*|http_proxy|https_proxy|no_proxy|HTTP_PROXY|HTTPS_PROXY|NO_PROXY) envs+=("$v=${!v}") ;;
    esac
  done
  say "make $cmd on a fresh Debian 12 (log: $log)"
  local t0=$SECONDS
  set +e
  env -i "${envs[@]}" chroot "$root" /bin/sh -c "cd /root/lazyinfer && make $cmd" >"$log" 2>&1
  rc=$?
  set -e
  umount -l "$root/proc" "$root/dev"
  say "make $cmd: exit $rc after $((SECONDS - t0)) s"
  if [ $rc -ne 0 ]; then tail -30 "$log" | sed 's/^/  | /' >&2; return 1; fi
  case "$cmd" in
    demo) grep -q "Paris" "$log" || { say "make demo printed no completion with 'Paris'"; return 1; } ;;
    test) tail -1 "$log" | grep -qE "^[0-9]+ passed, 0 failed" ||
            { say "make test did not end with 'N passed, 0 failed'"; tail -5 "$log" >&2; return 1; } ;;
  esac
  [ "${LI_FRESH_KEEP:-0}" = 1 ] || rm -rf --one-file-system "$root"
}

failed=0
for c in "${CMDS[@]}"; do
  if run_first "$c"; then echo "PASS: make $c on a fresh Debian 12"
  else echo "FAIL: make $c on a fresh Debian 12"; failed=$((failed + 1)); fi
done
[ $failed -eq 0 ]
