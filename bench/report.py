#!/usr/bin/env python3
"""bench/report.py — the GPU tables of docs/BENCHMARKS.md, in Markdown, from bench/gpu-run.sh logs.

Usage: bench/report.py RESULTS [RESULTS ...]

Each RESULTS is a results.tgz written by bench/gpu-run.sh or a folder holding its logs; when a log
is in several, the first one named wins (so later ones fill what earlier ones lack). Prints, for
what the logs hold: the run (GPU, date), the correctness counts, the kernel table with the library
rows of the same run (bench/torch_baselines.py), the block-scaled FP8 GEMMs, the end-to-end table,
the LLaDA step and GSM8K tables and the RAG-serving table. A table whose logs are absent is left
out. Standard library only; tested by tests/test_bench_report.py on tests/data/bench-report/.
"""
import csv
import io
import json
import re
import sys
import tarfile
from pathlib import Path


def load(path):
    """{log name: text} of a results.tgz or a folder."""
    files = {}
    p = Path(path)
    if p.is_dir():
        for f in sorted(p.iterdir()):
            if f.is_file():
                files[f.name] = f.read_text(errors="replace")
    else:
        with tarfile.open(p) as t:
            for m in t.getmembers():
                if m.isfile():
                    files[Path(m.name).name] = t.extractfile(m).read().decode(errors="replace")
    return files


def counts(text):
    """'N passed, N failed' of a test log's last summary line, or None."""
    m = re.findall(r"(\d+) passed, (\d+) failed", text or "")
    return f"{m[-1][0]} / {m[-1][1]}" if m else None


def md_rows(text):
    """The cells of every Markdown table row of a log, header and rule rows left out."""
    rows = []
    for line in (text or "").splitlines():
        if not line.startswith("|") or set(line) <= set("|-: "):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows.append(cells)
    return rows


def num(s):
    """The first number in s (commas allowed), or None."""
    m = re.search(r"-?[\d,]*\.?\d+(?:e[+-]?\d+)?", s or "")
    return float(m.group(0).replace(",", "")) if m else None


def fmt(x, digits=0):
    return "—" if x is None else f"{x:,.{digits}f}"


def torch_rows(text):
    """bench/torch_baselines.py's JSON lines, keyed by bench name (sdpa_decode: by dtype, batch)."""
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


def check_bench(files):
    """gpu-check's 'bench:' lines, from its full run and from the opsbench step."""
    lines = []
    for name in ("gpu-check.log", "gpu-check-bench.log"):
        lines += [l.split("bench:", 1)[1].strip() for l in files.get(name, "").splitlines()
                  if "bench:" in l]
    return lines


def find(lines, *words):
    """The first line holding every word."""
    return next((l for l in lines if all(w in l for w in words)), None)


def ms_tf(line):
    """(ms, TFLOP/s) of a gpu-check timing line, or None."""
    m = re.search(r"([\d.]+) ms\s+([\d.]+) TFLOP/s", line or "")
    return (float(m.group(1)), float(m.group(2))) if m else None


def section_run(files, out):
    gpu = files.get("gpu.txt", "").strip().splitlines()
    if len(gpu) >= 2:
        name = gpu[1].split(",")
        date = gpu[2].strip() if len(gpu) > 2 else "?"
        out += [f"**Run:** {name[0].strip()}, driver {name[1].strip()}; {date}.", ""]
    rows = []
    for log, what in (("gpu-check.log", "gpu-check"), ("gpu-model.log", "gpu-model"),
                      ("gpu-model-f32kv.log", "gpu-model, f32 KV"),
                      ("gpu-model-graphs.log", "gpu-model, step graphs"),
                      ("test-rag-cuda.log", "test-rag on CUDA"),
                      ("test-rag-cuda-f32kv.log", "test-rag on CUDA, f32 KV"),
                      ("test-dllm-cuda.log", "test-dllm on CUDA"),
                      ("test-dllm-cuda-graphs.log", "test-dllm on CUDA, step graphs"),
                      ("test-llada-cuda.log", "test-llada on CUDA")):
        c = counts(files.get(log))
        if c:
            rows.append(f"{what} {c}")
    if rows:
        out += ["**Correctness (passed / failed):** " + "; ".join(rows) + ".", ""]


def section_kernels(files, out):
    kern = {r[0] + " | " + r[1]: r for r in md_rows(files.get("bench-kernels.log")) if len(r) >= 5}
    bench = check_bench(files)
    tr = torch_rows(files.get("torch.jsonl"))
    rows = []

    def sdpa_decode_gbps(batch, backend):
        d = tr.get(("sdpa_decode", "bfloat16", batch))
        ms = d and (d.get("backends") or {}).get(backend)
        return d["bytes_kv"] / ms / 1e6 if ms else None

    for batch in (1, 16, 64):
        ours = None
        for key, r in kern.items():
            if key.startswith("attention decode | batch %d," % batch) and "bf16" in key:
                ours = num(r[3])
        if ours is None:
            line = find(bench, "decode attention bf16 batch %2d (Δ rotation)" % batch,
                        *(["one call"] if batch > 1 else []))
            ours = num(line.split("ms/step", 1)[1]) if line else None
        lib = [f"{n} {fmt(sdpa_decode_gbps(batch, b))}" for n, b in (("cuDNN", "cudnn"),
                                                                      ("FA2", "flash"))
               if sdpa_decode_gbps(batch, b)]
        if ours is not None or lib:
            rows.append((f"decode attention, batch {batch} (GB/s)", fmt(ours), ", ".join(lib)))
    over = []
    for batch in (1, 16, 64):
        extra = ["one call"] if batch > 1 else []
        a = find(bench, "decode attention bf16 batch %2d (Δ rotation)" % batch, *extra)
        b = find(bench, "decode attention bf16 batch %2d (no Δ)" % batch, *extra)
        if a and b:
            ta, tb = num(a.split(")", 1)[1]), num(b.split(")", 1)[1])
            over.append(f"{100 * (ta / tb - 1):+.1f} %")
    if over:
        rows.append(("decode rotation overhead (Δ vs none), batch 1 / 16 / 64", " / ".join(over), ""))
    pf = tr.get("sdpa_prefill")
    lib = ""
    if pf:
        bms = pf.get("backends_ms") or {}
        lib = ", ".join(f"{n} {bms[b]:.3f} ms, {pf['flops'] / bms[b] / 1e9:,.0f} TFLOP/s"
                        for n, b in (("cuDNN", "cudnn"), ("FA2", "flash")) if bms.get(b))
    nod = ms_tf(find(bench, "prefill attention T 4096", "async", "(no Δ)"))
    rot = ms_tf(find(bench, "prefill attention T 4096", "async", "(Δ rotation)"))
    if nod:
        rows.append(("prefill attention T 4096 causal, no Δ",
                     f"{nod[0]:.3f} ms, {nod[1]:,.0f} TFLOP/s", lib))
        if rot:
            rows.append(("prefill rotation overhead (Δ per 512-token document)",
                         f"{100 * (rot[0] / nod[0] - 1):+.1f} %", ""))
    else:
        r = kern.get("attention prefill (causal) | T 4096, H 32, Hkv 8, Dh 128")
        if r:
            rows.append(("prefill attention T 4096 causal", f"{num(r[2]):.3f} ms, {num(r[4]):,.0f} "
                         "TFLOP/s", lib))
    q = ms_tf(find(bench, "query prefill", "split-K", "(no Δ)"))
    qr = ms_tf(find(bench, "query prefill", "split-K", "(Δ rotation)"))
    if q:
        extra = f" ({100 * (qr[0] / q[0] - 1):+.1f} % with Δ)" if qr else ""
        rows.append(("RAG query prefill: 64 rows over 5 documents × 2,048 + own",
                     f"{q[0]:.3f} ms, {q[1]:,.0f} TFLOP/s{extra}", ""))
    copy = tr.get("copy_bw")
    gu = kern.get("matmul decode (gate / up) | T 1, N 14336, K 4096, bf16 W")
    dn = kern.get("matmul decode (down) | T 1, N 4096, K 14336, bf16 W")
    if gu and dn:
        base = f"copy {copy['GBps'] / 1e3:.2f} TB/s" if copy else ""
        rows.append(("decode GEMV gate/up / down (TB/s)",
                     f"{num(gu[3]) / 1e3:.2f} / {num(dn[3]) / 1e3:.2f}", base))
    pg = kern.get("matmul prefill (gate / up) | M 4096, N 14336, K 4096")
    if pg:
        g = tr.get("gemm_bf16")
        rows.append(("prefill GEMM gate/up, M 4096 (TFLOP/s)", fmt(num(pg[4])),
                     f"torch.matmul 8192³ {g['TFLOPs']:,.0f}" if g else ""))
    x0 = find(bench, "dllm_x0", "T=1.0 ") or find(bench, "dllm_x0", "T=1.0")
    if x0:
        rows.append(("LLaDA decision step dllm_x0, T 1.0", x0.split("T=1.0", 1)[1].split("(")[0]
                     .strip(), ""))
    if rows:
        out += ["### Kernels", "", "| kernel | lazyinfer | library, same run |", "|---|---:|---:|"]
        out += [f"| {a} | {b} | {c or '—'} |" for a, b, c in rows]
        out.append("")
    fp8 = {}
    for l in bench:
        m = re.match(r"GEMM N=\s*(\d+) K=\s*(\d+) M=\s*(\d+) .* speed-up ([\d.]+)x", l)
        if m:
            fp8.setdefault((int(m.group(1)), int(m.group(2))), {})[int(m.group(3))] = m.group(4)
    if fp8:
        ms = sorted({m for v in fp8.values() for m in v})
        out += ["### Block-scaled FP8 GEMMs against bf16", "",
                "| GEMM | " + " | ".join(f"M {m}" for m in ms) + " |",
                "|---|" + "---:|" * len(ms)]
        for (n, k), v in sorted(fp8.items(), key=lambda kv: -kv[0][0]):
            name = "gate / up" if n > k else "down"
            out.append(f"| {name} (N {n}, K {k}) | " + " | ".join(
                f"{v[m]}×" if m in v else "—" for m in ms) + " |")
        out.append("")


def section_e2e(files, out):
    rows = {r[4]: r[5] for r in md_rows(files.get("e2e-8b.log")) if len(r) >= 6}
    pp = next((k for k in rows if k.startswith("pp")), None)
    tg = next((k for k in rows if k.startswith("tg")), None)
    if not pp or not tg:
        return
    eager = torch_rows(files.get("torch.jsonl")).get("eager_llama8b", {})
    n_pp, pps, tgs = int(pp[2:]), num(rows[pp]), num(rows[tg])
    out += ["### synth:llama-3.1-8b end to end", "",
            "| | lazyinfer | PyTorch eager, same run |", "|---|---:|---:|",
            f"| prefill {n_pp:,} tokens | {1e3 * n_pp / pps:,.0f} ms ({pps:,.0f} tok/s) | "
            f"{fmt(eager.get('prefill_ms'))} ms |",
            f"| decode, batch 1 | {1e3 / tgs:.2f} ms/token ({tgs:.1f} tok/s) | "
            f"{fmt(eager.get('decode_ms_per_token_median'), 1)} ms/token (median) |", ""]


def canvas_ms(text):
    """{(canvas, method): ms/step} of `bench dllm --canvas`."""
    return {(int(r[0]), r[1]): num(r[2]) for r in md_rows(text)
            if len(r) >= 3 and r[0].isdigit()}


def section_llada(files, out):
    bf = canvas_ms(files.get("bench-dllm-canvas.log"))
    f32 = canvas_ms(files.get("bench-dllm-canvas-f32act.log"))
    tl = torch_rows(files.get("torch-llada.jsonl")).get("eager_llada8b", {})
    step = tl.get("step_ms", {})
    if bf:
        out += ["### LLaDA-8B: one denoising step (ms)", "",
                "| canvas | vanilla | LaCache (caches + trunc) | LaCache + FP8 | vanilla, f32 "
                "activations | PyTorch eager |", "|---:|---:|---:|---:|---:|---:|"]
        for c in sorted({c for c, _ in bf}):
            torch_ms = (step.get(str(c)) or {}).get("ms")
            out.append(f"| {c} | {fmt(bf.get((c, 'vanilla')), 2)} | "
                       f"{fmt(bf.get((c, 'LaCache (caches + trunc)')), 2)} | "
                       f"{fmt(bf.get((c, 'LaCache + FP8')), 2)} | {fmt(f32.get((c, 'vanilla')), 2)} | "
                       f"{fmt(torch_ms, 2)} |")
        out.append("")
    gsm = []
    prompt = None  # the engine's prompt length, as its table's header says
    for log in ("bench-dllm.log", "bench-dllm-k4.log", "bench-dllm-k8.log"):
        text = files.get(log)
        k = re.search(r"Commit exactly (\d+) per step", text or "")
        p = re.search(r"mean prompt (\d+) tokens", text or "")
        prompt = prompt or (p and int(p.group(1)))
        for r in md_rows(text):
            if len(r) < 6 or num(r[1]) is None:
                continue
            name = r[0]
            if log != "bench-dllm.log" and name == "vanilla":
                continue
            if name in ("+parallel", "all combined", "all combined (no FP8)") and k:
                K = k.group(1)  # "all combined (no FP8, K = 2)"
                name = name[:-1] + f", K = {K})" if name.endswith(")") else name + f" (K = {K})"
            elif name not in ("vanilla", "+LaCache (all)", "+DPad"):
                continue
            gsm.append((name, num(r[1]), num(r[2]), num(r[5])))
    if gsm:
        e2e = tl.get("e2e") or {}
        base = e2e.get("latency_ms")
        ids = "random ids" if e2e.get("prompt_ids", "random") == "random" else "the engine's ids"
        same = "" if base is None else \
            f" (prompt {e2e.get('prompt_tokens')} tokens, {ids}; the engine's: {prompt})"
        if base is not None and e2e.get("prompt_tokens") != prompt:
            same += " — NOT the engine's prompt length: the ratios below compare different work"
        out += ["### LLaDA-8B: GSM8K end to end", "",
                f"PyTorch eager vanilla, same run: {fmt(base)} ms.{same}", "",
                "| method | latency ms | tok/s | ms/step | vs PyTorch vanilla |",
                "|---|---:|---:|---:|---:|"]
        for name, lat, tps, msps in gsm:
            ratio = f"{base / lat:.2f}×" if base else "—"
            out.append(f"| {name} | {fmt(lat)} | {tps:.1f} | {msps:.1f} | {ratio} |")
        out.append("")


def section_rag(files, out):
    runs = {}
    for name in ("ragbench-zipf.csv", "ragbench-none.csv", "ragbench-uniform.csv"):
        for r in csv.DictReader(io.StringIO(files.get(name, ""))):
            runs.setdefault(name, []).append(r)
    zipf = runs.get("ragbench-zipf.csv")
    if not zipf:
        return
    by = {}
    for r in zipf:
        by.setdefault((float(r["rate"]), int(r["budget_bytes"]), r["budget"]), {})[r["mode"]] = r
    modes = [m for m in ("lazy", "copy", "prefix", "none") if any(m in v for v in by.values())]
    out += ["### RAG serving (Zipf trace)", "",
            "| rate /s | budget | " + " | ".join(f"{m} TTFT p50 / p99 ms" for m in modes) +
            " | req/s " + " / ".join(modes) + " | hit ratio " + " / ".join(modes) +
            (" | lazy vs copy: TTFT p50, p99, req/s |" if {"lazy", "copy"} <= set(modes) else " |"),
            "|---:|---:|" + "---:|" * (len(modes) + 2) +
            ("---|" if {"lazy", "copy"} <= set(modes) else "")]

    def served(r):
        return r and int(r["done"]) > 0

    for (rate, _, budget), v in sorted(by.items()):
        cells = [f"{rate:g}", budget]
        for m in modes:
            r = v.get(m)
            cells.append(f"{num(r['ttft_p50_ms']):,.0f} / {num(r['ttft_p99_ms']):,.0f}"
                         if served(r) else "—")
        cells.append(" / ".join(f"{num(v[m]['req_per_s']):.2f}" if served(v.get(m)) else "—"
                                for m in modes))
        cells.append(" / ".join(f"{num(v[m]['doc_hit_ratio']):.2f}" if served(v.get(m)) else "—"
                                for m in modes))
        if {"lazy", "copy"} <= set(modes):
            a, b = v.get("lazy"), v.get("copy")
            if served(a) and served(b):
                cells.append(", ".join(f"{x:.2f}×" for x in (
                    num(b["ttft_p50_ms"]) / num(a["ttft_p50_ms"]),
                    num(b["ttft_p99_ms"]) / num(a["ttft_p99_ms"]),
                    num(a["req_per_s"]) / num(b["req_per_s"]))))
            else:
                cells.append("—")
        out.append("| " + " | ".join(cells) + " |")
    out.append("")
    for name, what in (("ragbench-none.csv", "No reuse (`none`)"),
                       ("ragbench-uniform.csv", "Uniform popularity (α = 0)")):
        for r in runs.get(name, []):
            if served(r):
                out.append(f"{what}, {r['mode']}, rate {r['rate']}, {r['budget']}: TTFT p50 / p99 "
                           f"{num(r['ttft_p50_ms']):,.0f} / {num(r['ttft_p99_ms']):,.0f} ms, "
                           f"{num(r['req_per_s']):.2f} req/s, hit ratio "
                           f"{num(r['doc_hit_ratio']):.2f}.")
    if runs.get("ragbench-none.csv") or runs.get("ragbench-uniform.csv"):
        out.append("")


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__, file=sys.stderr)
        return 2
    files = {}
    for path in reversed(argv[1:]):
        if not Path(path).exists():
            print(f"report.py: {path}: no such file or folder", file=sys.stderr)
            return 2
        files.update(load(path))
    out = []
    for section in (section_run, section_kernels, section_e2e, section_llada, section_rag):
        section(files, out)
    if not out:
        print("report.py: no log of bench/gpu-run.sh found in " + " ".join(argv[1:]),
              file=sys.stderr)
        return 1
    print("\n".join(out).rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
