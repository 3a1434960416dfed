#!/usr/bin/env python3
"""bench/report.py — markdown for docs/BENCHMARKS.md from one bench/gpu-run.sh call.

Usage: bench/report.py RESULTS [RESULTS ...]   (a results.tgz or a folder of its logs; later ones
fill what earlier ones lack). Prints: the correctness counts, lazyinfer's end-to-end figures next
to PyTorch's from the same call, the kernel timings with their baselines, and the RAG-serving rows.
Standard library only.
"""
import csv
import io
import json
import re
import sys
import tarfile
from pathlib import Path


def load(path):
    """{file name: text} of a results.tgz or a folder."""
    files = {}
    p = Path(path)
    if p.is_dir():
        for f in p.iterdir():
            if f.is_file():
                files[f.name] = f.read_text(errors="replace")
    else:
        with tarfile.open(p) as t:
            for m in t.getmembers():
                if m.isfile():
                    files[Path(m.name).name] = t.extractfile(m).read().decode(errors="replace")
    return files


def counts(text):
    m = re.findall(r"(\d+) passed, (\d+) failed", text or "")
    return f"{m[-1][0]} passed, {m[-1][1]} failed" if m else "not run"


def e2e(text):
    """(pp tokens, pp t/s, tg t/s) from `bench generate`'s table."""
    pp = re.search(r"\| pp(\d+) \| ([\d.]+)", text or "")
    tg = re.search(r"\| tg\d+ \| ([\d.]+)", text or "")
    if not pp or not tg:
        return None
    return int(pp.group(1)), float(pp.group(2)), float(tg.group(1))


def torch_rows(text):
    rows = {}
    for line in (text or "").splitlines():
        try:
            d = json.loads(line)
        except ValueError:
            continue
        key = d.get("bench")
        if key == "sdpa_decode":
            key = (key, d.get("kv_dtype"), d.get("batch"))
        rows[key] = d
    return rows


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    files = {}
    for path in reversed(argv[1:]):
        files.update(load(path))
    out = []
    out.append("**Correctness:** gpu-check " + counts(files.get("gpu-check.log")) +
               "; gpu-model " + counts(files.get("gpu-model.log")) +
               "; test-rag on CUDA " + counts(files.get("test-rag-cuda.log")) +
               "; test-dllm on CUDA " + counts(files.get("test-dllm-cuda.log")) + ".")
    if "gpu.txt" in files:
        out.append("**GPU:** " + " ".join(files["gpu.txt"].split()))
    tr = torch_rows(files.get("torch.jsonl"))
    e = e2e(files.get("e2e-8b.log"))
    eager = tr.get("eager_llama8b", {})
    if e:
        n_pp, pp, tg = e
        out.append("")
        out.append("| synth:llama-3.1-8b | lazyinfer (CUDA) | PyTorch eager, same call |")
        out.append("|---|---:|---:|")
        out.append(f"| prefill {n_pp} tokens | {1e3 * n_pp / pp:,.0f} ms ({pp:,.0f} tok/s) | "
                   f"{eager.get('prefill_ms', float('nan')):,.0f} ms |")
        out.append(f"| decode, batch 1 | {1e3 / tg:.2f} ms/token ({tg:.1f} tok/s) | "
                   f"{eager.get('decode_ms_per_token_median', float('nan')):.1f} ms/token (median) |")
    bench = [l.strip() for l in files.get("gpu-check.log", "").splitlines() if "bench:" in l]
    if bench:
        out.append("")
        out.append("gpu-check timings:")
        out.append("")
        out += ["    " + b for b in bench]
    sd = [(k, v) for k, v in tr.items() if isinstance(k, tuple)]
    if sd:
        out.append("")
        out.append("| PyTorch SDPA decode, ctx 20480 | batch | ms | GB/s |")
        out.append("|---|---:|---:|---:|")
        for (_, dt, b), d in sorted(sd, key=lambda kv: (str(kv[0][1]), kv[0][2])):
            out.append(f"| {dt} | {b} | {d['ms']:.3f} | {d['GBps']:,.0f} |")
    for k in ("sdpa_prefill", "copy_bw", "gemm_bf16"):
        if k in tr:
            d = tr[k]
            fig = d.get("TFLOPs") or d.get("GBps")
            unit = "TFLOP/s" if "TFLOPs" in d else "GB/s"
            extra = f", per backend ms {d['backends_ms']}" if "backends_ms" in d else ""
            out.append(f"- {k}: {d['ms']:.3f} ms, {fig:,.1f} {unit}{extra}")
    for name in sorted(n for n in files if n.startswith("ragbench") and n.endswith(".csv")):
        rows = list(csv.DictReader(io.StringIO(files[name])))
        if not rows:
            continue
        out.append("")
        out.append(f"{name}:")
        out.append("")
        out.append("| mode | rate /s | budget | TTFT p50 ms | TTFT p99 ms | req/s | hit ratio | done |")
        out.append("|---|---:|---:|---:|---:|---:|---:|---|")
        for r in rows:
            out.append(f"| {r['mode']} | {r['rate']} | {r['budget']} | {r['ttft_p50_ms']} | "
                       f"{r['ttft_p99_ms']} | {r['req_per_s']} | {r['doc_hit_ratio']} | "
                       f"{r['done']}/{r['requests']} |")
    if "bench-dllm.log" in files:
        out.append("")
        out.append("bench dllm (synth:llada-8b):")
        out.append("")
        out += [l for l in files["bench-dllm.log"].splitlines() if l.startswith("|")]
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
