"""tests/test_bench_dllm.py — `lazyinfer bench dllm` (tools/cmd-dllm.c) on the CPU.

Runs the built binary (env BIN, default ./lazyinfer) on synth:tiny-llada:
  - `--canvas`: one row per method and size, vanilla first; the exact LaCache components commit
    vanilla's tokens ("= vanilla" yes: on the CPU the caches are exact); FLOPs saved are
    non-negative and the truncated head saves some; bad size lists are rejected with a message
    before anything is printed;
  - `--prompt-tokens` cuts the rendered prompt (the header's mean prompt says so);
  - the GSM8K table's rows come out one per method, vanilla's "=" column is a dash;
  - "all combined" runs the FP8 FFN (its FP8 GEMM rows > 0) and "all combined (no FP8)" is the
    same work without it (equal work columns, no FP8 rows); `--methods` tells them apart;
  - `--prompt-out FILE` writes the token ids the table decoded (tiny-llada's byte tokenizer: the
    prompt text's bytes) with gen length, block and steps, and the header names the count.
"""
import json
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


def table(out):
    """{method: cells} of the GSM8K table."""
    return {c[0]: c for c in ([x.strip() for x in line.strip().strip("|").split("|")]
                              for line in out.splitlines() if line.startswith("| "))
            if c[0] not in ("method", "---")}


SHORT = ["-n", "1", "--prompt-tokens", "48", "--gen-length", "16", "--block-length", "8",
         "--steps", "16", "--commit-per-step", "4"]


def test_all_combined_with_and_without_fp8():
    out = bench(*SHORT).stdout
    t = table(out)
    assert list(t)[-2:] == ["all combined", "all combined (no FP8)"], out
    fp8, exact = t["all combined"], t["all combined (no FP8)"]
    assert int(fp8[13]) > 0, out               # FP8 GEMM rows: the FP8 FFN ran
    assert int(exact[13]) == 0 and int(t["vanilla"][13]) == 0, out
    assert fp8[6:12] == exact[6:12], out       # the same work: rows, tiles, GFLOP
    assert fp8[4] == exact[4] == "4.0", out    # NFE: 16 tokens, 4 per step
    # --fp8 on turns it on in every row but the one that names it off
    t = table(bench(*SHORT, "--fp8", "on", "--methods", "+parallel,all combined (no FP8)").stdout)
    assert list(t) == ["vanilla", "+parallel", "all combined (no FP8)"]
    assert int(t["vanilla"][13]) > 0 and int(t["+parallel"][13]) > 0
    assert int(t["all combined (no FP8)"][13]) == 0


@pytest.mark.parametrize("pick", ["all combined", "all combined (no FP8)"])
def test_methods_picks_one_all_combined(pick):
    assert list(table(bench(*SHORT, "--methods", pick).stdout)) == ["vanilla", pick]


def test_prompt_out_writes_the_decoded_ids(tmp_path):
    f = tmp_path / "prompt.json"
    out = bench("-n", "2", "--shots", "1", "--prompt-tokens", "40", "--gen-length", "16",
                "--block-length", "8", "--steps", "8", "--methods", "+FACache",
                "--prompt-out", f).stdout
    assert f"Prompt tokens per question: 40 40; token ids {f}." in out, out
    d = json.loads(f.read_text())
    assert (d["gen_length"], d["block_length"], d["steps"], d["shots"],
            d["prompt_tokens_cut"]) == (16, 8, 8, 1, 40)
    assert [p["n_tokens"] for p in d["prompts"]] == [40, 40]
    assert all(len(p["ids"]) == 40 for p in d["prompts"])
    # tiny-llada's tokenizer is bytes: the ids are each prompt's last 40 bytes (one solved
    # example, then the question: bench dllm's prompt format, docs/DLLM.md)
    with open(os.path.join("data", "gsm8k", "test.jsonl")) as g:
        rec = [json.loads(next(g)) for _ in range(3)]
    shot = f"Question: {rec[0]['question']}\nAnswer: {rec[0]['answer']}\n\n"
    for i, p in enumerate(d["prompts"]):
        text = (shot + f"Question: {rec[1 + i]['question']}\nAnswer:").encode()
        assert p["ids"] == list(text[-40:]), (i, p)
    # uncut (0-shot), the prompt is BOS (256) and the text's bytes; its count is the header's
    out = bench("-n", "1", "--gen-length", "16", "--block-length", "16", "--steps", "4",
                "--methods", "+FACache", "--prompt-out", f).stdout
    d = json.loads(f.read_text())
    n = d["prompts"][0]["n_tokens"]
    assert d["prompts"][0]["ids"] == [256] + list(f"Question: {rec[0]['question']}\nAnswer:"
                                                  .encode()), d
    assert f"mean prompt {n} tokens" in out and f"Prompt tokens per question: {n};" in out, out
    p = bench("--canvas", "40", "--block-length", "8", "--prompt-out", f, check=False)
    assert p.returncode == 2 and "--prompt-out" in p.stderr
    p = bench("-n", "1", "--prompt-out", tmp_path / "no" / "such.json", check=False)
    assert p.returncode == 1 and "cannot write --prompt-out" in p.stderr
