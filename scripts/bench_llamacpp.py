#!/usr/bin/env python3
"""scripts/bench_llamacpp.py — llama.cpp (through llama-cpp-python) as the CPU peer of
`lazyinfer bench generate`, measured the way llama-bench measures.

Tests, per model file:
  pp512  one llama_decode of a 512-token batch (n_batch = n_ubatch = 512): token 0 is BOS,
         the rest are random ids from a fixed seed; tokens/s = 512 / time.
  tg128  after a 1-token prompt (BOS, not timed), 128 single-token llama_decode calls, each
         fed a random id (fixed seed), as llama-bench's tg does; tokens/s = 128 / time.
Each test starts from an empty KV cache (llama_memory_clear), runs 1 warm-up (discarded) and
--reps (default 5, at least 3) timed repetitions; the table gives mean ± sample std.
Time is time.perf_counter() around the native calls: llama_decode + llama_synchronize (for
tg: the whole 128-step loop, so it includes ~128 ctypes calls from Python, a few µs each,
small against ms per token). The script also reads llama.cpp's own counters
(llama_perf_context: t_p_eval_ms / t_eval_ms, measured in C from decode to synchronize) and
prints them, so the Python overhead is shown rather than assumed.
Context: n_threads = n_threads_batch = --threads (default 2), flash attention DISABLED
(llama-bench's default, -fa 0; llama_context_default_params() says AUTO = -1, which turns it
on where supported), KV cache f16 (library default), n_ctx = 1024, mmap on, no GPU offload.
LLAMA_CPP_LIB_PATH=DIR (llama-cpp-python's own switch) runs another libllama build, e.g. one
restricted to AVX+FMA+F16C; the ISA that ggml-cpu was compiled for is printed from
llama_print_system_info(). The load average is printed before and after: on a shared machine
it explains most of the spread.

Models: by default the original Q4_1 file and its F32 twin (every tensor dequantised,
written by scripts/gguf_to_f32.py if missing). lazyinfer dequantises all weights to f32 at
load and computes in f32, so the F32 row is llama.cpp at equal weight precision; the Q4_1
row is llama.cpp in its native quantised mode (activations quantised to Q8_1, integer
dot products), which lazyinfer does not do.

Before timing, the script decodes --prompt greedily on every model and compares the token
ids and the logits after the prompt with the first model's. The F32 file holds exactly the
values the Q4_1 kernels dequantise, but the Q4_1 path also quantises activations to Q8_1, so
the two need not agree token for token (on "The capital of France is" they agree for 5 of 16
tokens; logits cosine 0.99946): a mismatch is reported, fatal only with --strict. The F32
output is the one to compare with lazyinfer's f32 engine.

What it is not: a lazyinfer test or a llama-bench replacement (no depth/-d, no batch sweep).
How it is tested: run it; the greedy check and the perf-counter cross-check are its
self-checks. Needs the venv .venv-bench (llama-cpp-python, gguf, numpy); see
docs/BENCHMARKS.md for the exact commands.

Usage:
  .venv-bench/bin/python scripts/bench_llamacpp.py [--threads 2] [--reps 5] [MODEL.gguf ...]
"""

import argparse
import ctypes
import datetime
import os
import platform
import statistics
import sys
import time

import numpy as np

try:
    import llama_cpp
except ImportError as e:  # pragma: no cover - environment problem
    sys.exit(f"bench_llamacpp: llama-cpp-python is needed ({e}); see docs/BENCHMARKS.md")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_Q = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
DEFAULT_F32 = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.F32.gguf")
LLAMA_CPP_COMMIT = {"0.3.36": "0c1e57098"}  # from the llama-cpp-python CHANGELOG

# ---- logging: llama.cpp prints load details on stderr; keep them only with --verbose -----
_VERBOSE = False


@llama_cpp.llama_log_callback
def _log_cb(level, text, user_data):
    if _VERBOSE:
        sys.stderr.write(text.decode("utf-8", "replace"))


llama_cpp.llama_log_set(_log_cb, ctypes.c_void_p(0))


class Model:
    """One loaded model + one context (n_ctx 1024, n_batch = n_ubatch = 512)."""

    def __init__(self, path, threads, n_batch=512, n_ctx=1024):
        self.path = path
        mp = llama_cpp.llama_model_default_params()
        mp.n_gpu_layers = 0
        mp.use_mmap = True
        self.model = llama_cpp.llama_model_load_from_file(path.encode(), mp)
        if not self.model:
            raise SystemExit(f"bench_llamacpp: llama.cpp could not load {path}")
        cp = llama_cpp.llama_context_default_params()
        cp.n_ctx = n_ctx
        cp.n_batch = n_batch
        cp.n_ubatch = n_batch
        cp.n_seq_max = 1
        cp.n_threads = threads
        cp.n_threads_batch = threads
        cp.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        cp.no_perf = False
        self.ctx = llama_cpp.llama_init_from_model(self.model, cp)
        if not self.ctx:
            raise SystemExit(f"bench_llamacpp: could not create a context for {path}")
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)
        self.bos = llama_cpp.llama_vocab_bos(self.vocab)
        self.mem = llama_cpp.llama_get_memory(self.ctx)
        self.one = (llama_cpp.llama_token * 1)()

    def close(self):
        llama_cpp.llama_free(self.ctx)
        llama_cpp.llama_model_free(self.model)

    def clear(self):
        # Synchronize first: llama.cpp books queued tokens into its perf counters only at
        # the next synchronize, so an unsynced decode would leak into the next measurement.
        llama_cpp.llama_synchronize(self.ctx)
        llama_cpp.llama_memory_clear(self.mem, False)

    def decode(self, arr, n):
        rc = llama_cpp.llama_decode(self.ctx, llama_cpp.llama_batch_get_one(arr, n))
        if rc != 0:
            raise SystemExit(f"bench_llamacpp: llama_decode returned {rc} ({self.path})")

    # ---- the two tests: each returns (seconds by perf_counter, seconds by llama.cpp) ----
    def pp(self, tokens):
        n = len(tokens)
        arr = (llama_cpp.llama_token * n)(*tokens)
        self.clear()
        llama_cpp.llama_perf_context_reset(self.ctx)
        t0 = time.perf_counter()
        self.decode(arr, n)
        llama_cpp.llama_synchronize(self.ctx)
        t = time.perf_counter() - t0
        perf = llama_cpp.llama_perf_context(self.ctx)
        if perf.n_p_eval != n:
            raise SystemExit(f"bench_llamacpp: perf counted {perf.n_p_eval} prompt tokens, want {n}")
        return t, perf.t_p_eval_ms / 1e3

    def tg(self, tokens):
        one, decode, sync, ctx = self.one, self.decode, llama_cpp.llama_synchronize, self.ctx
        self.clear()
        one[0] = self.bos
        decode(one, 1)                          # the 1-token prompt, not timed
        sync(ctx)
        llama_cpp.llama_perf_context_reset(ctx)
        t0 = time.perf_counter()
        for tok in tokens:
            one[0] = tok
            decode(one, 1)
            sync(ctx)
        t = time.perf_counter() - t0
        perf = llama_cpp.llama_perf_context(ctx)
        if perf.n_eval != len(tokens):
            raise SystemExit(f"bench_llamacpp: perf counted {perf.n_eval} decode steps, "
                             f"want {len(tokens)}")
        return t, perf.t_eval_ms / 1e3

    def greedy(self, prompt, n_new):
        """Greedy continuation of prompt: returns (token ids, text, logits after the prompt)."""
        raw = prompt.encode()
        buf = (llama_cpp.llama_token * (len(raw) + 8))()
        n = llama_cpp.llama_tokenize(self.vocab, raw, len(raw), buf, len(buf), True, False)
        if n < 0:
            raise SystemExit("bench_llamacpp: tokenize failed")
        self.clear()
        self.decode(buf, n)
        out, text, first = [], b"", None
        piece = ctypes.create_string_buffer(256)
        for _ in range(n_new):
            logits = llama_cpp.llama_get_logits_ith(self.ctx, -1)
            row = np.ctypeslib.as_array(logits, shape=(self.n_vocab,))
            if first is None:
                first = row.copy()
            tok = int(np.argmax(row))
            out.append(tok)
            k = llama_cpp.llama_token_to_piece(self.vocab, tok, piece, len(piece), 0, False)
            text += piece.raw[:max(k, 0)]
            self.one[0] = tok
            self.decode(self.one, 1)
        return out, text.decode("utf-8", "replace"), first


def weights_dtype(path):
    """'F32' or e.g. 'Q4_1 (+Q8_0, F32)': tensor types by parameter count, largest first."""
    try:
        import gguf
    except ImportError:
        return "?"
    r = gguf.GGUFReader(path)
    count = {}
    for t in r.tensors:
        count[t.tensor_type.name] = count.get(t.tensor_type.name, 0) + int(t.n_elements)
    names = sorted(count, key=lambda k: -count[k])
    return names[0] + (f" (+{', '.join(names[1:])})" if len(names) > 1 else "")


def cpu_line():
    model, flags = "?", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and model == "?":
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    want = ["avx", "avx2", "fma", "f16c", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni"]
    have = " ".join(f if f in flags else f"no-{f}" for f in want)
    return f"{model}, {os.cpu_count()} logical CPUs, flags: {have}"


def kernel_isa(sysinfo):
    """The x86 SIMD levels ggml-cpu was compiled for, from llama_print_system_info()."""
    want = ["AVX", "AVX2", "FMA", "F16C", "AVX512", "AVX_VNNI", "AVX512_VNNI", "AVX512_BF16"]
    on = [w for w in want if f" {w} = 1 " in f" {sysinfo} "]
    return "+".join(on) if on else "no AVX"


def mean_std(xs):
    return statistics.mean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def main():
    global _VERBOSE
    ap = argparse.ArgumentParser(description="llama.cpp pp512/tg128 on CPU, llama-bench style")
    ap.add_argument("models", nargs="*", help=f"GGUF files (default: {DEFAULT_F32} and {DEFAULT_Q})")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-r", "--reps", type=int, default=5)
    ap.add_argument("-p", "--n-prompt", type=int, default=512)
    ap.add_argument("-n", "--n-gen", type=int, default=128)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--prompt", default="The capital of France is")
    ap.add_argument("--greedy-tokens", type=int, default=16)
    ap.add_argument("--strict", action="store_true", help="fail if greedy outputs differ")
    ap.add_argument("-v", "--verbose", action="store_true", help="show llama.cpp's log")
    args = ap.parse_args()
    _VERBOSE = args.verbose
    if args.reps < 3:
        ap.error("--reps must be at least 3")

    models = args.models
    if not models:
        if not os.path.exists(DEFAULT_F32):
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            import gguf_to_f32
            print(f"# writing {DEFAULT_F32} from {DEFAULT_Q}", flush=True)
            gguf_to_f32.convert(DEFAULT_Q, DEFAULT_F32)
        models = [DEFAULT_F32, DEFAULT_Q]

    llama_cpp.llama_backend_init()
    ver = llama_cpp.__version__
    sysinfo = llama_cpp.llama_print_system_info().decode().strip()
    print(f"# date (UTC): {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M}")
    print(f"# cpu: {cpu_line()}")
    print(f"# python {platform.python_version()}, llama-cpp-python {ver}, llama.cpp "
          f"{LLAMA_CPP_COMMIT.get(ver, '(commit unknown: see the llama-cpp-python CHANGELOG)')}")
    print(f"# llama_print_system_info: {sysinfo}")
    print(f"# libllama: {os.environ.get('LLAMA_CPP_LIB_PATH') or 'the one built with llama-cpp-python'}; "
          f"ggml-cpu kernels compiled for: {kernel_isa(sysinfo)}")
    print(f"# load average before (1/5/15 min): {' '.join('%.2f' % x for x in os.getloadavg())}"
          " (other processes on these cores slow every number down)")
    print(f"# command: {' '.join([os.path.relpath(sys.executable, ROOT)] + [os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:])}")
    print(f"# settings: n_threads = n_threads_batch = {args.threads}, n_batch = n_ubatch = "
          f"{args.n_prompt}, flash_attn off, KV f16, 1 warm-up + {args.reps} reps, seed {args.seed}",
          flush=True)

    rng = np.random.default_rng(args.seed)
    rows, greedy = [], {}
    for path in models:
        m = Model(path, args.threads, n_batch=max(args.n_prompt, 1))
        ids, text, first = m.greedy(args.prompt, args.greedy_tokens)
        greedy[path] = (ids, first)
        print(f"# greedy {os.path.basename(path)}: {args.prompt!r} -> {text!r} {ids}", flush=True)
        pp_tok = [m.bos] + [int(x) for x in rng.integers(0, m.n_vocab, args.n_prompt - 1)]
        tg_tok = [int(x) for x in rng.integers(0, m.n_vocab, args.n_gen)]
        dtype = weights_dtype(path)
        for name, fn, toks, n in (("pp%d" % args.n_prompt, m.pp, pp_tok, args.n_prompt),
                                  ("tg%d" % args.n_gen, m.tg, tg_tok, args.n_gen)):
            fn(toks)                            # warm-up
            wall, native = [], []
            for _ in range(args.reps):
                w, c = fn(toks)
                wall.append(n / w)
                native.append(n / c)
            print(f"#   {os.path.basename(path)} {name} per rep (t/s): "
                  + " ".join(f"{x:.1f}" for x in wall), flush=True)
            mw, sw = mean_std(wall)
            mc, sc = mean_std(native)
            med = statistics.median(wall)
            rows.append((os.path.basename(path), dtype, args.threads, name, mw, sw, med, mc, sc))
            print(f"#   {os.path.basename(path)} {name}: {mw:.2f} ± {sw:.2f} t/s "
                  f"(llama.cpp's own timer: {mc:.2f} ± {sc:.2f})", flush=True)
        m.close()
    llama_cpp.llama_backend_free()
    print(f"# load average after (1/5/15 min): {' '.join('%.2f' % x for x in os.getloadavg())}")

    ref_ids, ref_logits = greedy[models[0]]
    same = True
    for path in models[1:]:
        ids, logits = greedy[path]
        agree = next((i for i, (a, b) in enumerate(zip(ref_ids, ids)) if a != b), len(ids))
        same = same and ids == ref_ids
        d = float(np.max(np.abs(logits - ref_logits)))
        cos = float(np.dot(logits, ref_logits) / (np.linalg.norm(logits) * np.linalg.norm(ref_logits)))
        print(f"# greedy {os.path.basename(path)} vs {os.path.basename(models[0])}: first "
              f"{agree} of {len(ids)} tokens agree; logits after the prompt: max |diff| "
              f"{d:.4f}, cosine {cos:.6f}")
    print(f"# greedy outputs identical across models: {'yes' if same else 'NO'}")

    print()
    print("| model file | weights dtype | threads | test | t/s (mean ± std) | median | t/s by llama.cpp's timer | engine |")
    print("|---|---|---:|---|---:|---:|---:|---|")
    lib = os.environ.get("LLAMA_CPP_LIB_PATH")
    eng = (f"llama.cpp {LLAMA_CPP_COMMIT.get(ver, '?')} (llama-cpp-python {ver}"
           + (f", lib {lib}" if lib else "") + f"), ggml-cpu {kernel_isa(sysinfo)}")
    for f, d, t, name, mw, sw, med, mc, sc in rows:
        print(f"| {f} | {d} | {t} | {name} | {mw:.2f} ± {sw:.2f} | {med:.2f} | {mc:.2f} ± {sc:.2f} | {eng} |")
    if args.strict and not same:
        sys.exit("bench_llamacpp: greedy outputs differ between models")


if __name__ == "__main__":
    main()
