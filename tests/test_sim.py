"""tests/test_sim.py — `lazyinfer sim` (tools/cmd-sim.c), the trace-driven hit-ratio simulator.

Runs the built binary (env BIN, default ./lazyinfer). The oracles are independent of the C code:
  - the trace it dumps (--trace) is replayed through a plain Python LRU (OrderedDict) for the
    lazy and copy policies, whose hit counts must equal those of the real document cache exactly;
  - the Zipf sampler's ranks are checked against the exact truncated pmf (chi-square);
  - the static top-M closed form is recomputed with numpy, Che's approximation bounds LRU;
  - structural facts: lazy >= copy-any >= copy per lookup (an LRU stack argument, docs/SIM.md),
    prefix == lazy when every request is one page-aligned document at position 0, same seed ->
    byte-identical output, bad arguments rejected with a message.
Random configurations are drawn from one seed, fixed unless LI_TEST_SEED says otherwise
(tests/seeding.py), printed on failure.
"""
import math
import os
import random
import re
import shutil
import subprocess
from collections import OrderedDict

import numpy as np
import pytest

from bad_args import named_by_flag
from seeding import li_seed

BIN = os.environ.get("BIN", "./lazyinfer")
SEED = li_seed("test_sim.py")


def sim(*args, check=True, env=None):
    p = subprocess.run([BIN, "sim", *map(str, args)], capture_output=True, text=True, env=env,
                       timeout=60)
    if check:
        assert p.returncode == 0, f"sim {args} failed ({p.returncode}): {p.stderr}"
    return p


ROW = re.compile(r"^(lazy|copy|copy-any|prefix)\s+(\d+)\s+(\d+)\s+(\d+)\s+([\d.]+)\s+(\d+)", re.M)
PRED = re.compile(r"^\s+(static top-M, Zipf|static top-M, trace|LRU, Che|simulated \(real)"
                  r"[^:]*:\s+lazy ([\d.]+)\s+copy ([\d.]+)", re.M)


def parse(out):
    rows = {m[1]: dict(hits=int(m[2]), misses=int(m[3]), hit_tok=int(m[4]), ratio=float(m[5]),
                       evictions=int(m[6])) for m in ROW.finditer(out)}
    preds = {m[1]: (float(m[2]), float(m[3])) for m in PRED.finditer(out)}
    return rows, preds


def read_trace(path):
    reqs = []
    with open(path) as f:
        for line in f:
            reqs.append([tuple(map(int, t.split("@"))) for t in line.split()])
    return reqs


def lru_replay(reqs, M, L, warmup, agnostic):
    """Document-cache LRU over copies of uniform size: M copies fit. Returns (hits, any_hits).

    Mirrors ARCHITECTURE.md §3.2, not doc-cache.c: a request pins its documents; a miss (or a hit
    at another Δ, copy mode) evicts the least recently used unpinned copy when full; the source of
    a re-rotation counts as used."""
    cache = OrderedDict()
    hits = any_hits = 0
    for r, req in enumerate(reqs):
        pinned = set()

        def make_room():
            while len(cache) >= M:
                victim = next(k for k in cache if k not in pinned)
                del cache[victim]

        for rank, slot in req:
            key = rank if agnostic else (rank, slot * L)
            if key in cache:
                cache.move_to_end(key)
                hit = anyhit = True
            else:
                others = [k for k in cache if not agnostic and k[0] == rank]
                assert len(others) <= 1, "test configuration must keep at most one other copy"
                if others:
                    cache.move_to_end(others[0])
                    pinned.add(others[0])
                make_room()
                cache[key] = True
                if others:  # the source is released once the copy is made (documents of a
                    pinned.discard(others[0])  # request are distinct: it is not one of them)
                hit, anyhit = False, bool(others)
            pinned.add(key)
            if r >= warmup:
                hits += hit
                any_hits += anyhit
    return hits, any_hits


def test_help_and_usage():
    p = sim("--help")
    assert "--alpha" in p.stdout and "--positions" in p.stdout and "--plot" in p.stdout
    top = subprocess.run([BIN, "--help"], capture_output=True, text=True)
    assert re.search(r"^\s+sim\s", top.stdout, re.M)


@pytest.mark.parametrize("args,msg", named_by_flag({
    "--k": ["0"],
    "--alpha": ["-1", "x1"],
    "--policy": ["fifo"],
    "--evict": ["mru"],
    "--page-size": ["0", "300"],
    "--requests": ["0"],
    "--doc-len": ["0"],
    "--budget": ["8"],
}) + [
    (["--bogus"], "unknown option"),
    (["--docs", "3", "--k", "4"], "--k"),
    (["--k", "5", "--positions", "3"], "--positions"),
    (["--requests", "10", "--warmup", "10"], "--warmup"),
    (["--k", "5", "--budget", "512", "--doc-len", "128"], "cannot hold"),
    (["extra"], "unexpected argument"),
])
def test_bad_arguments_rejected(args, msg):
    p = sim(*args, check=False)
    assert p.returncode == 2, (args, p.returncode, p.stdout)
    assert msg in p.stderr, (args, p.stderr)
    assert p.stdout == ""


def test_same_seed_same_output_and_trace(tmp_path):
    args = ["--docs", 300, "--k", 3, "--positions", 6, "--requests", 1500, "--budget", 2000,
            "--doc-len", 40, "--alpha", 1.2]
    a = sim(*args, "--seed", SEED, "--trace", tmp_path / "a.txt")
    b = sim(*args, "--seed", SEED, "--trace", tmp_path / "b.txt")
    c = sim(*args, "--seed", SEED + 1, "--trace", tmp_path / "c.txt")
    assert a.stdout == b.stdout
    assert (tmp_path / "a.txt").read_bytes() == (tmp_path / "b.txt").read_bytes()
    assert (tmp_path / "a.txt").read_bytes() != (tmp_path / "c.txt").read_bytes()
    # --policy all runs every policy on the same trace as a single-policy run.
    one = parse(sim(*args, "--seed", SEED, "--policy", "copy").stdout)[0]
    assert one["copy"] == parse(a.stdout)[0]["copy"]


def test_trace_shape(tmp_path):
    rng = random.Random(SEED)
    N, k, D = rng.randint(20, 60), rng.randint(2, 6), rng.randint(6, 12)
    sim("--docs", N, "--k", k, "--positions", D, "--requests", 500, "--budget", 64 * 16 * D,
        "--doc-len", 64, "--seed", SEED, "--policy", "lazy", "--trace", tmp_path / "t.txt")
    for req in read_trace(tmp_path / "t.txt"):
        ranks, slots = zip(*req)
        assert len(req) == k and len(set(ranks)) == k, f"seed {SEED}: {req}"
        assert all(1 <= r <= N for r in ranks)
        assert list(slots) == sorted(set(slots)) and all(0 <= s < D for s in slots)


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0, 1.0005, 1.3, 2.5])
def test_zipf_sampler_matches_pmf(tmp_path, alpha):
    # k = 1: each request is one independent draw, P(r) = r^-α / H_N(α) for r <= N.
    N, R = 40, 20000
    sim("--docs", N, "--k", 1, "--requests", R, "--alpha", alpha, "--seed", SEED, "--policy",
        "lazy", "--budget", 128, "--doc-len", 16, "--trace", tmp_path / "t.txt")
    ranks = np.array([req[0][0] for req in read_trace(tmp_path / "t.txt")])
    assert ranks.min() >= 1 and ranks.max() <= N
    p = np.arange(1, N + 1, dtype=float) ** -alpha
    p /= p.sum()
    obs = np.bincount(ranks, minlength=N + 1)[1:].astype(float)
    exp = p * R
    # merge the tail so every bin expects >= 5
    keep = exp >= 5
    o = np.append(obs[keep], obs[~keep].sum()) if (~keep).any() else obs
    e = np.append(exp[keep], exp[~keep].sum()) if (~keep).any() else exp
    chi2 = ((o - e) ** 2 / e).sum()
    df = len(o) - 1
    # Wilson-Hilferty upper 0.9999 quantile (z = 3.72): a correct sampler fails 1 run in 10^4.
    z = 3.72
    crit = df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3
    assert chi2 < crit, f"seed {SEED} alpha {alpha}: chi2 {chi2:.1f} >= {crit:.1f} (df {df})"


def test_lazy_lru_equals_independent_replay(tmp_path):
    rng = random.Random(SEED)
    N, k, L, P = rng.randint(30, 200), rng.randint(1, 5), rng.choice([16, 40, 64]), 16
    M = rng.randint(k + 1, 40)
    D = k + rng.randint(0, 3)
    R, W = 2000, rng.randint(0, 300)
    ppd = -(-L // P)
    budget = M * ppd * P + rng.randint(0, ppd * P - 1)  # a partial document's worth is unusable
    alpha = rng.choice([0.5, 0.9, 1.2, 1.8])
    out = sim("--docs", N, "--k", k, "--positions", D, "--requests", R, "--warmup", W, "--budget",
              budget, "--doc-len", L, "--page-size", P, "--alpha", alpha, "--seed", SEED,
              "--policy", "lazy", "--trace", tmp_path / "t.txt").stdout
    rows, _ = parse(out)
    hits, _ = lru_replay(read_trace(tmp_path / "t.txt"), M, L, W, agnostic=True)
    cfg = f"seed {SEED}: N={N} k={k} D={D} L={L} M={M} W={W} alpha={alpha}"
    assert rows["lazy"]["hits"] == hits, cfg
    assert rows["lazy"]["hits"] + rows["lazy"]["misses"] == (R - W) * k, cfg
    assert rows["lazy"]["hit_tok"] == hits * L, cfg


@pytest.mark.parametrize("k,D", [(1, 2), (2, 2)])
def test_copy_lru_equals_independent_replay(tmp_path, k, D):
    # D = 2 keeps at most one other copy per document, so the re-rotation source is unambiguous.
    rng = random.Random(SEED + k)
    N, L, M, R, W = rng.randint(20, 80), 32, rng.randint(k + 2, 25), 2000, 200
    alpha = rng.choice([0.7, 1.1, 1.6])
    out = sim("--docs", N, "--k", k, "--positions", D, "--requests", R, "--warmup", W,
              "--budget", M * L, "--doc-len", L, "--page-size", 16, "--alpha", alpha,
              "--seed", SEED, "--policy", "copy", "--trace", tmp_path / "t.txt").stdout
    rows, _ = parse(out)
    hits, any_hits = lru_replay(read_trace(tmp_path / "t.txt"), M, L, W, agnostic=False)
    cfg = f"seed {SEED}: N={N} k={k} M={M} alpha={alpha}"
    assert rows["copy"]["hits"] == hits, cfg
    assert rows["copy-any"]["hits"] == any_hits, cfg


def gdsf_replay(reqs, M, L, P, warmup):
    """GreedyDual-Size-Frequency over the lazy document cache (ARCHITECTURE.md §3.2, doc-cache.h):
    a document's H = clock + uses × cost / size, set at each use, with cost = L tokens and size =
    its pages (the sim's pool has no page bytes); the victim is the lowest H among unpinned
    documents, the least recently used among equals, and the clock becomes its H. uses counts the
    uses since the document last entered the cache. Returns hits after warmup."""
    ppd = -(-L // P)
    cache = OrderedDict()  # rank -> [uses, H], least recently used first
    clock = 0.0
    hits = 0
    for r, req in enumerate(reqs):
        pinned = set()
        for rank, _slot in req:
            if rank in cache:
                cache.move_to_end(rank)
                e = cache[rank]
                hit = True
            else:
                while len(cache) >= M:
                    victim = min((k for k in cache if k not in pinned), key=lambda k: cache[k][1])
                    clock = cache.pop(victim)[1]
                e = cache[rank] = [0, 0.0]
                hit = False
            e[0] += 1
            e[1] = clock + e[0] * float(L) / ppd  # same operations, same rounding as the C code
            pinned.add(rank)
            if r >= warmup:
                hits += hit
    return hits


def test_lazy_gdsf_equals_independent_replay(tmp_path):
    rng = random.Random(SEED + 7)
    N, k, L, P = rng.randint(30, 200), rng.randint(1, 5), rng.choice([16, 40, 64]), 16
    M, D = rng.randint(k + 1, 40), k + rng.randint(0, 3)
    R, W = 2000, rng.randint(0, 300)
    alpha = rng.choice([0.5, 0.9, 1.2, 1.8])
    args = ["--docs", N, "--k", k, "--positions", D, "--requests", R, "--warmup", W, "--budget",
            M * -(-L // P) * P, "--doc-len", L, "--page-size", P, "--alpha", alpha, "--seed", SEED,
            "--policy", "lazy"]
    out = sim(*args, "--evict", "gdsf", "--trace", tmp_path / "t.txt").stdout
    assert "eviction gdsf" in out
    rows, _ = parse(out)
    hits = gdsf_replay(read_trace(tmp_path / "t.txt"), M, L, P, W)
    cfg = f"seed {SEED + 7}: N={N} k={k} D={D} L={L} M={M} W={W} alpha={alpha}"
    assert rows["lazy"]["hits"] == hits, cfg
    # the replay is not LRU's: on this trace the two policies differ (else the check is empty)
    lru_hits, _ = lru_replay(read_trace(tmp_path / "t.txt"), M, L, W, agnostic=True)
    assert lru_hits != hits or M >= N, cfg


def test_gdsf_beats_lru_under_stationary_zipf():
    # The paper's point (α 0.8526, D 20, 100 of 1000 documents fit, docs/SIM.md): LRU keeps what
    # was recent, GDSF what is frequent, which under a stationary law is what stays popular.
    # Measured (R 50000): lazy .430 → .506, copy .062 → .107; held here at R 20000 to ≥ 10%
    # relative, far under the measured gains and far over this trace's sampling noise (≈ 1%).
    args = ["--docs", 1000, "--alpha", 0.8526, "--k", 1, "--positions", 20, "--requests", 20000,
            "--doc-len", 128, "--budget", 12800, "--seed", 0]
    lru = parse(sim(*args, "--evict", "lru").stdout)[0]
    gdsf = parse(sim(*args, "--evict", "gdsf").stdout)[0]
    for mode in ("lazy", "copy"):
        assert gdsf[mode]["ratio"] >= 1.10 * lru[mode]["ratio"], (mode, lru[mode], gdsf[mode])
    # never above the static optimum of the trace's own frequencies (printed by sim)
    preds = parse(sim(*args, "--evict", "gdsf").stdout)[1]
    assert gdsf["lazy"]["ratio"] <= preds["static top-M, trace"][0] + 0.01


def test_lazy_ge_copy_any_ge_copy():
    rng = random.Random(SEED)
    for _ in range(4):
        k = rng.randint(1, 6)
        args = ["--docs", rng.randint(50, 500), "--k", k, "--positions", k + rng.randint(0, 10),
                "--alpha", rng.choice([0.3, 0.8, 1.1, 1.5, 2.2]), "--doc-len", rng.choice([16, 50, 128]),
                "--requests", 1500, "--seed", rng.randrange(1 << 30), "--page-size", 16]
        L = args[args.index("--doc-len") + 1]
        ppd = -(-L // 16)
        args += ["--budget", rng.randint(k + 2, 200) * ppd * 16, "--policy", "copy"]
        lazy = parse(sim(*args[:-1], "lazy").stdout)[0]["lazy"]
        rows = parse(sim(*args).stdout)[0]
        assert lazy["hits"] >= rows["copy-any"]["hits"] >= rows["copy"]["hits"], (SEED, args)


def test_prefix_equals_lazy_for_one_document_at_position_zero():
    # k = 1, D = 1, L a multiple of P, budget a multiple of L: every prompt is one document from
    # position 0, the prefix cache's page LRU evicts whole documents, so it must agree exactly
    # with the document cache (and copy with lazy: there is only one Δ).
    rng = random.Random(SEED)
    L = 16 * rng.randint(1, 6)
    args = ["--docs", rng.randint(20, 300), "--k", 1, "--doc-len", L, "--budget",
            L * rng.randint(2, 60), "--alpha", rng.choice([0.6, 1.0, 1.4]), "--requests", 3000,
            "--seed", SEED]
    rows = parse(sim(*args).stdout)[0]
    assert rows["prefix"]["hit_tok"] == rows["lazy"]["hit_tok"], (SEED, args)
    assert rows["copy"]["hits"] == rows["lazy"]["hits"], (SEED, args)


def test_closed_form_and_lru_theory():
    # k = 1, D = 20, C = 100 documents: the trace's static top-M equals the paper's closed form up
    # to sampling noise, and LRU sits where Che's approximation puts it (IRM requests).
    R, W = 40000, 4000
    out = sim("--docs", 1000, "--k", 1, "--positions", 20, "--alpha", 0.8526, "--requests", R,
              "--warmup", W, "--budget", 12800, "--doc-len", 128, "--policy", "lazy", "--seed",
              SEED).stdout
    out_c = sim("--docs", 1000, "--k", 1, "--positions", 20, "--alpha", 0.8526, "--requests", R,
                "--warmup", W, "--budget", 12800, "--doc-len", 128, "--policy", "copy", "--seed",
                SEED).stdout
    rows, pred = parse(out)
    rows.update(parse(out_c)[0])
    i = np.arange(1, 1001, dtype=float) ** -0.8526
    lazy_cf, copy_cf = i[:100].sum() / i.sum(), i[:5].sum() / i.sum()
    assert abs(pred["static top-M, Zipf"][0] - lazy_cf) < 1e-4
    assert abs(pred["static top-M, Zipf"][1] - copy_cf) < 1e-4
    assert abs(lazy_cf / copy_cf - 2.86) < 0.005
    # binomial noise of a frequency estimated from 36000 draws: sd <= 0.0027; 0.012 is > 4 sd
    assert abs(pred["static top-M, trace"][0] - lazy_cf) < 0.012, SEED
    assert abs(pred["static top-M, trace"][1] - copy_cf) < 0.012, SEED
    lazy, copy = rows["lazy"]["ratio"], rows["copy"]["ratio"]
    # Che's approximation of LRU is accurate to ~1% under IRM (Fricker et al. 2012); the LRU run's
    # own noise (correlated misses) is a few 0.1%. 0.015 absolute covers both.
    assert abs(lazy - pred["LRU, Che"][0]) < 0.015, (SEED, lazy, pred)
    assert abs(copy - pred["LRU, Che"][1]) < 0.015, (SEED, copy, pred)
    # LRU never beats the static optimum (beyond noise) and is clearly below it here.
    assert lazy < lazy_cf and copy < copy_cf
    m = re.search(r"2\.86x at D = 20, C = 100 documents: ([\d.]+)", out)
    a = float(m[1])
    i100 = np.arange(1, 101, dtype=float) ** -a
    assert abs(i100.sum() / i100[:5].sum() - 2.86) < 1e-3, a


def test_lru_near_optimal_at_high_skew():
    # At high skew LRU keeps the few documents that matter: simulated within 0.02 of the static
    # top-M closed form (measured gap at these settings: ~0.005).
    rows, pred = parse(sim("--docs", 1000, "--k", 1, "--alpha", 2.5, "--requests", 20000,
                           "--budget", 20 * 64, "--doc-len", 64, "--policy", "lazy", "--seed",
                           SEED).stdout)
    assert pred["static top-M, Zipf"][0] - 0.02 < rows["lazy"]["ratio"] <= pred["static top-M, Zipf"][0] + 0.01, (SEED, rows, pred)


def test_plot(tmp_path):
    png = tmp_path / "hit.png"
    args = ["--docs", 200, "--requests", 600, "--k", 2, "--doc-len", 32, "--plot", png]
    if shutil.which("gnuplot"):
        p = sim(*args)
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    env = dict(os.environ, PATH="/nonexistent")
    p = sim(*args[:-2], "--plot", tmp_path / "no.png", check=False, env=env)
    assert p.returncode == 1 and "gnuplot" in p.stderr
