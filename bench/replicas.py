#!/usr/bin/env python3
"""replicas.py — two `lazyinfer serve` replicas on one Redis (README "Sharing documents across
replicas", docs/BENCHMARKS.md): the second replica's time to first token for documents the first
one prefilled, against a prefill (the first replica, cold) and a pool hit (the second replica
asked again). Not part of `make test` (tests/test_kv_tiers.py checks the same path by counters).

Each request carries --docs passages of the RAG samples (data/rag-samples, a different set per
request) and one question. Phases, one request at a time (no queueing in the figures):
  prefill   replica A, cold: every document prefilled, then written through to Redis
  redis     replica B: every document promoted from Redis (its pool and host tier are empty)
  pool      replica B again: every document a hit in its own pool
TTFT is the time to a one-token answer over HTTP (non-streaming, max_tokens 1). Also printed:
B's /metrics remote hits and promotions (every document of every request must be a hit).

  bench/replicas.py                          # SmolLM2 (the default model), 12 requests of 3
  bench/replicas.py --model synth:tiny-llama --requests 4
Needs redis-server (scripts/setup.sh installs it); started here on a free port, stopped after.
"""
import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "server"))
from harness import Server, client  # noqa: E402
from redis_fixture import RedisServer  # noqa: E402


def passages(n_req, k):
    """n_req lists of k distinct passages (text), from the RAG samples in file order."""
    texts = []
    for f in sorted((ROOT / "data" / "rag-samples").glob("*.json"), key=lambda p: int(p.stem)):
        sample = json.loads(f.read_text())  # {"0": passage, "1": …, "query", "chunk_num"}
        texts += [sample[str(i)] for i in range(int(sample.get("chunk_num", 0))) if str(i) in sample]
    texts = [t for t in texts if t.strip()]
    if len(texts) < n_req * k:
        sys.exit(f"replicas.py: {len(texts)} passages in data/rag-samples, {n_req * k} needed")
    return [texts[i * k:(i + 1) * k] for i in range(n_req)]


def ttft(s, docs):
    c = client(s)
    model = c.models.list().data[0].id
    t0 = time.perf_counter()
    r = c.chat.completions.create(model=model, temperature=0, max_tokens=1,
                                  messages=[{"role": "user", "content": "What is this about?"}],
                                  extra_body={"documents": docs})
    return (time.perf_counter() - t0) * 1e3, r.usage.prompt_tokens_details.cached_tokens


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--requests", type=int, default=12)
    ap.add_argument("--docs", type=int, default=3, help="passages per request")
    ap.add_argument("--threads", type=int, default=0, help="-t of each serve (0: all cores)")
    a = ap.parse_args()
    reqs = passages(a.requests, a.docs)
    redis = RedisServer()
    common = ["--ctx-size", "4096", "--kv-remote", redis.url]
    if a.threads:
        common += ["-t", str(a.threads)]
    ra = rb = None
    try:
        ra = Server(a.model, *common)
        rb = Server(a.model, *common)
        rows = {"prefill (replica A, cold)": [], "redis (replica B)": [], "pool (replica B again)": []}
        cached = {k: 0 for k in rows}
        for docs in reqs:
            t, c = ttft(ra, docs)
            rows["prefill (replica A, cold)"].append(t)
            cached["prefill (replica A, cold)"] += c
        want = a.requests * a.docs + 1  # + the chat template's system block
        deadline = time.time() + 60
        key = 'lazyinfer_kv_tier_resident_entries{tier="remote"}'
        while ra.metrics().get(key, 0) < want and time.time() < deadline:
            time.sleep(0.05)
        for docs in reqs:
            t, c = ttft(rb, docs)
            rows["redis (replica B)"].append(t)
            cached["redis (replica B)"] += c
        for docs in reqs:
            t, c = ttft(rb, docs)
            rows["pool (replica B again)"].append(t)
            cached["pool (replica B again)"] += c
        m = rb.metrics()
        hits = m.get('lazyinfer_kv_tier_hits_total{tier="remote"}', 0)
        promoted_mib = m.get('lazyinfer_kv_tier_bytes_in_total{tier="remote"}', 0) / 2**20
        promote_s = m.get('lazyinfer_kv_tier_promotion_seconds_total{tier="remote"}', 0)
        print(f"## two replicas, one Redis — {Path(a.model).name}, {a.requests} requests of "
              f"{a.docs} passages, one at a time\n")
        print("| phase | TTFT p50 ms | TTFT p99 ms | mean ms | cached prompt tokens |")
        print("|---|---:|---:|---:|---:|")
        for k, v in rows.items():
            print(f"| {k} | {pct(v, 50):.1f} | {pct(v, 99):.1f} | {statistics.mean(v):.1f} | {cached[k]} |")
        print(f"\nreplica B: {hits:.0f} remote hits of {want} blocks, {promoted_mib:.1f} MiB promoted, "
              f"{promote_s * 1e3 / max(hits, 1):.2f} ms per promotion (lookup to pages queued)")
        ok = hits == want
    finally:
        for s in (ra, rb):
            if s:
                s.stop()
        redis.stop()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
