"""tests/test_bench_kernels.py — `lazyinfer bench kernels` (tools/cmd-bench-kernels.c).

Runs the built binary (env BIN, default ./lazyinfer) with small shapes on the CPU and on
cpu-devsim (the device data path, bf16 pool; a batch of 12, more than the 8 sizes --batch takes) and checks that every op of the layer gets a row
with a positive time and a throughput, that the ceilings are 100 % (and the plain host copy the
promotion row is compared with), and that bad arguments are
rejected with a message naming the flag (exit 2) before anything is allocated.
"""
import os
import re
import subprocess

import pytest

from bad_args import named_by_flag

BIN = os.environ.get("BIN", "./lazyinfer")
SMALL = ["-m", "synth:tiny-llama", "--ctx", "200", "--batch", "1,12", "--prefill", "40",
         "--rows", "16", "--iters", "2"]
OPS = ["copy (memory ceiling)", "matmul GEMM (compute ceiling)", "matmul decode (gate / up)",
       "matmul decode (down)", "matmul prefill (gate / up)", "rmsnorm", "add + rmsnorm",
       "rope (q)", "swiglu", "kv_store", "attention decode", "attention decode",
       "attention prefill (causal)", "host → device plain copy", "promotion (host tier → pool pages)"]


def run(*args, timeout=120):
    return subprocess.run([BIN, "bench", "kernels", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout)


def rows(out):
    table = [l for l in out.splitlines() if l.startswith("| ") and not l.startswith("| op ")]
    return [[c.strip() for c in l.strip().strip("|").split("|")] for l in table]


@pytest.mark.parametrize("extra", [["--backend", "cpu"],
                                   ["--backend", "cpu-devsim", "--kv-dtype", "bf16"]])
def test_every_op_timed(extra):
    p = run(*SMALL, *extra)
    assert p.returncode == 0, p.stderr
    r = rows(p.stdout)
    assert [x[0] for x in r] == OPS, p.stdout
    for op, shape, ms, gbs, tfs, pct in r:
        assert float(ms) > 0, (op, ms)
        assert gbs or tfs, op  # every op reports what it moves or computes
        if gbs:
            assert float(gbs) > 0
        if tfs:
            assert float(tfs) > 0
    assert r[0][5] == "100 %" and r[1][5] == "100 %" and r[13][5] == "100 %"
    assert "none adjacent" in r[14][1] and r[14][5].endswith("%")  # promotion vs the plain copy
    assert "batch 12, ctx 200" in r[11][1] and "one call" in r[11][1]
    assert re.search(r"tiny-llama shapes \(D \d+, F \d+, H \d+, Hkv \d+, Dh \d+\)", p.stdout)


@pytest.mark.parametrize("args,msg", named_by_flag({
    "--ctx": ["0", "-4"],
    "--batch": ["0", "1,,2", "1,2,3,4,5,6,7,8,9"],
    "--prefill": ["0"],
    "--rows": ["-1"],
    "--iters": ["0"],
    "--page-size": ["0"],
    "--kv-dtype": ["fp8"],
}) + [
    (["--ctx", "16000000", "--batch", "4000"], "pages"),
    (["--backend", "nope"], "unknown backend 'nope'"),
    (["-m", "no/such/model.gguf"], "no/such/model.gguf"),
    (["--bogus"], "--bogus"),
])
def test_bad_arguments(args, msg):
    p = run("-m", "synth:tiny-llama", *args) if args[0] != "-m" else run(*args)
    assert p.returncode != 0
    assert msg in p.stderr, p.stderr
    assert "| op |" not in p.stdout
