#!/usr/bin/env python3
"""check_includes.py — the include rule of docs/ARCHITECTURE.md §1, checked over every
`#include` of the C, CUDA and C++ sources under src/, tools/, tests/ and include/.

Rules (each violation is one FAIL line naming file:line, the include and the rule broken):
  layers   a file under src/<layer>/ includes only its own layer and the layers above it:
           core <- format <- tokenizer <- backend <- model <- kv <- engine <- server, tools
           (backend/cpu and backend/cuda are the backend layer; include/lazyinfer.h is the
           public header and sits above them all).
  public   tools/ and src/server/ reach the library through include/lazyinfer.h and the
           documented internal headers in DOCUMENTED below only (tools may also include
           src/server/ and their own headers).
  cuda     only src/backend/cuda/ includes CUDA headers (<cuda*.h>, <cublas*>, <cudnn*>, <cub/...>,
           <mma.h>, ...); tests/gpu/ may include the CUDA folder's own headers, not the toolkit's.
Tests (tests/) may include any project header.

Not here: call-graph cycles inside a layer (the include graph cannot see them) and system
headers other than CUDA's. Usage:
  tests/check_includes.py [--root DIR]   prints PASS/FAIL lines (tests/run.sh counts them) and
                                          exits 1 on a violation. Tested by
                                          tests/test_check_includes.py (a tree with one violation
                                          of each rule must fail, this tree must pass).
"""
import argparse
import os
import re
import sys

LAYERS = ["core", "format", "tokenizer", "backend", "model", "kv", "engine", "server"]
RANK = {name: i for i, name in enumerate(LAYERS)}
RANK["tools"] = RANK["server"]  # the CLI sits beside the server, at the bottom

# Internal headers that tools/ and src/server/ may use, with who may use them and why. Anything
# else under src/ is private to the library (docs/ARCHITECTURE.md §1 lists the same).
DOCUMENTED = {
    "src/core/core.h": ("tools/", "src/server/"),  # status, logging, buffers, timing
    "src/backend/backend.h": ("tools/cmd-bench-kernels.c",),  # the op table it times
    "src/kv/doc-cache.h": ("tools/cmd-sim.c",),  # the simulator replays the real caches
    "src/kv/prefix-cache.h": ("tools/cmd-sim.c",),
    "src/kv/blob-store.h": ("tools/cmd-bench-rag.c",),  # empties the disk / Redis tiers before a cold run
}

SOURCE_EXT = (".c", ".h", ".cu", ".cuh", ".cpp")
QUOTED = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
ANGLED = re.compile(r"^\s*#\s*include\s*<([^>]+)>")
CUDA_HEADER = re.compile(
    r"^(cuda[\w]*\.h|cublas[\w]*\.h|cudnn[\w]*\.h|cufft[\w]*\.h|curand[\w]*\.h|cusparse[\w]*\.h|"
    r"nvrtc\.h|nvml\.h|mma\.h|driver_types\.h|vector_types\.h|device_launch_parameters\.h|"
    r"cooperative_groups.*|(cub|thrust|cute|cutlass|cuda)/.*)$"
)


def layer_of(rel):
    """Layer name of a repository path, 'public' for include/, None for tests and the rest."""
    parts = rel.split("/")
    if parts[0] == "include":
        return "public"
    if parts[0] == "tools":
        return "tools"
    if parts[0] == "src" and len(parts) > 2 and parts[1] in RANK:
        return parts[1]
    return None


def resolve(root, rel, name):
    """Repository path the quoted include `name` of file `rel` names (the compiler's search:
    the file's folder, then -Iinclude, then -Isrc as the tests use), or None."""
    here = os.path.dirname(rel)
    for base in (here, "include", "src"):
        cand = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(os.path.join(root, cand)):
            return cand.replace(os.sep, "/")
    return None


def sources(root):
    for top in ("src", "tools", "tests", "include"):
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames[:] = sorted(d for d in dirnames if d not in ("data", "__pycache__"))
            for f in sorted(filenames):
                if f.endswith(SOURCE_EXT):
                    yield os.path.relpath(os.path.join(dirpath, f), root).replace(os.sep, "/")


def check_file(root, rel):
    """Yields (line, message) for each broken rule in one file."""
    src_layer = layer_of(rel)
    public_only = rel.startswith("tools/") or rel.startswith("src/server/")
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as fh:
        for ln, text in enumerate(fh, 1):
            m = ANGLED.match(text)
            if m:
                if CUDA_HEADER.match(m.group(1)) and not rel.startswith("src/backend/cuda/"):
                    yield ln, (f"<{m.group(1)}> is a CUDA header: only src/backend/cuda/ includes "
                               "CUDA headers (the rest reaches the GPU through the op table)")
                continue
            m = QUOTED.match(text)
            if not m:
                continue
            target = resolve(root, rel, m.group(1))
            if target is None:
                yield ln, f'"{m.group(1)}" names no file of the tree'
                continue
            dst_layer = layer_of(target)
            if src_layer in RANK and dst_layer in RANK and RANK[dst_layer] > RANK[src_layer]:
                if not (src_layer == "tools" and dst_layer == "server"):
                    yield ln, (f'"{m.group(1)}": layer {src_layer} includes {target} of layer '
                               f"{dst_layer}, which is below it (order: "
                               f"{' <- '.join(LAYERS)}, tools)")
                    continue
            if src_layer in RANK and dst_layer == "tools" and src_layer != "tools":
                yield ln, f'"{m.group(1)}": the library includes {target} from tools/'
                continue
            if public_only and target.startswith("src/"):
                own = target.startswith("src/server/")
                if own:
                    continue
                users = DOCUMENTED.get(target, ())
                if not any(rel == u or (u.endswith("/") and rel.startswith(u)) for u in users):
                    who = "tools/" if rel.startswith("tools/") else "src/server/"
                    yield ln, (f'"{m.group(1)}": {who} reaches the private header {target}; '
                               "use include/lazyinfer.h "
                               "or a documented internal header (tests/check_includes.py "
                               "DOCUMENTED, docs/ARCHITECTURE.md §1)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    n_files = n_bad = 0
    for rel in sources(root):
        n_files += 1
        for ln, msg in check_file(root, rel):
            print(f"FAIL: {rel}:{ln}: {msg}")
            n_bad += 1
    if n_files == 0:
        print(f"FAIL: includes: no source files under {root}")
        return 1
    if n_bad == 0:
        print(f"PASS: includes: {n_files} files keep the layer order, the public-header rule "
              "and the CUDA-header rule")
    return 1 if n_bad else 0


if __name__ == "__main__":
    sys.exit(main())
