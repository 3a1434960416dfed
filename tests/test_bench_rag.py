"""tests/test_bench_rag.py — `lazyinfer bench rag` (tools/cmd-bench-rag.c, tools/zipf.c).

Runs the built binary (env BIN, default ./lazyinfer) on fresh random RAG samples written to a
temporary folder (so the test does not depend on data/rag-samples) and checks:
  - a tiny run of every mode on synth:tiny-llama finishes, prints one table row per mode with
    every request done, and the hit/miss counts agree with the trace it dumps (--trace): with a
    budget that never evicts, lazy misses exactly once per distinct document (+ the chat prefix
    block), none never hits; every mode generates the same greedy tokens (the modes are exact);
  - the Zipf sampler: first-draw ranks of a --dry-run trace against the exact truncated pmf
    (chi-square), k distinct documents per request, rank → document a fixed bijection;
  - Poisson arrivals: the mean gap is 1/rate; rate 0 puts every arrival at 0;
  - same seed → identical trace; bad arguments are rejected with a message.
Fresh random inputs come from a seed printed on failure (PYTEST_BENCH_RAG_SEED fixes it).
"""
import json
import math
import os
import random
import re
import subprocess

import numpy as np
import pytest

BIN = os.environ.get("BIN", "./lazyinfer")
SEED = int(os.environ.get("PYTEST_BENCH_RAG_SEED", random.randrange(1 << 30)))
WORDS = ("the river city song album band record label tour single debut group album chart "
         "year first second north south king queen live radio version cover guitar").split()


def bench(*args, check=True, timeout=60):
    p = subprocess.run([BIN, "bench", "rag", *map(str, args)], capture_output=True, text=True,
                       timeout=timeout)
    if check:
        assert p.returncode == 0, f"[seed {SEED}] bench rag {args} failed ({p.returncode}): {p.stderr}"
    return p


def make_samples(path, rng, n_files, n_pass=6, short_file=False):
    """Sample JSONs as in data/rag-samples: passages "0".."5" and a query."""
    path.mkdir(exist_ok=True)
    n_docs = 0
    for f in range(n_files):
        k = n_pass - 2 if short_file and f == 0 else n_pass
        d = {str(i): "\n\n" + " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 20)))
             for i in range(k)}
        d["query"] = "Question: " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 8)))
        d["chunk_num"] = k
        (path / f"{f + 1}.json").write_text(json.dumps(d))
        n_docs += k
    return n_docs


def read_trace(path):
    reqs = []
    for line in open(path):
        t = line.split()
        reqs.append((float(t[0]), int(t[1]), [tuple(map(int, x.split("@"))) for x in t[2:]]))
    return reqs


ROW = re.compile(r"^\| (lazy|copy|prefix|none|full) \| (\d+)/(\d+) \| ([\d.]+) \| ([\d.]+) \| "
                 r"([\d.]+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| "
                 r"(\d+)/(\d+) \| (\d+) \| ([\d.]+) \| (\d+) \| (\d+) \| (\d+)/(\d+) \|", re.M)


def parse_rows(out):
    rows = {}
    for m in ROW.finditer(out):
        rows[m[1]] = dict(done=int(m[2]), total=int(m[3]), p50=float(m[4]), p90=float(m[5]),
                          p99=float(m[6]), mean=float(m[7]), hit_ratio=float(m[11]),
                          hits=int(m[12]), lookups=int(m[13]), evictions=int(m[16]),
                          same=int(m[18]), same_of=int(m[19]))
    return rows


def test_smoke_all_modes(tmp_path):
    rng = random.Random(SEED)
    make_samples(tmp_path / "s", rng, n_files=3, short_file=True)
    R, k = 8, 2
    trace = tmp_path / "trace.txt"
    p = bench("-m", "synth:tiny-llama", "--samples", tmp_path / "s", "--requests", R, "--k", k,
              "--alpha", 1.3, "--out-len", 3, "--rate", 0, "--mode", "all", "--max-batch", 3,
              "--seed", rng.randrange(1 << 30), "--trace", trace, "-t", 2, timeout=30)
    rows = parse_rows(p.stdout)
    assert sorted(rows) == ["copy", "lazy", "none", "prefix"], f"[seed {SEED}] {p.stdout}"
    reqs = read_trace(trace)
    assert len(reqs) == R and all(a == 0.0 for a, _, _ in reqs), f"[seed {SEED}] rate 0"
    distinct = {d for _, _, docs in reqs for _, d in docs}
    for mode, r in rows.items():
        assert r["done"] == R and r["total"] == R, f"[seed {SEED}] {mode}: {r}"
        assert 0 < r["p50"] <= r["p90"] <= r["p99"], f"[seed {SEED}] {mode}: {r}"
        assert r["same"] == r["same_of"] == R, f"[seed {SEED}] {mode} tokens differ: {p.stdout}"
        assert r["evictions"] == 0, f"[seed {SEED}] {mode}: the default budget should not evict"
    # blocks per request: the k documents, plus the chat prefix block when the template has one
    blocks = rows["none"]["lookups"] / R
    assert blocks in (k, k + 1), f"[seed {SEED}] {rows['none']}"
    extra = int(blocks) - k
    assert rows["none"]["hits"] == 0 and rows["none"]["hit_ratio"] == 0.0
    assert rows["lazy"]["lookups"] == R * (k + extra)
    # one miss per distinct document (and one for the prefix block), every other lookup a hit
    assert rows["lazy"]["lookups"] - rows["lazy"]["hits"] == len(distinct) + extra, \
        f"[seed {SEED}] lazy: {rows['lazy']}, {len(distinct)} distinct documents in {reqs}"
    assert rows["lazy"]["hit_ratio"] > 0


def test_evict_gdsf_runs_and_keeps_outputs(tmp_path):
    # A budget of a few documents forces evictions: the cost-aware policy (li_evict_gdsf) must
    # evict and re-prefill without changing a generated token (same = requests whose tokens
    # equal the uncached reference's).
    R = 12
    p = bench("-m", "synth:tiny-llama", "--synthetic", "--docs", 12, "--doc-len", 48, "--k", 2,
              "--requests", R, "--alpha", 0.8, "--out-len", 2, "--rate", 0, "--mode", "lazy,copy",
              "--budget", "96K", "--evict", "gdsf", "--seed", SEED % 1000, "-t", 2, timeout=60)
    assert "eviction gdsf" in p.stdout.splitlines()[0]
    rows = parse_rows(p.stdout)
    for mode in ("lazy", "copy"):
        r = rows[mode]
        assert r["done"] == R and r["same"] == r["same_of"] == R, f"[seed {SEED}] {mode}: {r}"
        assert r["evictions"] > 0, f"[seed {SEED}] {mode}: the budget should force evictions"


def chi2_sf(x, dof):
    """Upper tail of chi-square (Wilson-Hilferty normal approximation, fine for dof >= 5)."""
    z = ((x / dof) ** (1 / 3) - (1 - 2 / (9 * dof))) / math.sqrt(2 / (9 * dof))
    return 0.5 * math.erfc(z / math.sqrt(2))


@pytest.mark.parametrize("case", range(3))
def test_zipf_sampler(tmp_path, case):
    rng = random.Random(SEED * 7 + case)
    N = make_samples(tmp_path / "s", rng, n_files=rng.randint(3, 8))
    alpha = [rng.uniform(0.3, 0.99), rng.uniform(1.01, 1.6), rng.uniform(1.6, 2.5)][case]
    k = rng.randint(1, 4)
    R = 20000
    trace = tmp_path / "t.txt"
    bench("--samples", tmp_path / "s", "--dry-run", "--requests", R, "--k", k, "--alpha", alpha,
          "--seed", rng.randrange(1 << 30), "--trace", trace)
    reqs = read_trace(trace)
    assert len(reqs) == R
    rank_to_doc = {}
    for _, q, docs in reqs:
        assert len(docs) == k and len({d for _, d in docs}) == k, f"[seed {SEED}] not distinct"
        for r, d in docs:
            assert 1 <= r <= N and 0 <= d < N
            assert rank_to_doc.setdefault(r, d) == d, f"[seed {SEED}] rank {r} maps to two docs"
    assert len(set(rank_to_doc.values())) == len(rank_to_doc)
    # the first draw of each request is an unconditioned Zipf(α) rank over 1..N
    first = np.bincount([docs[0][0] for _, _, docs in reqs], minlength=N + 1)[1:]
    pmf = np.arange(1, N + 1, dtype=float) ** -alpha
    pmf /= pmf.sum()
    exp = pmf * R
    # merge the tail so that every cell expects >= 5 (the chi-square approximation's rule)
    cells_o, cells_e, o, e = [], [], 0, 0.0
    for i in range(N):
        o += first[i]
        e += exp[i]
        if e >= 5:
            cells_o.append(o)
            cells_e.append(e)
            o, e = 0, 0.0
    if e > 0:
        cells_o[-1] += o
        cells_e[-1] += e
    x2 = sum((a - b) ** 2 / b for a, b in zip(cells_o, cells_e))
    dof = len(cells_o) - 1
    # p < 1e-4: a false alarm once in 10^4 runs, while a wrong exponent (±0.05) fails at R = 2e4
    assert dof < 5 or chi2_sf(x2, dof) > 1e-4, \
        f"[seed {SEED}] alpha {alpha:.3f} N {N}: chi2 {x2:.1f} on {dof} dof"
    # queries cycle through the samples' queries in order
    nq = len(list((tmp_path / "s").glob("*.json")))
    assert all(q == i % nq for i, (_, q, _) in enumerate(reqs))


def test_poisson_and_determinism(tmp_path):
    rng = random.Random(SEED + 1)
    make_samples(tmp_path / "s", rng, n_files=2)
    rate = rng.uniform(0.2, 20)
    seed = rng.randrange(1 << 30)
    R = 20000
    t1, t2, t3 = tmp_path / "1", tmp_path / "2", tmp_path / "3"
    for t, s in ((t1, seed), (t2, seed), (t3, seed + 1)):
        bench("--samples", tmp_path / "s", "--dry-run", "--requests", R, "--rate", rate, "--seed",
              s, "--trace", t)
    assert t1.read_bytes() == t2.read_bytes(), f"[seed {SEED}] same seed, different traces"
    assert t1.read_bytes() != t3.read_bytes()
    arr = np.array([a for a, _, _ in read_trace(t1)])
    assert arr[0] == 0 and np.all(np.diff(arr) >= 0)
    gaps = np.diff(arr) / 1e3
    # mean of R-1 Exp(rate) gaps: relative standard error 1/sqrt(R) = 0.7%; 5 sigma
    assert abs(gaps.mean() * rate - 1) < 5 / math.sqrt(R), f"[seed {SEED}] rate {rate}"
    # exponential: the coefficient of variation is 1 (relative s.e. about 1/sqrt(R) too)
    assert abs(gaps.std() / gaps.mean() - 1) < 10 / math.sqrt(R), f"[seed {SEED}] rate {rate}"


def test_errors(tmp_path):
    rng = random.Random(SEED + 2)
    N = make_samples(tmp_path / "s", rng, n_files=2)
    p = bench("--samples", tmp_path / "missing", "--dry-run", check=False)
    assert p.returncode != 0 and "missing" in p.stderr and "--samples" in p.stderr
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "1.json").write_text('{"0": "text"}')
    p = bench("--samples", tmp_path / "bad", "--dry-run", check=False)
    assert p.returncode != 0 and "query" in p.stderr
    for args, word in ((["--budget", "12X"], "--budget"), (["--mode", "fast"], "--mode"),
                       (["--k", N + 1], "--k"), (["--docs", N + 1], "--docs"),
                       (["--alpha", -1], "alpha"), (["--requests", 0], "requests"),
                       (["--plot", "a'b.png"], "--plot"), (["--evict", "mru"], "--evict")):
        p = bench("--samples", tmp_path / "s", "--dry-run", *args, check=False)
        assert p.returncode == 2 and word in p.stderr, f"{args}: {p.returncode} {p.stderr}"
