#!/usr/bin/env python3
"""python_overhead.py — what a Python `Engine.generate` call costs over the same li_generate call
from C (docs/BENCHMARKS.md "CPU: Python package overhead"), per call and per token.

Both sides run batches of 10 greedy calls of N tokens on the same prompt ("hello", EOS ignored,
1 thread) after a warm-up, and report the fastest batch (the least disturbed by other load on a
shared machine) and the median batch, µs per call. C: bench/python-overhead.c, compiled here
against build/release/liblazyinfer.so (`make` builds it). Python, in this process: generate with
token ids, with the text prompt (tokenised per call), and streamed (the scheduler stepped from
Python). The two alternate, --reps times; per token = the slope between the two N.

  bench/python_overhead.py                        # synth:tiny-llama, N = 1 and 64
  bench/python_overhead.py -m models/SmolLM2-135M-Instruct.Q4_1.gguf --batches 10
Not part of `make test` (tests/test_python.py checks the package's results).
"""
import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
from lazyinfer import Engine  # noqa: E402


def build_c() -> Path:
    lib = ROOT / "build" / "release"
    out = lib / "bench-python-overhead"
    subprocess.run(["make", "-C", str(ROOT), "--no-print-directory", "lib"], check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run(["cc", "-O2", "-I", str(ROOT / "include"),
                    str(ROOT / "bench" / "python-overhead.c"), "-L", str(lib), "-llazyinfer",
                    f"-Wl,-rpath,{lib}", "-o", str(out)], check=True)
    return out


def time_python(e: Engine, mode: str, n: int, batches: int):
    ids = e.tokenize("hello", add_bos=True, special=False)

    def call():
        if mode == "ids":
            e.generate(ids, max_tokens=n, temperature=0, ignore_eos=True)
        elif mode == "text":
            e.generate("hello", max_tokens=n, temperature=0, ignore_eos=True)
        else:
            for _ in e.generate(ids, max_tokens=n, temperature=0, ignore_eos=True, stream=True):
                pass
    out = []
    for k in range(-2, batches):  # two batches of warm-up
        t0 = time.perf_counter()
        for _ in range(10):
            call()
        if k >= 0:
            out.append((time.perf_counter() - t0) / 10 * 1e6)
    out.sort()
    return out[0], out[len(out) // 2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", default="synth:tiny-llama")
    ap.add_argument("--batches", type=int, default=100)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("-n", default="1,64", help="two token counts, e.g. 1,64")
    a = ap.parse_args()
    ns = [int(x) for x in a.n.split(",")]
    assert len(ns) == 2 and 0 < ns[0] < ns[1], "-n: two increasing token counts"
    exe = build_c()
    modes = ["C", "ids", "text", "stream"]
    best = {(md, n): [float("inf"), []] for md in modes for n in ns}
    with Engine(a.model, threads=1) as e:
        for _ in range(a.reps):
            for n in ns:
                r = subprocess.run([str(exe), a.model, str(a.batches), str(n)], check=True,
                                   stdout=subprocess.PIPE, text=True).stdout.split()
                res = {"C": (float(r[0]), float(r[1]))}
                for md in modes[1:]:
                    res[md] = time_python(e, md, n, a.batches)
                for md, (lo, med) in res.items():
                    best[(md, n)][0] = min(best[(md, n)][0], lo)
                    best[(md, n)][1].append(med)
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    print(f"model {a.model}, 1 thread, {a.reps} reps × {a.batches} batches of 10 calls; "
          f"load average {load}")
    print("| call | N | fastest batch µs/call | median µs/call | over C (fastest) | per token over C |")
    print("|---|---:|---:|---:|---:|---:|")
    c_slope = (best[("C", ns[1])][0] - best[("C", ns[0])][0]) / (ns[1] - ns[0])
    for md in modes:
        slope = (best[(md, ns[1])][0] - best[(md, ns[0])][0]) / (ns[1] - ns[0])
        for n in ns:
            lo, meds = best[(md, n)]
            over = "" if md == "C" else f"{lo - best[('C', n)][0]:+.1f}"
            tok = "" if md == "C" or n != ns[1] else f"{slope - c_slope:+.2f}"
            name = {"C": "li_generate (C)", "ids": "generate(ids)", "text": "generate(text)",
                    "stream": "generate(ids, stream=True)"}[md]
            print(f"| {name} | {n} | {lo:.1f} | {statistics.median(meds):.1f} | {over} | {tok} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
