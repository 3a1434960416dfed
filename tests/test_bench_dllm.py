"""tests/test_bench_dllm.py — `lazyinfer bench dllm` (tools/cmd-dllm.c) on the CPU.

Runs the built binary (env BIN, default ./lazyinfer) on synth:tiny-llada:
  - `--canvas`: one row per method and size, vanilla first; the exact LaCache components commit
    vanilla's tokens ("= vanilla" yes: on the CPU the caches are exact); FLOPs saved are
    non-negative and the truncated head saves some; bad size lists are rejected with a message
    before anything is printed;
  - `--prompt-tokens` cuts the rendered prompt (the header's mean prompt says so);
  - the GSM8K table's rows come out one per method, vanilla's "=" column is a dash.
"""
import os
import re
import subprocess

import pytest

BIN = os.environ.get("BIN", "./lazyinfer")
MODEL = ["-m", "synth:tiny-llada"]


def bench(*args, check=True):
    p = subprocess.run([BIN, "bench", "dllm", *MODEL, *map(str, args)], capture_output=True,
                       text=True, timeout=300)
    if check:
        assert p.returncode == 0, f"bench dllm {args} failed ({p.returncode}): {p.stderr}"
    return p


def rows(text):
    return [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in text.splitlines() if re.match(r"^\| \d+ \|", line)]


def test_canvas_rows_and_exactness():
    out = bench("--canvas", "48,80", "--block-length", "16").stdout
    r = rows(out)
    assert len(r) == 16, out
    by = {(int(x[0]), x[1]): x for x in r}
    for n in (48, 80):
        assert by[(n, "vanilla")][3] == "1.00x"
        for name in ("+EmbedCache", "+RoPECache", "+FACache", "+LM-head trunc",
                     "LaCache (caches + trunc)"):
            assert by[(n, name)][6] == "yes", (n, name, out)
            assert float(by[(n, name)][5].rstrip("%")) >= 0.0
        assert float(by[(n, "+LM-head trunc")][5].rstrip("%")) > 0.0
        assert float(by[(n, "vanilla")][2]) > 0.0


def test_canvas_methods_filter_keeps_vanilla():
    r = rows(bench("--canvas", "40", "--block-length", "8", "--methods", "+FACache").stdout)
    assert [x[1] for x in r] == ["vanilla", "+FACache"]


@pytest.mark.parametrize("bad", ["abc", "", "8", "64,x", "2000000"])
def test_canvas_bad_lists_rejected(bad):
    p = bench("--canvas", bad, "--block-length", "16", check=False)
    assert p.returncode == 2
    assert "--canvas" in p.stderr
    assert "|" not in p.stdout


def test_prompt_tokens_cuts_prompts():
    out = bench("-n", "1", "--shots", "1", "--prompt-tokens", "40", "--gen-length", "16",
                "--block-length", "16", "--steps", "4", "--methods", "+FACache").stdout
    assert re.search(r"mean prompt 40 tokens \(each cut", out), out
    table = [l for l in out.splitlines() if l.startswith("| vanilla") or l.startswith("| +FACache")]
    assert len(table) == 2 and table[0].split("|")[-2].strip() == "—", out
    assert bench("--prompt-tokens", "-1", check=False).returncode == 2
