"""tests/test_bench_fp8.py — FP8 prefill's interface: `--fp8 off|ffn|all` on the commands that run
autoregressive models, and `lazyinfer bench fp8` (tools/cmd-bench-fp8.c).

On the CPU (f32 activations) and on cpu-devsim (the device data path): the bench compares each
scope with off over random prompts of a synthetic model and must find the FP8 logits near but not
equal to the reference (a scope that silently ran bf16 would give error 0; a wrong scale or layout
~1). Bad values are refused with a message naming the value; diffusion models refuse --fp8 with
the per-request alternative.
"""
import os
import re
import subprocess

import pytest

BIN = os.environ.get("BIN", "./lazyinfer")


def run(*args, timeout=300, text=True):
    return subprocess.run([BIN, *map(str, args)], capture_output=True, text=text, timeout=timeout)


def table(out):
    lines = [l for l in out.splitlines() if l.startswith("| random")]
    return [[c.strip() for c in l.strip().strip("|").split("|")] for l in lines]


@pytest.mark.parametrize("backend", ["cpu", "cpu-devsim"])
@pytest.mark.parametrize("scope", ["ffn", "all"])
def test_bench_fp8_measures_the_error(backend, scope):
    p = run("bench", "fp8", "-m", "synth:tiny-llama", "--random", "2", "--random-len", "48",
            "-n", "6", "--fp8", scope, "--backend", backend)
    assert p.returncode == 0, p.stderr
    rows = table(p.stdout)
    assert len(rows) == 2, p.stdout
    for label, n, equal, top1, err in rows:
        assert n == "48"
        assert 0 <= int(equal) <= 6
        agree, of = map(int, top1.split("/"))
        assert of == 48 and agree >= 24, top1  # the argmax mostly survives FP8
        worst, mean = map(float, err.split("/"))
        assert 0 < mean <= worst < 0.5, err
    assert re.search(r"summary: \d+ of 2 prompts generate the same 6 greedy tokens", p.stdout)


def test_fp8_generation_is_deterministic():
    base = ["generate", "-m", "synth:tiny-llama", "-p", "The capital of France is", "-n", "12",
            "--temp", "0", "--ignore-eos"]
    off = run(*base, text=False)  # a synthetic model's bytes need not be UTF-8
    a = run(*base, "--fp8", "all", text=False)
    b = run(*base, "--fp8", "all", text=False)
    assert off.returncode == a.returncode == b.returncode == 0, a.stderr
    assert a.stdout == b.stdout  # the same quantisation and kernels every run


@pytest.mark.parametrize("cmd", [["generate", "-p", "hi", "-n", "1"], ["bench", "generate", "-p", "8",
                                                                     "-n", "1", "-r", "1"]])
def test_bad_scope_is_refused(cmd):
    p = run(*cmd, "-m", "synth:tiny-llama", "--fp8", "fp16")
    assert p.returncode != 0
    assert "FP8 scope 'fp16': expected off, ffn or all" in p.stderr


def test_bench_fp8_refuses_off():
    p = run("bench", "fp8", "-m", "synth:tiny-llama", "--random", "1", "--fp8", "off")
    assert p.returncode == 2 and "--fp8 'off'" in p.stderr


def test_diffusion_model_names_the_per_request_switch():
    p = run("generate", "-m", "synth:tiny-llada", "-p", "hi", "-n", "1", "--fp8", "ffn")
    assert p.returncode != 0
    assert "diffusion model takes its FP8 FFN per request" in p.stderr
