"""tests/test_check_includes.py — the include check (tests/check_includes.py) fails where it must.

A small tree is written to a temporary folder with one violation of each rule (a lower layer
including a higher one, a tool and the server reaching a private header, a CUDA header outside
src/backend/cuda/); the check must exit 1 and name every file:line with the rule, and nothing
else. The same tree without the violations, and this repository, must pass.
"""
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
CHECK = os.path.join(HERE, "check_includes.py")

CLEAN = {
    "include/lazyinfer.h": "",
    "src/core/core.h": '#include "lazyinfer.h"\n',
    "src/backend/backend.h": '#include "../core/core.h"\n',
    "src/backend/cuda/k.cu": "#include <cuda_runtime.h>\n#include \"../backend.h\"\n",
    "src/model/m.h": '#include "../backend/backend.h"\n',
    "src/kv/doc-cache.h": '#include "../core/core.h"\n',
    "src/engine/engine.h": '#include "../model/m.h"\n#include "../kv/doc-cache.h"\n',
    "src/server/server.h": '#include "lazyinfer.h"\n',
    "src/server/server.c": '#include "server.h"\n#include "../core/core.h"\n',
    "tools/cmd-sim.c": '#include "../src/kv/doc-cache.h"\n#include "../src/server/server.h"\n',
    "tests/test-x.c": '#include "engine/engine.h"\n#include "backend/cuda/k.cu"\n',
}

# (file, text appended, the line it lands on, a phrase the FAIL line must carry)
VIOLATIONS = [
    ("src/backend/backend.h", '#include "../engine/engine.h"\n', 2, "which is below it"),
    ("src/server/server.c", '#include "../engine/engine.h"\n', 3, "private header"),
    ("tools/cmd-sim.c", '#include "../src/model/m.h"\n', 3, "private header"),
    ("src/model/m.h", "#include <cublasLt.h>\n", 2, "CUDA header"),
    ("tests/test-x.c", "#include <cuda_runtime.h>\n", 3, "CUDA header"),
]


def write_tree(root, extra):
    files = dict(CLEAN)
    for path, text, _, _ in extra:
        files[path] = files[path] + text
    for path, text in files.items():
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as fh:
            fh.write(text)


def run(root):
    r = subprocess.run([sys.executable, CHECK, "--root", str(root)], capture_output=True,
                       text=True)
    return r.returncode, r.stdout


def test_clean_tree_passes(tmp_path):
    write_tree(tmp_path, [])
    rc, out = run(tmp_path)
    assert rc == 0, out
    assert out.startswith("PASS: includes:"), out


@pytest.mark.parametrize("violation", VIOLATIONS, ids=lambda v: v[0])
def test_each_violation_fails(tmp_path, violation):
    write_tree(tmp_path, [violation])
    rc, out = run(tmp_path)
    path, _, line, phrase = violation
    fails = [l for l in out.splitlines() if l.startswith("FAIL:")]
    assert rc == 1, out
    assert len(fails) == 1, out
    assert fails[0].startswith(f"FAIL: {path}:{line}: "), out
    assert phrase in fails[0], out
    assert "PASS" not in out


def test_all_violations_reported(tmp_path):
    write_tree(tmp_path, VIOLATIONS)
    rc, out = run(tmp_path)
    assert rc == 1
    assert sum(l.startswith("FAIL:") for l in out.splitlines()) == len(VIOLATIONS), out


def test_this_repository_passes():
    rc, out = run(os.path.join(HERE, ".."))
    assert rc == 0, out
