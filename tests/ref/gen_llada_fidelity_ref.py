#!/usr/bin/env python3
"""gen_llada_fidelity_ref.py — torch's own answers for two details of the references' decisions
that lazyinfer reproduces in C (tests/test-llada-generate-ref.c checks them; no Python there):

  threshold-ties.json   Fast-dLLM's threshold rule keeps torch.topk(conf, k).indices[0] (k = the
                        candidates) even below tau: which row that is among exactly tied best
                        confidences, on vectors from a splitmix64 generator the C test runs too
                        (li_dllm_topk_torch_first, li_dllm_select THRESHOLD)
  conf-f32.json / .f32  LLaDA generate.py's confidence F.softmax(logits, dim=-1)[x0] in float32,
                        on sharp logit rows (many round to exactly 1.0): torch's float32 bits
                        (li_dllm_conf_f32)

    /path/to/venv/bin/python tests/ref/gen_llada_fidelity_ref.py

Needs torch and numpy only. Deterministic (fixed seeds, one thread). Torch's float32 softmax on
the CPU depends on its vector width: these files were made by the AVX2 kernel (8 lanes), which
meta records; an AVX-512 build sums in 16 lanes.
"""

import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_llada_generate_ref as g  # noqa: E402  (SplitMix, fnv1a, paths)
import gen_llada_ref as base  # noqa: E402  (write_json, to_f32_file)

OUT = g.OUT


def tie_vector(c):
    """Case c: a canvas of n rows, -inf for non-candidates (30%), else one of four values
    (j + 0.5) / 8, j < 4: the best is tied in most vectors. k = the number of candidates."""
    s = g.SplitMix(7919 * c + 3)
    n = 2 + s.next() % 300
    vals = []
    for _ in range(n):
        r = s.next() % 10
        vals.append(-math.inf if r < 3 else ((s.next() % 4) + 0.5) / 8)
    return vals


def write_ties(n_cases=480):
    rows, differ = [], 0
    for c in range(n_cases):
        vals = tie_vector(c)
        k = sum(1 for v in vals if v > -math.inf)
        first = int(torch.topk(torch.tensor(vals, dtype=torch.float64), k).indices[0]) if k else -1
        best = max(vals)
        lowest = vals.index(best) if k else -1
        differ += first != lowest
        rows.append([len(vals), k, first])
    base.write_json(os.path.join(OUT, "threshold-ties.json"), {
        "generator": "splitmix64 seeded 7919 c + 3 (c = case); n = 2 + next % 300; per value r = "
                     "next % 10: r < 3 -inf, else (next % 4 + 0.5) / 8; float64",
        "rows": "[n, k = finite values, torch.topk(conf, k).indices[0]] (-1: no candidate)",
        "lowest_row_differs": differ,
        "cases": rows})
    print(f"  threshold ties: {n_cases} vectors, torch's first differs from the lowest best row "
          f"in {differ}")


def write_conf_f32(n_rows=64, V=320):
    r = np.random.default_rng(20261207)
    logits = np.empty((n_rows, V), np.float32)
    x0 = []
    for i in range(n_rows):
        # sharp rows: the best beats the others' largest by 8..31, so that the others' mass
        # (~V e^-gap) falls on both sides of float32's 2^-24 (rows of exactly 1.0 and not)
        row = (r.standard_normal(V) * 2.0).astype(np.float32)
        row[r.integers(V)] = row.max() + [8, 18, 21, 23, 25, 30][i % 6] + r.uniform()
        if i % 5 == 0:
            row[r.integers(V)] = -np.inf  # a banned id (confidence_eos_eot_inf)
        logits[i] = row
        x0.append(int(np.argmax(row)) if i % 3 else int(r.integers(V)))  # x0 = argmax, or any
    p = torch.softmax(torch.from_numpy(logits), dim=-1)
    conf = p.gather(-1, torch.tensor(x0)[:, None])[:, 0].numpy()
    base.to_f32_file(os.path.join(OUT, "conf-f32.logits.f32"), logits)
    ones = int(sum(1 for c in conf if c == 1.0))
    base.write_json(os.path.join(OUT, "conf-f32.json"), {
        "what": "torch.softmax(logits float32, dim=-1)[x0] on the CPU (generate.py's confidence)",
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
        "n_rows": n_rows, "n_vocab": V, "logits_file": "conf-f32.logits.f32",
        "x0": x0,
        "conf_f32_bits": [int(np.float32(c).view(np.uint32)) for c in conf],
        "exactly_one": ones})
    print(f"  conf f32: {n_rows} rows, {ones} exactly 1.0")


def main():
    torch.set_num_threads(1)
    os.makedirs(OUT, exist_ok=True)
    write_ties()
    write_conf_f32()


if __name__ == "__main__":
    main()
