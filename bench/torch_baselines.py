#!/usr/bin/env python3
"""PyTorch baselines for lazyinfer, timed in the same run as the engine's benchmarks.

Every result is one JSON object per line on stdout (and appended to --out PATH if
given).  Each line carries at least:

    {"bench": <name>, ...figures..., "torch": torch.__version__, "device": <GPU name>}

Timing (GPU): CUDA events.  Each bench runs `warmup` untimed iterations, then `iters`
timed iterations, each bracketed by its own pair of events; the reported figure is
the median of those per-iteration times ("ms"), with min/mean alongside.  The
counts used are written into the JSON ("warmup", "iters").  Throughputs use decimal
units: GB/s = 1e9 bytes/s, TFLOP/s = 1e12 FLOP/s, computed from the median time.

Benches (Llama-3.1-8B shapes: H=32 query heads, Hkv=8 KV heads, Dh=128, D=4096,
F=14336, L=32, V=128256, rope theta 500000 with llama3 scaling):

  sdpa_decode    Decode attention: one query token per sequence against a dense KV
                 cache of ctx=20480 tokens, batch 1/16/64, KV dtype float32 (the
                 engine's KV layout, same bytes) and bfloat16.  q (B,32,1,128),
                 k/v (B,8,ctx,128), F.scaled_dot_product_attention(enable_gqa=True).
                 If enable_gqa is rejected, K/V are expanded with repeat_interleave
                 OUTSIDE the timed region and "gqa": "expanded" is recorded.
                 bytes_kv = 2 * B * Hkv * ctx * Dh * elem_size (K and V read once;
                 the unexpanded size even when expanded), GBps = bytes_kv / median.
                 "ms" is torch's default dispatch; "backends" additionally times each
                 SDPA backend forced on its own (null = that backend refused the
                 case), "best_*" is the fastest of them all.
  sdpa_prefill   Causal prefill attention: T=4096, batch 1, H=32, Hkv=8 (enable_gqa),
                 Dh=128, bf16, is_causal=True.  FLOPs = 4*T*T*H*Dh/2 (QK^T and PV,
                 2 FLOP per MAC, causal half).  Headline uses the flash backend forced
                 ("backend": "flash") or, if it refuses, the default ("default").
  eager_llama8b  transformers.LlamaForCausalLM with Llama-3.1-8B shapes, bf16,
                 random weights (normal std 0.02, built directly on the GPU; nothing
                 is downloaded), attn_implementation="sdpa", eager (no CUDA graphs,
                 no torch.compile).  (a) prefill of one 20544-token sequence
                 (5*4096+64) with use_cache=True under inference_mode, logits only
                 for the last position when logits_to_keep is supported; (b) batch-1
                 decode: prefill 512 tokens, then 32 single-token forwards through a
                 DynamicCache (greedy argmax feeds the next token, all on the GPU),
                 each forward timed separately: median and mean ms/token.  Peak
                 memory is torch.cuda.max_memory_allocated per phase.
  eager_llada8b  A plain PyTorch LLaDA-8B (GSAI-ML/LLaDA-8B shapes: L=32, D=4096,
                 H=Hkv=32, Dh=128, F=12288 SwiGLU, V=126464, RMSNorm, RoPE theta
                 500000), bf16 random weights (normal std 0.02) on the GPU, eager,
                 bidirectional F.scaled_dot_product_attention, the LM head over the
                 whole canvas (as the reference LLaDA generate does).  (a) one
                 denoising step (forward + argmax/softmax confidence/top-1 commit of
                 the last 32-token block) at canvas 512/1024/2048: "step_ms" per
                 size; (b) vanilla SAR decoding (generate.py's schedule: per block
                 steps / (gen / block) steps, low-confidence remasking) of the very
                 prompt `lazyinfer bench dllm --prompt-out FILE` decoded:
                 --llada-prompt-ids FILE gives its token ids, gen length, block and
                 steps (the explicit --llada-prompt/-gen/-block/-steps must equal
                 them); latency and tokens/s, the e2e baseline.  --llada-prompt N
                 alone decodes N random ids.  Neither given: (b) is skipped and
                 "e2e" says why (no prompt length is ever assumed).
  copy_bw        Device-to-device dst.copy_(src) of a 4 GiB buffer; bytes counted
                 = read + written = 2 * 4 GiB.  The bandwidth ceiling of this run.
  gemm_bf16      8192x8192x8192 bf16 matmul into a preallocated output;
                 FLOPs = 2*M*N*K.  The dense-compute ceiling of this run.

Usage:
  python3 bench/torch_baselines.py --out $OUT/torch.jsonl       # full run (GPU)
  python3 bench/torch_baselines.py --only copy_bw,gemm_bf16 --quick
  python3 bench/torch_baselines.py --cpu-smoke                   # no GPU needed

--cpu-smoke runs every bench at tiny shapes on the CPU in float32 where the GPU
run uses bf16 (sdpa_decode still loops over both KV dtypes), timed with
time.perf_counter.  Its numbers mean nothing; it only checks that the script runs.
Progress messages go to stderr; stdout carries only JSON lines.
"""

import argparse
import gc
import inspect
import json
import statistics
import sys
import time
import traceback
import warnings

import torch
import torch.nn.functional as F

# ---------------------------------------------------------------------------
# Llama-3.1-8B shapes
# ---------------------------------------------------------------------------
N_HEADS = 32
N_KV_HEADS = 8
HEAD_DIM = 128
D_MODEL = 4096
D_FF = 14336
N_LAYERS = 32
VOCAB = 128256
ROPE_THETA = 500000.0
ROPE_LLAMA3 = {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}
MAX_POS = 131072

BENCH_NAMES = ["sdpa_decode", "sdpa_prefill", "sdpa_dense", "eager_llama8b", "copy_bw",
               "gemm_bf16"]
# not in the default run (issue 5's baselines): --only eager_llada8b
EXTRA_BENCHES = ["eager_llada8b", "gemm_fp8"]


def log(msg):
    print(f"[torch_baselines] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------
# Context: device, dtype policy, timing, output
# ---------------------------------------------------------------------------
class Ctx:
    def __init__(self, args):
        self.smoke = args.cpu_smoke
        self.quick = args.quick
        self.out_path = args.out
        if self.smoke:
            self.dev = torch.device("cpu")
            self.device_name = "cpu"
        else:
            if not torch.cuda.is_available():
                raise SystemExit("CUDA is not available; use --cpu-smoke to test without a GPU")
            self.dev = torch.device("cuda")
            self.device_name = torch.cuda.get_device_name()
        # bf16 benches run in float32 in the CPU smoke test.
        self.half = torch.float32 if self.smoke else torch.bfloat16
        self.llada = getattr(args, "llada", None)  # eager_llada8b's (b): see llada_e2e_args

    def iters(self, warmup, iters):
        """Scale iteration counts for --quick / --cpu-smoke."""
        if self.smoke:
            return 1, 2
        if self.quick:
            return max(1, warmup // 3), max(3, iters // 5)
        return warmup, iters

    def sync(self):
        if not self.smoke:
            torch.cuda.synchronize()

    def free(self):
        gc.collect()
        if not self.smoke:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()

    def run_case(self, rec, body, *args, error_key="error", trace=False, emit=True):
        """Run one bench case, body(*args), which fills rec, and the ending every case shares.

        An exception body raises is recorded as rec[error_key] (its traceback on stderr
        with trace) and the run goes on.  The case's tensors are body's locals, gone once
        it returns or raises, so the free() that follows gives their memory back before
        the next case allocates.  Then rec is emitted (emit=False: a phase whose record
        a later one completes).  Returns whether body ran without an exception.
        """
        ok = True
        try:
            body(*args)
        except Exception as e:  # noqa: BLE001 - one case failing must not stop the rest
            rec[error_key] = f"{type(e).__name__}: {e}"[:500]
            if trace:
                log(traceback.format_exc())
            ok = False
        self.free()
        if emit:
            self.emit(rec)
        return ok

    def time_ms(self, fn, warmup, iters):
        """Run fn `warmup` times untimed, then `iters` times each timed on its own.

        GPU: a start/end CUDA event pair per iteration, recorded back to back with
        no host synchronisation between iterations, so each pair measures that
        iteration's span on the GPU timeline (including any launch gaps when the
        host is the bottleneck).  CPU: time.perf_counter around each call.
        Returns the list of per-iteration times in milliseconds.
        """
        for _ in range(warmup):
            fn()
        if self.smoke:
            times = []
            for _ in range(iters):
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e3)
            return times
        torch.cuda.synchronize()
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(iters)]
        for start, end in events:
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return [start.elapsed_time(end) for start, end in events]

    def emit(self, rec):
        rec = dict(rec)
        rec["torch"] = torch.__version__
        rec["device"] = self.device_name
        if self.smoke:
            rec["cpu_smoke"] = True
        if self.quick:
            rec["quick"] = True
        line = json.dumps(rec)
        print(line, flush=True)
        if self.out_path:
            with open(self.out_path, "a") as f:
                f.write(line + "\n")


def summarize(times, warmup):
    """Median/min/mean of per-iteration times plus the counts used."""
    return {
        "ms": statistics.median(times),
        "ms_min": min(times),
        "ms_mean": statistics.fmean(times),
        "warmup": warmup,
        "iters": len(times),
    }


def is_oom(exc):
    return isinstance(exc, torch.OutOfMemoryError) if hasattr(torch, "OutOfMemoryError") \
        else "out of memory" in str(exc)


# ---------------------------------------------------------------------------
# SDPA helpers
# ---------------------------------------------------------------------------
try:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    SDPA_BACKENDS = {
        "flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "math": SDPBackend.MATH,
    }
    _BACKEND_BY_INT = {int(v): k for k, v in SDPA_BACKENDS.items()}
except Exception:  # very old torch: no backend control
    SDPBackend = None
    sdpa_kernel = None
    SDPA_BACKENDS = {}
    _BACKEND_BY_INT = {}


def default_sdpa_backend(q, k, v, is_causal, enable_gqa):
    """Name of the backend torch's default dispatch picks (private API; may be None)."""
    try:
        choice = torch._fused_sdp_choice(q, k, v, None, 0.0, is_causal, enable_gqa=enable_gqa)
        return _BACKEND_BY_INT.get(int(choice), str(choice))
    except Exception:
        return None


def time_forced_backends(ctx, make_fn, warmup, iters):
    """Time fn under each SDPA backend forced alone; None where it is refused."""
    res = {}
    for name, backend in SDPA_BACKENDS.items():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with sdpa_kernel([backend]):
                    fn = make_fn()
                    fn()  # raises here if the backend cannot run this case
                    res[name] = statistics.median(ctx.time_ms(fn, warmup, iters))
        except Exception as e:  # noqa: BLE001 - refused / OOM: record and go on
            res[name] = None
            if is_oom(e):
                res[name + "_error"] = "oom"
            ctx.free()
    return res


# ---------------------------------------------------------------------------
# 1. sdpa_decode
# ---------------------------------------------------------------------------
def bench_sdpa_decode(ctx):
    ctx_len = 256 if ctx.smoke else 20480
    batches = [1, 2] if ctx.smoke else [1, 16, 64]
    dtypes = [torch.float32, torch.bfloat16]
    warmup, iters = ctx.iters(5, 30)
    for dtype in dtypes:
        for B in batches:
            rec = {"bench": "sdpa_decode", "kv_dtype": str(dtype).replace("torch.", ""),
                   "batch": B, "ctx": ctx_len, "n_heads": N_HEADS, "n_kv_heads": N_KV_HEADS,
                   "head_dim": HEAD_DIM}
            ctx.run_case(rec, _sdpa_decode_case, ctx, rec, dtype, B, ctx_len, warmup, iters)


def _sdpa_decode_case(ctx, rec, dtype, B, ctx_len, warmup, iters):
    q = torch.randn(B, N_HEADS, 1, HEAD_DIM, device=ctx.dev, dtype=dtype)
    k = torch.randn(B, N_KV_HEADS, ctx_len, HEAD_DIM, device=ctx.dev, dtype=dtype)
    v = torch.randn(B, N_KV_HEADS, ctx_len, HEAD_DIM, device=ctx.dev, dtype=dtype)
    bytes_kv = 2 * B * N_KV_HEADS * ctx_len * HEAD_DIM * k.element_size()
    rec["bytes_kv"] = bytes_kv

    # Native GQA if this torch accepts enable_gqa, else expand K/V once,
    # outside the timed region.
    try:
        F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        rec["gqa"] = "native"
        kk, vv, gqa_kw = k, v, {"enable_gqa": True}
    except Exception as e:  # noqa: BLE001
        if is_oom(e):
            raise
        rec["gqa"] = "expanded"
        rep = N_HEADS // N_KV_HEADS
        kk = k.repeat_interleave(rep, dim=1)
        vv = v.repeat_interleave(rep, dim=1)
        gqa_kw = {}

    def make_fn():
        return lambda: F.scaled_dot_product_attention(q, kk, vv, **gqa_kw)

    rec["default_backend"] = default_sdpa_backend(
        q, kk, vv, False, bool(gqa_kw.get("enable_gqa", False)))
    rec.update(summarize(ctx.time_ms(make_fn(), warmup, iters), warmup))
    rec["GBps"] = bytes_kv / (rec["ms"] * 1e-3) / 1e9

    if SDPA_BACKENDS:
        backends = time_forced_backends(ctx, make_fn, warmup, iters)
        rec["backends"] = backends
        cands = {n: t for n, t in backends.items()
                 if not n.endswith("_error") and t is not None}
        cands["default"] = rec["ms"]
        best = min(cands, key=cands.get)
        rec["best_backend"] = best
        rec["best_ms"] = cands[best]
        rec["best_GBps"] = bytes_kv / (cands[best] * 1e-3) / 1e9


def _record_sdpa_times(ctx, rec, times, flops, make_fn, warmup, iters):
    """rec gets the summary of times (ms), TFLOP/s and, with SDPA_BACKENDS, each backend forced."""
    rec.update(summarize(times, warmup))
    rec["TFLOPs"] = flops / (rec["ms"] * 1e-3) / 1e12
    if SDPA_BACKENDS:
        rec["backends_ms"] = time_forced_backends(ctx, make_fn, warmup, iters)


# ---------------------------------------------------------------------------
# 2. sdpa_prefill
# ---------------------------------------------------------------------------
def bench_sdpa_prefill(ctx):
    T = 128 if ctx.smoke else 4096
    B = 1
    dtype = ctx.half
    warmup, iters = ctx.iters(5, 30)
    rec = {"bench": "sdpa_prefill", "dtype": str(dtype).replace("torch.", ""), "T": T,
           "batch": B, "n_heads": N_HEADS, "n_kv_heads": N_KV_HEADS, "head_dim": HEAD_DIM,
           "is_causal": True, "gqa": "native"}
    flops = 4.0 * T * T * N_HEADS * HEAD_DIM / 2 * B
    rec["flops"] = flops
    ctx.run_case(rec, _sdpa_prefill_case, ctx, rec, dtype, B, T, flops, warmup, iters)


def _sdpa_prefill_case(ctx, rec, dtype, B, T, flops, warmup, iters):
    q = torch.randn(B, N_HEADS, T, HEAD_DIM, device=ctx.dev, dtype=dtype)
    k = torch.randn(B, N_KV_HEADS, T, HEAD_DIM, device=ctx.dev, dtype=dtype)
    v = torch.randn(B, N_KV_HEADS, T, HEAD_DIM, device=ctx.dev, dtype=dtype)

    def make_fn():
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    times = None
    if sdpa_kernel is not None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                    fn = make_fn()
                    fn()
                    times = ctx.time_ms(fn, warmup, iters)
            rec["backend"] = "flash"
        except Exception as e:  # noqa: BLE001
            rec["flash_error"] = f"{type(e).__name__}: {e}"[:300]
            ctx.free()
    if times is None:
        rec["backend"] = "default"
        rec["default_backend"] = default_sdpa_backend(q, k, v, True, True)
        times = ctx.time_ms(make_fn(), warmup, iters)
    _record_sdpa_times(ctx, rec, times, flops, make_fn, warmup, iters)


# ---------------------------------------------------------------------------
# 2b. sdpa_dense: LLaDA-8B's bidirectional attention (H = Hkv = 32, Dh 128) at T 1024 / 2048,
#     every SDPA backend forced alone (cuDNN is the one lazyinfer's --attn-impl cudnn calls)
# ---------------------------------------------------------------------------
def bench_sdpa_dense(ctx):
    dtype = ctx.half
    warmup, iters = ctx.iters(5, 30)
    for T in ([64] if ctx.smoke else [1024, 2048]):
        rec = {"bench": "sdpa_dense", "dtype": str(dtype).replace("torch.", ""), "T": T,
               "n_heads": 32, "head_dim": HEAD_DIM, "is_causal": False}
        flops = 4.0 * T * T * 32 * HEAD_DIM
        rec["flops"] = flops
        ctx.run_case(rec, _sdpa_dense_case, ctx, rec, dtype, T, flops, warmup, iters)


def _sdpa_dense_case(ctx, rec, dtype, T, flops, warmup, iters):
    q = torch.randn(1, 32, T, HEAD_DIM, device=ctx.dev, dtype=dtype)
    k = torch.randn(1, 32, T, HEAD_DIM, device=ctx.dev, dtype=dtype)
    v = torch.randn(1, 32, T, HEAD_DIM, device=ctx.dev, dtype=dtype)

    def make_fn():
        return lambda: F.scaled_dot_product_attention(q, k, v)

    times = ctx.time_ms(make_fn(), warmup, iters)
    rec["default_backend"] = default_sdpa_backend(q, k, v, False, False)
    _record_sdpa_times(ctx, rec, times, flops, make_fn, warmup, iters)


# ---------------------------------------------------------------------------
# 3. eager_llama8b
# ---------------------------------------------------------------------------
def _llama_config(ctx):
    """LlamaConfig with Llama-3.1-8B sizes (tiny sizes in the CPU smoke test).

    Handles both config styles: transformers >= 5 (rope_parameters holding
    rope_theta) and 4.x (rope_theta + rope_scaling).
    """
    from transformers import LlamaConfig

    if ctx.smoke:
        sizes = dict(vocab_size=1000, hidden_size=256, intermediate_size=512,
                     num_hidden_layers=2, num_attention_heads=N_HEADS,
                     num_key_value_heads=N_KV_HEADS, head_dim=256 // N_HEADS)
    else:
        sizes = dict(vocab_size=VOCAB, hidden_size=D_MODEL, intermediate_size=D_FF,
                     num_hidden_layers=N_LAYERS, num_attention_heads=N_HEADS,
                     num_key_value_heads=N_KV_HEADS, head_dim=HEAD_DIM)
    special = dict(bos_token_id=1, eos_token_id=2) if ctx.smoke \
        else dict(bos_token_id=128000, eos_token_id=128001)
    common = dict(max_position_embeddings=MAX_POS, rms_norm_eps=1e-5,
                  initializer_range=0.02, tie_word_embeddings=False, **special, **sizes)
    params = inspect.signature(LlamaConfig.__init__).parameters
    if "rope_parameters" in params:
        rope = {"rope_type": "llama3", "rope_theta": ROPE_THETA, **ROPE_LLAMA3}
        cfg = LlamaConfig(rope_parameters=rope, **common)
    else:
        rope = {"rope_type": "llama3", **ROPE_LLAMA3}
        cfg = LlamaConfig(rope_theta=ROPE_THETA, rope_scaling=rope, **common)
    return cfg


def _build_llama(ctx, cfg):
    """Random-weight LlamaForCausalLM created directly on the target device.

    Weights are initialised by transformers' own _init_weights (normal, std =
    initializer_range = 0.02; norms = 1), which on the GPU takes well under a second.
    """
    from transformers import LlamaForCausalLM

    dtype = ctx.half
    with torch.device(ctx.dev):
        try:  # transformers >= 5 spells it dtype=
            model = LlamaForCausalLM._from_config(cfg, dtype=dtype, attn_implementation="sdpa")
        except TypeError:  # 4.x: torch_dtype=
            model = LlamaForCausalLM._from_config(cfg, torch_dtype=dtype,
                                                  attn_implementation="sdpa")
    model = model.to(device=ctx.dev, dtype=dtype).eval()
    return model


def _new_cache(cfg):
    from transformers import DynamicCache
    try:
        return DynamicCache(config=cfg)
    except TypeError:
        return DynamicCache()


def _forward_kwargs(model):
    """Names of the cache and logits-keep arguments of this transformers version."""
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        params = {}
    cache_kw = "cache" if ("cache" in params and "past_key_values" not in params) \
        else "past_key_values"
    if "logits_to_keep" in params:
        keep_kw = "logits_to_keep"
    elif "num_logits_to_keep" in params:
        keep_kw = "num_logits_to_keep"
    else:
        keep_kw = None
    return cache_kw, keep_kw


def bench_eager_llama8b(ctx):
    rec = {"bench": "eager_llama8b", "dtype": str(ctx.half).replace("torch.", ""),
           "attention": "sdpa", "cuda_graphs": False, "compile": False}
    ctx.run_case(rec, _llama8b_phases, ctx, rec, trace=True)


def _llama8b_phases(ctx, rec):
    """Build the model, then (a) and (b), each phase recording its own error; the model is
    dropped when this returns, before run_case frees its memory and emits rec."""
    import transformers
    rec["transformers"] = transformers.__version__
    cfg = _llama_config(ctx)
    t0 = time.perf_counter()
    model = _build_llama(ctx, cfg)
    ctx.sync()
    rec["build_s"] = time.perf_counter() - t0
    rec["attn_implementation"] = getattr(model.config, "_attn_implementation", None)
    rec["n_params"] = sum(p.numel() for p in model.parameters())
    rec["param_bytes"] = sum(p.numel() * p.element_size() for p in model.parameters())
    rec["shape"] = {"layers": cfg.num_hidden_layers, "d_model": cfg.hidden_size,
                    "d_ff": cfg.intermediate_size, "heads": cfg.num_attention_heads,
                    "kv_heads": cfg.num_key_value_heads, "vocab": cfg.vocab_size}
    cache_kw, keep_kw = _forward_kwargs(model)
    rec["cache_kwarg"] = cache_kw
    keep1 = {keep_kw: 1} if keep_kw else {}
    rec["logits_to_keep"] = 1 if keep_kw else None  # None: full logits computed

    gen = torch.Generator(device=ctx.dev).manual_seed(0)
    ctx.run_case(rec, _llama8b_prefill, ctx, rec, model, cfg, keep1, gen,
                 error_key="prefill_error", trace=True, emit=False)
    ctx.run_case(rec, _llama8b_decode, ctx, rec, model, cfg, cache_kw, keep1, gen,
                 error_key="decode_error", trace=True, emit=False)


def _llama8b_prefill(ctx, rec, model, cfg, keep1, gen):
    """(a) long prefill."""
    T = 160 if ctx.smoke else 5 * 4096 + 64
    warmup, iters = (1, 2) if ctx.smoke else ((1, 2) if ctx.quick else (1, 3))
    rec["prefill_tokens"] = T
    ids = torch.randint(0, cfg.vocab_size, (1, T), device=ctx.dev, generator=gen)
    if not ctx.smoke:
        torch.cuda.reset_peak_memory_stats()

    def prefill():
        # A fresh cache each call (use_cache=True builds a DynamicCache); the
        # output, and with it the cache, is dropped right away.
        out = model(input_ids=ids, use_cache=True, **keep1)
        return out.logits

    with torch.inference_mode():
        times = ctx.time_ms(prefill, warmup, iters)
    s = summarize(times, warmup)
    rec.update({"prefill_" + k2: v2 for k2, v2 in s.items()})
    rec["prefill_tok_per_s"] = T / (s["ms"] * 1e-3)
    if not ctx.smoke:
        rec["prefill_max_mem_bytes"] = torch.cuda.max_memory_allocated()


def _llama8b_decode(ctx, rec, model, cfg, cache_kw, keep1, gen):
    """(b) batch-1 decode after a 512-token prefill."""
    P = 16 if ctx.smoke else 512
    n_tok = 4 if ctx.smoke else (8 if ctx.quick else 32)
    rec["decode_prompt_tokens"] = P
    rec["decode_batch"] = 1
    prompt = torch.randint(0, cfg.vocab_size, (1, P), device=ctx.dev, generator=gen)
    if not ctx.smoke:
        torch.cuda.reset_peak_memory_stats()

    def decode_run(n_steps, timed):
        cache = _new_cache(cfg)
        out = model(input_ids=prompt, use_cache=True, **{cache_kw: cache}, **keep1)
        state = {"tok": out.logits[:, -1:].argmax(-1)}

        def step():
            o = model(input_ids=state["tok"], use_cache=True, **{cache_kw: cache})
            state["tok"] = o.logits[:, -1:].argmax(-1)  # greedy, stays on device

        if not timed:
            for _ in range(n_steps):
                step()
            ctx.sync()
            return None, cache
        ctx.sync()
        w0 = time.perf_counter()
        times = ctx.time_ms(step, 0, n_steps)  # warm-up done by the untimed run
        ctx.sync()
        wall = (time.perf_counter() - w0) * 1e3 / n_steps
        return (times, wall), cache

    with torch.inference_mode():
        decode_run(4, timed=False)  # warm-up: prefill + 4 decode steps, thrown away
        (times, wall), cache = decode_run(n_tok, timed=True)
    rec["decode_ctx_end"] = int(cache.get_seq_length())
    rec["decode_warmup"] = "one untimed prefill+4 steps"
    rec["decode_iters"] = len(times)
    rec["decode_ms_per_token_median"] = statistics.median(times)
    rec["decode_ms_per_token_mean"] = statistics.fmean(times)
    rec["decode_ms_per_token_min"] = min(times)
    rec["decode_wall_ms_per_token_mean"] = wall
    rec["decode_tok_per_s"] = 1e3 / rec["decode_ms_per_token_median"]
    if not ctx.smoke:
        rec["decode_max_mem_bytes"] = torch.cuda.max_memory_allocated()


# ---------------------------------------------------------------------------
# eager_llada8b
# ---------------------------------------------------------------------------
class _LLaDA(torch.nn.Module):
    """LLaDA's forward written plainly: pre-norm blocks, bidirectional attention."""

    def __init__(self, L, D, H, Dh, Fd, V, dtype, dev):
        super().__init__()
        g = torch.Generator(device=dev).manual_seed(0)

        def w(*shape):
            return (torch.randn(*shape, device=dev, dtype=torch.float32, generator=g) * 0.02
                    ).to(dtype)
        self.H, self.Dh = H, Dh
        self.emb = w(V, D)
        self.layers = []
        for _ in range(L):
            self.layers.append({
                "attn_norm": torch.ones(D, device=dev, dtype=dtype),
                "wqkv": w(3 * H * Dh, D), "wo": w(D, H * Dh),
                "ff_norm": torch.ones(D, device=dev, dtype=dtype),
                "wgu": w(2 * Fd, D), "wd": w(D, Fd)})
        self.norm = torch.ones(D, device=dev, dtype=dtype)
        self.head = w(V, D)
        inv = 1.0 / (500000.0 ** (torch.arange(0, Dh, 2, device=dev, dtype=torch.float32) / Dh))
        self.inv_freq = inv

    @staticmethod
    def rms(x, w):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype) * w

    def rope(self, x, cos, sin):  # x (1, H, T, Dh), rotate-half convention
        x1, x2 = x[..., : self.Dh // 2], x[..., self.Dh // 2:]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), -1)

    def forward(self, ids):
        T = ids.shape[-1]
        pos = torch.arange(T, device=ids.device, dtype=torch.float32)
        ang = torch.outer(pos, self.inv_freq)
        cos, sin = ang.cos().to(self.emb.dtype), ang.sin().to(self.emb.dtype)
        x = F.embedding(ids, self.emb)  # (1, T, D)
        for ly in self.layers:
            h = self.rms(x, ly["attn_norm"])
            q, k, v = (h @ ly["wqkv"].t()).view(1, T, 3, self.H, self.Dh).permute(2, 0, 3, 1, 4)
            q, k = self.rope(q, cos, sin), self.rope(k, cos, sin)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=False)
            x = x + a.transpose(1, 2).reshape(1, T, -1) @ ly["wo"].t()
            h = self.rms(x, ly["ff_norm"])
            gu = h @ ly["wgu"].t()
            g_, u_ = gu.chunk(2, -1)
            x = x + (F.silu(g_) * u_) @ ly["wd"].t()
        return self.rms(x, self.norm) @ self.head.t()  # (1, T, V): the whole canvas


# eager_llada8b's vocabulary (LLaDA-8B's; the smoke test's tiny one) and the mask id its
# canvases use: the last id, which no prompt may hold (main checks --llada-prompt-ids).
LLADA_VOCAB, LLADA_VOCAB_SMOKE = 126464, 512


def _llada_step(model, x, lo, hi, mask_id, k=1):
    """One vanilla denoising step: logits of the canvas, greedy x0 and confidence in the
    block, commit the k most confident masked positions (low-confidence remasking)."""
    logits = model(x)[0, lo:hi].float()
    p = torch.softmax(logits, -1)
    conf, x0 = p.max(-1)
    masked = x[0, lo:hi] == mask_id
    conf = torch.where(masked, conf, torch.full_like(conf, -1.0))
    j = conf.argmax() if k == 1 else conf.topk(k).indices
    x[0, lo + j] = x0[j]


def _llada_transfer_counts(n, steps):
    """generate.py's get_num_transfer_tokens: n masks over `steps` steps, the first n % steps
    steps one more."""
    return [n // steps + (1 if i < n % steps else 0) for i in range(steps)]


def llada_e2e_args(args, vocab):
    """eager_llada8b's (b) settings from the command line, or None (then (b) is skipped).

    --llada-prompt-ids FILE (`lazyinfer bench dllm --prompt-out`): its prompts' token ids and its
    gen_length / block_length / steps; --llada-prompt, --llada-gen, --llada-block, --llada-steps,
    when given too, must equal the file's (gpu-run.sh passes both: a mismatch is a bug there).
    --llada-prompt N alone: N random ids, gen/block/steps from their flags (default 256/32/256).
    Raises ValueError naming the problem."""
    given = {"gen_length": args.llada_gen, "block_length": args.llada_block,
             "steps": args.llada_steps}
    if args.llada_prompt_ids:
        with open(args.llada_prompt_ids) as f:
            d = json.load(f)
        prompts = [p["ids"] for p in d["prompts"]]
        if not prompts or any(len(p) != q["n_tokens"] for p, q in zip(prompts, d["prompts"])):
            raise ValueError(f"{args.llada_prompt_ids}: no prompts, or n_tokens != len(ids)")
        bad = [t for p in prompts for t in p if not 0 <= t < vocab - 1]
        if bad:
            raise ValueError(f"{args.llada_prompt_ids}: token id {bad[0]} outside [0, {vocab - 1}) "
                             f"(the model's vocabulary without its mask id {vocab - 1})")
        if args.llada_prompt is not None and any(len(p) != args.llada_prompt for p in prompts):
            raise ValueError(f"--llada-prompt {args.llada_prompt} but {args.llada_prompt_ids} "
                             f"holds prompts of {[len(p) for p in prompts]} tokens")
        e2e = {k: d[k] for k in given}
        for k, v in given.items():
            if v is not None and v != e2e[k]:
                raise ValueError(f"--llada-{k.split('_')[0]} {v} but {args.llada_prompt_ids} "
                                 f"says {k} {e2e[k]}")
        e2e.update(prompts=prompts, source=args.llada_prompt_ids)
    elif args.llada_prompt is not None:
        if args.llada_prompt < 1:
            raise ValueError(f"--llada-prompt {args.llada_prompt} must be >= 1")
        e2e = {k: 256 if k == "gen_length" else 32 if k == "block_length" else 256
               for k in given}
        e2e.update({k: v for k, v in given.items() if v is not None})
        e2e.update(prompts=[args.llada_prompt], source="random")
    else:
        return None
    G, B, S = e2e["gen_length"], e2e["block_length"], e2e["steps"]
    if min(G, B, S) < 1 or G % B or S % (G // B):
        raise ValueError(f"gen {G}, block {B}, steps {S}: gen must be a multiple of block and "
                         f"steps a multiple of gen / block")
    return e2e


def bench_eager_llada8b(ctx):
    rec = {"bench": "eager_llada8b", "dtype": str(ctx.half).replace("torch.", ""),
           "attention": "sdpa (bidirectional)", "cuda_graphs": False, "compile": False}
    if ctx.smoke:
        L, D, H, Dh, Fd, V, sizes = 2, 64, 4, 16, 128, LLADA_VOCAB_SMOKE, [64]
    else:
        L, D, H, Dh, Fd, V, sizes = 32, 4096, 32, 128, 12288, LLADA_VOCAB, [512, 1024, 2048]
    e2e = ctx.llada
    rec["shape"] = {"layers": L, "d_model": D, "heads": H, "head_dim": Dh, "d_ff": Fd,
                    "vocab": V}

    def case():
        t0 = time.perf_counter()
        model = _LLaDA(L, D, H, Dh, Fd, V, ctx.half, ctx.dev)
        ctx.sync()
        rec["build_s"] = time.perf_counter() - t0
        mask_id = V - 1
        gen_ = torch.Generator(device=ctx.dev).manual_seed(1)
        warmup, iters = ctx.iters(2, 10)
        rec["step_ms"] = {}
        with torch.inference_mode():
            for N in sizes:
                x = torch.randint(0, V - 2, (1, N), device=ctx.dev, generator=gen_)
                x[0, N - 32:] = mask_id
                times = ctx.time_ms(lambda: _llada_step(model, x.clone(), N - 32, N, mask_id),
                                    warmup, iters)
                rec["step_ms"][str(N)] = summarize(times, warmup)
                log(f"eager_llada8b: step at canvas {N}: {rec['step_ms'][str(N)]['ms']:.2f} ms")
            if e2e is None:
                rec["e2e"] = {"skipped": "no --llada-prompt-ids FILE or --llada-prompt N: "
                                         "no prompt to decode"}
                return
            # (b) vanilla SAR decoding of each prompt (generate.py's schedule)
            gen, block = e2e["gen_length"], e2e["block_length"]
            counts = _llada_transfer_counts(block, e2e["steps"] // (gen // block))
            lat, steps, lens = 0.0, 0, []
            for p in e2e["prompts"]:
                if isinstance(p, int):  # --llada-prompt N alone: N random ids
                    ids = torch.randint(0, V - 2, (p,), device=ctx.dev, generator=gen_)
                else:
                    ids = torch.tensor(p, dtype=torch.long, device=ctx.dev)
                P = ids.numel()
                lens.append(P)
                x = torch.full((1, P + gen), mask_id, dtype=torch.long, device=ctx.dev)
                x[0, :P] = ids
                ctx.sync()
                t0 = time.perf_counter()
                for b in range(gen // block):
                    lo, hi = P + b * block, P + (b + 1) * block
                    for k in counts:
                        _llada_step(model, x, lo, hi, mask_id, k)
                        steps += 1
                ctx.sync()
                lat += (time.perf_counter() - t0) * 1e3
        n = len(lens)
        rec["e2e"] = {"prompt_tokens": lens[0] if n == 1 else lens, "prompt_ids": e2e["source"],
                      "n_prompts": n, "gen_length": gen, "block_length": block,
                      "steps": steps // n, "latency_ms": lat / n,
                      "tok_per_s": n * gen / (lat * 1e-3), "ms_per_step": lat / steps}

    ctx.run_case(rec, case, trace=True)


# ---------------------------------------------------------------------------
# 4. copy_bw
# ---------------------------------------------------------------------------
def bench_copy_bw(ctx):
    nbytes = (4 << 20) if ctx.smoke else (4 << 30)
    warmup, iters = ctx.iters(3, 20)
    rec = {"bench": "copy_bw", "buffer_bytes": nbytes, "bytes_moved": 2 * nbytes,
           "op": "dst.copy_(src), uint8, contiguous"}

    def case():
        src = torch.empty(nbytes, dtype=torch.uint8, device=ctx.dev).fill_(1)
        dst = torch.empty_like(src)
        rec.update(summarize(ctx.time_ms(lambda: dst.copy_(src), warmup, iters), warmup))
        rec["GBps"] = 2 * nbytes / (rec["ms"] * 1e-3) / 1e9
        rec["GBps_best"] = 2 * nbytes / (rec["ms_min"] * 1e-3) / 1e9

    ctx.run_case(rec, case)


# ---------------------------------------------------------------------------
# 5. gemm_bf16
# ---------------------------------------------------------------------------
def bench_gemm_bf16(ctx):
    n = 256 if ctx.smoke else 8192
    dtype = ctx.half
    warmup, iters = ctx.iters(5, 30)
    flops = 2.0 * n * n * n
    rec = {"bench": "gemm_bf16", "dtype": str(dtype).replace("torch.", ""),
           "M": n, "N": n, "K": n, "flops": flops, "op": "torch.matmul(a, b, out=c)"}

    def case():
        a = torch.randn(n, n, device=ctx.dev, dtype=dtype)
        b = torch.randn(n, n, device=ctx.dev, dtype=dtype)
        c = torch.empty(n, n, device=ctx.dev, dtype=dtype)
        rec.update(summarize(ctx.time_ms(lambda: torch.matmul(a, b, out=c), warmup, iters),
                             warmup))
        rec["TFLOPs"] = flops / (rec["ms"] * 1e-3) / 1e12
        rec["TFLOPs_best"] = flops / (rec["ms_min"] * 1e-3) / 1e12

    ctx.run_case(rec, case)


# ---------------------------------------------------------------------------
# gemm_fp8: LLaDA-8B's FFN GEMMs in block-scaled FP8 (1x128 activation, 128x128 weight scales)
#   through cuBLASLt as torch._scaled_mm calls it, against bf16 torch.matmul of the same shape
# ---------------------------------------------------------------------------
def _scaled_mm_blockwise(a8, b8t, sa, sb, out_dtype):
    """torch._scaled_mm with 1x128 / 128x128 scales; tries the scale layouts torch versions want.

    a8 (M, K) e4m3 row-major, b8t (K, N) e4m3 column-major (a (N, K) tensor transposed),
    sa (M, K/128), sb (K/128, N/128) fp32. Returns (fn, layout name).
    """
    tries = [
        ("sa outer-major, sb outer-major", sa.t().contiguous().t(), sb.t().contiguous().t()),
        ("sa outer-major, sb row-major", sa.t().contiguous().t(), sb.contiguous()),
        ("sa row-major, sb row-major", sa.contiguous(), sb.contiguous()),
    ]
    errors = []
    for name, x, y in tries:
        def fn(x=x, y=y):
            return torch._scaled_mm(a8, b8t, scale_a=x, scale_b=y, out_dtype=out_dtype)
        try:
            fn()
            torch.cuda.synchronize()
            return fn, name
        except Exception as e:  # noqa: BLE001 - a refused layout: try the next one
            errors.append(f"{name}: {type(e).__name__}: {e}"[:200])
    raise RuntimeError(" | ".join(errors))


def bench_gemm_fp8(ctx):
    warmup, iters = ctx.iters(5, 30)
    shapes = [(12288, 4096), (4096, 12288)]  # (N, K): gate / up, then down
    Ms = [128] if ctx.smoke else [256, 1024, 2048, 4096]
    for N, K in ([(256, 256)] if ctx.smoke else shapes):
        for M in Ms:
            rec = {"bench": "gemm_fp8", "M": M, "N": N, "K": K,
                   "scales": "1x128 activations, 128x128 weights"}
            ctx.run_case(rec, _gemm_fp8_case, ctx, rec, M, N, K, warmup, iters)


def _gemm_fp8_case(ctx, rec, M, N, K, warmup, iters):
    flops = 2.0 * M * N * K
    a = torch.randn(M, K, device=ctx.dev, dtype=torch.bfloat16)
    w = torch.randn(N, K, device=ctx.dev, dtype=torch.bfloat16) * 0.02
    c = torch.empty(M, N, device=ctx.dev, dtype=torch.bfloat16)
    rec["bf16_ms"] = statistics.median(
        ctx.time_ms(lambda: torch.matmul(a, w.t(), out=c), warmup, iters))
    a8 = a.to(torch.float8_e4m3fn)
    w8 = w.to(torch.float8_e4m3fn)
    sa = torch.rand(M, K // 128, device=ctx.dev, dtype=torch.float32) + 0.5
    sb = torch.rand(K // 128, N // 128, device=ctx.dev, dtype=torch.float32) + 0.5
    for out_dtype in (torch.bfloat16, torch.float32):
        key = "fp8_" + str(out_dtype).replace("torch.", "") + "_out"
        try:
            fn, layout = _scaled_mm_blockwise(a8, w8.t(), sa, sb, out_dtype)
            rec[key + "_ms"] = statistics.median(ctx.time_ms(fn, warmup, iters))
            rec[key + "_speedup"] = rec["bf16_ms"] / rec[key + "_ms"]
            rec["layout"] = layout
        except Exception as e:  # noqa: BLE001
            rec[key + "_error"] = f"{type(e).__name__}: {e}"[:400]
    rec["bf16_TFLOPs"] = flops / (rec["bf16_ms"] * 1e-3) / 1e12


BENCHES = {
    "gemm_fp8": bench_gemm_fp8,
    "sdpa_decode": bench_sdpa_decode,
    "sdpa_prefill": bench_sdpa_prefill,
    "eager_llama8b": bench_eager_llama8b,
    "sdpa_dense": bench_sdpa_dense,
    "copy_bw": bench_copy_bw,
    "gemm_bf16": bench_gemm_bf16,
    "eager_llada8b": bench_eager_llada8b,
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=None, help="append JSON lines to this file too")
    ap.add_argument("--only", default=None,
                    help="comma-separated bench names: " + ",".join(BENCH_NAMES + EXTRA_BENCHES))
    ap.add_argument("--llada-prompt-ids", default=None, metavar="FILE",
                    help="eager_llada8b: decode these prompts (`lazyinfer bench dllm "
                         "--prompt-out FILE`), with their gen length, block and steps")
    ap.add_argument("--llada-prompt", type=int, default=None, metavar="N",
                    help="eager_llada8b: prompt tokens; with --llada-prompt-ids it must equal "
                         "the file's, alone N random ids (no default: without either the "
                         "decoding run is skipped)")
    ap.add_argument("--llada-gen", type=int, default=None,
                    help="eager_llada8b: gen length (must equal the file's; alone default 256)")
    ap.add_argument("--llada-block", type=int, default=None,
                    help="eager_llada8b: block length (must equal the file's; alone default 32)")
    ap.add_argument("--llada-steps", type=int, default=None,
                    help="eager_llada8b: steps (must equal the file's; alone default 256)")
    ap.add_argument("--quick", action="store_true", help="fewer iterations")
    ap.add_argument("--cpu-smoke", action="store_true",
                    help="tiny shapes on CPU (float32, perf_counter) to check the script runs")
    args = ap.parse_args()

    names = BENCH_NAMES
    if args.only:
        names = [s.strip() for s in args.only.split(",") if s.strip()]
        bad = [s for s in names if s not in BENCHES]
        if bad:
            ap.error(f"unknown bench(es) {bad}; choose from {BENCH_NAMES + EXTRA_BENCHES}")

    try:
        args.llada = llada_e2e_args(args, LLADA_VOCAB_SMOKE if args.cpu_smoke else LLADA_VOCAB)
    except (OSError, ValueError, KeyError, TypeError) as e:
        ap.error(f"eager_llada8b: {type(e).__name__}: {e}")
    ctx = Ctx(args)
    torch.manual_seed(0)
    t_all = time.perf_counter()
    for name in names:
        t0 = time.perf_counter()
        log(f"{name} ...")
        rec = {"bench": name}  # emitted only if the bench itself raises
        if not ctx.run_case(rec, BENCHES[name], ctx, trace=True, emit=False):
            ctx.emit(rec)
        log(f"{name} done in {time.perf_counter() - t0:.1f} s")
    log(f"all done in {time.perf_counter() - t_all:.1f} s")


if __name__ == "__main__":
    main()
