"""tests/test_bench_quality.py — `lazyinfer bench quality` (tools/cmd-bench-quality.c).

Runs the built binary (env BIN, default ./lazyinfer) on synth:tiny-llama (random weights, a
byte-level tokenizer) over tests/data/quality-tiny.json (two two-passage questions written for
this test). Checks that the table's reference row is full attention against itself (KL 0, every
answer equal), that a repair of every document token (blend:1) lands on full attention (KL at
rounding level, every answer equal, the whole gap closed) while block attention (none) does not,
that the computed tokens rise with what a mode recomputes, and that a bad --modes value or data
file exits 2 naming it.
"""
import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.abspath(os.environ.get("BIN", os.path.join(ROOT, "lazyinfer")))
DATA = os.path.join(ROOT, "tests", "data", "quality-tiny.json")
TIMEOUT = 600 if "debug" in os.path.basename(BIN) else 120


def bench(*args):
    return subprocess.run([BIN, "bench", "quality", "-m", "synth:tiny-llama", "-t", "2",
                           *map(str, args)], capture_output=True, text=True, timeout=TIMEOUT)


def rows(stdout):
    """{mode: (kl, same, n, computed)} of the markdown table."""
    out = {}
    for line in stdout.splitlines():
        m = re.match(r"\| (\S+) \| (\S+) \| (\d+)/(\d+) \| \S+ \| \S+ \| (\d+) \|", line)
        if m:
            out[m[1]] = (float(m[2]), int(m[3]), int(m[4]), int(m[5]))
    return out


def test_full_repair_lands_on_full_attention():
    p = bench("--data", DATA, "--modes", "none,head:8,blend:1", "-n", 8)
    assert p.returncode == 0, p.stderr
    r = rows(p.stdout)
    assert set(r) == {"none", "head:8", "blend:1", "full"}, p.stdout
    assert r["full"][:3] == (0.0, 2, 2)
    # fp32, the same tokens through 2 layers in other orders: KL at rounding level
    assert r["blend:1"][0] < 1e-9 and r["blend:1"][1:3] == (2, 2), p.stdout
    assert r["none"][0] > 1e-7, p.stdout  # block attention is another function
    assert r["none"][3] < r["head:8"][3] < r["blend:1"][3] < r["full"][3], p.stdout
    assert re.search(r"\| blend:1 \|.*\| 100 % \|", p.stdout), p.stdout


def test_bad_values_exit_2():
    for args, name in ((["--modes", "none,blend:3"], "(0, 1]"),
                       (["--modes", "head:x"], "head:x"),
                       (["--cache", "prefix"], "prefix"),
                       (["--data", "/nonexistent.json"], "/nonexistent.json")):
        p = bench("--data", DATA, *args) if args[0] != "--data" else bench(*args)
        assert p.returncode == 2 and name in p.stderr, (args, p.returncode, p.stderr)
