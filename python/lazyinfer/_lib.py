"""_lib.py — finds and loads liblazyinfer.so and declares the C API of include/lazyinfer.h for
ctypes: the structs field by field in the header's order, and every function's argument and
result types. Nothing here is engine logic (that is all in the C library); engine.py wraps it.

How the library is found (first that exists wins):
  1. the environment variable LAZYINFER_LIB (a path to a liblazyinfer.so);
  2. the build of the repository this package lives in, when imported from a checkout
     (<repo>/build/release/liblazyinfer.so; build/release-cuda/ for backend "cuda");
  3. the copy bundled into the installed package by `pip install ./python` (setup.py);
  4. `make lib` (or `make CUDA=1 lib`) run in that checkout, when its sources are there.

ctypes.CDLL releases the GIL around every foreign call; the callbacks (CFUNCTYPE) take it
back for the time they run Python. Tested by tests/test_python.py.
"""
from __future__ import annotations

import ctypes
import os
import subprocess
import threading
from ctypes import (CFUNCTYPE, POINTER, Structure, c_bool, c_char, c_char_p, c_double, c_float,
                    c_int, c_int32, c_int64, c_size_t, c_uint, c_uint64, c_void_p)
from pathlib import Path
from typing import Dict, List, Optional

# ---- structs (include/lazyinfer.h, same order) -----------------------------------------------


class ModelParams(Structure):
    _fields_ = [
        ("path", c_char_p), ("tokenizer_path", c_char_p), ("chat_template", c_char_p),
        ("backend", c_char_p), ("n_threads", c_int), ("device", c_int), ("n_ctx", c_int),
        ("page_size", c_int), ("max_seqs", c_int), ("cache_mode", c_char_p),
        ("kv_budget_bytes", c_int64), ("kv_dtype", c_char_p), ("attn_impl", c_char_p),
        ("metadata_only", c_bool), ("doc_evict", c_char_p), ("host_cache_bytes", c_int64),
        ("disk_cache_dir", c_char_p), ("disk_budget_bytes", c_int64), ("kv_remote", c_char_p),
        ("kv_remote_password_file", c_char_p), ("fp8", c_char_p),
    ]


class ModelInfo(Structure):
    _fields_ = [
        ("arch", c_char * 32), ("name", c_char * 128), ("weight_dtype", c_char * 16),
        ("compute_dtype", c_char * 16), ("kv_dtype", c_char * 16), ("kv_token_bytes", c_int64),
        ("n_ctx", c_int), ("n_layer", c_int), ("n_embd", c_int), ("n_ff", c_int),
        ("n_head", c_int), ("n_head_kv", c_int), ("head_dim", c_int), ("n_vocab", c_int),
        ("n_ctx_train", c_int), ("rope_theta", c_float), ("rms_eps", c_float),
        ("rope_scaling", c_char * 16), ("tied_embeddings", c_bool), ("n_params", c_int64),
        ("n_vocab_text", c_int), ("cache_mode", c_char * 16), ("n_threads", c_int),
        ("diffusion", c_bool), ("metadata_only", c_bool), ("bd_size", c_int),
    ]


class ChatMessage(Structure):
    _fields_ = [("role", c_char_p), ("content", c_char_p)]


class SamplingParams(Structure):
    _fields_ = [("temperature", c_float), ("top_k", c_int), ("top_p", c_float),
                ("min_p", c_float), ("seed", c_uint64)]


TOKEN_CB = CFUNCTYPE(c_bool, c_void_p, c_int32)
LOGITS_CB = CFUNCTYPE(None, c_void_p, POINTER(c_float), c_int)


class GenerateParams(Structure):
    _fields_ = [("n_predict", c_int), ("sampling", SamplingParams), ("stop_at_eos", c_bool),
                ("on_token", TOKEN_CB), ("on_logits", LOGITS_CB), ("user", c_void_p)]


class GenerateStats(Structure):
    _fields_ = [("n_prompt", c_int), ("n_generated", c_int), ("prompt_ms", c_double),
                ("generate_ms", c_double)]


class Doc(Structure):
    _fields_ = [("text", c_char_p), ("len", c_size_t), ("ids", POINTER(c_int32)),
                ("n_ids", c_int), ("id", c_char_p)]


class Repair(Structure):
    _fields_ = [("mode", c_int), ("head_k", c_int), ("blend_r", c_float)]


class Request(Structure):
    _fields_ = [("system", c_char_p), ("docs", POINTER(Doc)), ("n_docs", c_int),
                ("query", c_char_p), ("prompt_ids", POINTER(c_int32)), ("n_prompt_ids", c_int),
                ("chat", c_bool), ("gen", GenerateParams), ("first_logits", POINTER(c_float)),
                ("tokens", c_void_p), ("repair", Repair)]


class RequestResult(Structure):
    _fields_ = [("status", c_int), ("error", c_char * 256), ("cancelled", c_bool),
                ("n_prompt", c_int), ("n_doc_tokens", c_int), ("n_cached_tokens", c_int),
                ("doc_hits", c_int), ("doc_misses", c_int), ("n_repair_tokens", c_int),
                ("n_generated", c_int), ("queue_ms", c_double), ("ttft_ms", c_double),
                ("total_ms", c_double)]


class CacheTierStats(Structure):
    _fields_ = [("enabled", c_bool), ("hits", c_int64), ("misses", c_int64),
                ("bytes_in", c_int64), ("bytes_out", c_int64), ("promotions", c_int64),
                ("promote_ms", c_double), ("resident_bytes", c_int64),
                ("resident_entries", c_int64), ("evictions", c_int64), ("dropped", c_int64),
                ("errors", c_int64)]


class CacheStats(Structure):
    _fields_ = [("doc_lookups", c_int64), ("doc_hits", c_int64), ("doc_misses", c_int64),
                ("doc_hit_tokens", c_int64), ("doc_miss_tokens", c_int64),
                ("copies_made", c_int64), ("evictions", c_int64), ("resident_docs", c_int64),
                ("resident_copies", c_int64), ("resident_bytes", c_int64),
                ("copy_baseline_bytes", c_int64), ("prefix_lookup_tokens", c_int64),
                ("prefix_hit_tokens", c_int64), ("kv_pages_total", c_int64),
                ("kv_pages_free", c_int64), ("kv_page_bytes", c_int64),
                ("tiers", CacheTierStats * 3)]


DLLM_TRACE_CB = CFUNCTYPE(None, c_void_p, c_void_p)


class DllmParams(Structure):
    _fields_ = [
        ("gen_length", c_int), ("block_length", c_int), ("sub_block_length", c_int),
        ("steps", c_int), ("remasking", c_int), ("confidence", c_int), ("temperature", c_double), ("cfg", c_double),
        ("threshold", c_double), ("factor", c_double), ("commit_per_step", c_int),
        ("dpad", c_bool), ("dpad_window", c_int), ("dpad_k_sigma", c_double),
        ("dpad_scale", c_double), ("early_stop", c_bool), ("logits_eos_inf", c_bool),
        ("confidence_eos_eot_inf", c_bool), ("lacache", c_uint), ("fp8", c_bool),
        ("fa_tile", c_int), ("seed", c_uint64), ("on_step", DLLM_TRACE_CB), ("user", c_void_p),
        ("canvas_out", POINTER(c_int32)),
    ]


class DllmStats(Structure):
    _fields_ = [
        ("n_prompt", c_int), ("gen_length", c_int), ("steps", c_int), ("nfe", c_int),
        ("early_stopped", c_bool), ("n_tokens_fastdllm", c_int), ("n_tokens_dinfer", c_int),
        ("tps_fastdllm", c_double), ("tps_dinfer", c_double), ("latency_ms", c_double),
        ("ms_per_step", c_double), ("embed_rows", c_int64), ("qkv_rows", c_int64),
        ("fa_tiles", c_int64), ("fa_tiles_skipped", c_int64), ("head_rows", c_int64),
        ("fp8_gemm_rows", c_int64), ("canvas_rows", c_int64), ("flops", c_double),
        ("backend_allocs", c_int64),
    ]


STATUS_NAMES = ["LI_OK", "LI_ERR_INVALID_ARG", "LI_ERR_IO", "LI_ERR_FORMAT",
                "LI_ERR_UNSUPPORTED", "LI_ERR_OOM", "LI_ERR_KV_FULL", "LI_ERR_LIMIT",
                "LI_ERR_BACKEND", "LI_ERR_NOT_FOUND"]
LI_ERR_INVALID_ARG = 1

_P = POINTER
_I32P = POINTER(c_int32)
_MODEL = c_void_p
# name: (result type, argument types)
_PROTOTYPES = {
    "li_status_str": (c_char_p, [c_int]),
    "li_last_error": (c_char_p, []),
    "li_model_default_params": (ModelParams, []),
    "li_model_load": (c_int, [_P(c_void_p), _P(ModelParams)]),
    "li_model_free": (None, [_MODEL]),
    "li_model_get_info": (None, [_MODEL, _P(ModelInfo)]),
    "li_tokenize": (c_int, [_MODEL, c_char_p, c_size_t, c_bool, c_bool, _P(_I32P), _P(c_int)]),
    "li_free_tokens": (None, [_I32P]),
    "li_token_to_piece": (c_int, [_MODEL, c_int32, c_char_p, c_size_t, _P(c_size_t)]),
    "li_token_eos": (c_int32, [_MODEL]),
    "li_chat_render": (c_int, [_MODEL, c_char_p, c_char_p, _P(c_void_p)]),
    "li_chat_tokenize_messages": (c_int, [_MODEL, _P(ChatMessage), c_int, c_bool, _P(_I32P),
                                          _P(c_int)]),
    "li_sampling_default_params": (SamplingParams, []),
    "li_generate_default_params": (GenerateParams, []),
    "li_generate": (c_int, [_MODEL, _I32P, c_int, _P(GenerateParams), _P(GenerateStats)]),
    "li_eval_logits": (c_int, [_MODEL, _I32P, c_int, _P(c_float)]),
    "li_cache_mode_parse": (c_int, [c_char_p, _P(c_int)]),
    "li_repair_parse": (c_int, [c_char_p, _P(Repair)]),
    "li_submit": (c_int, [_MODEL, _P(Request), _P(c_int64)]),
    "li_step": (c_int, [_MODEL, _P(c_int)]),
    "li_run": (c_int, [_MODEL]),
    "li_cancel": (c_int, [_MODEL, c_int64]),
    "li_result": (c_int, [_MODEL, c_int64, _P(RequestResult)]),
    "li_get_cache_stats": (None, [_MODEL, _P(CacheStats)]),
    "li_dllm_default_params": (DllmParams, []),
    "li_dllm_check_params": (c_int, [_P(DllmParams)]),
    "li_dllm_generate": (c_int, [_MODEL, _I32P, c_int, _P(DllmParams), _I32P, _P(DllmStats)]),
    "li_dllm_special_tokens": (c_int, [_MODEL, _P(c_int32), _P(c_int32), _P(c_int32)]),
    "li_dllm_detokenize": (c_int, [_MODEL, _I32P, c_int, _P(c_void_p)]),
}

# ---- finding and loading the library -----------------------------------------------------------

_PKG_DIR = Path(__file__).resolve().parent
_loaded: Dict[str, ctypes.CDLL] = {}
_load_lock = threading.Lock()


def source_tree() -> Optional[Path]:
    """The lazyinfer checkout this package sits in (python/lazyinfer/ under it), or None."""
    root = _PKG_DIR.parent.parent
    if (root / "Makefile").is_file() and (root / "include" / "lazyinfer.h").is_file():
        return root
    return None


def _build_dir(cuda: bool) -> str:
    return "build/release-cuda" if cuda else "build/release"


def candidates(cuda: bool = False) -> List[Path]:
    """Where the library is looked for, in order (without running make)."""
    out: List[Path] = []
    env = os.environ.get("LAZYINFER_LIB")
    if env:
        return [Path(env)]
    root = source_tree()
    if root is not None:
        out.append(root / _build_dir(cuda) / "liblazyinfer.so")
    out.append(_PKG_DIR / ("liblazyinfer-cuda.so" if cuda else "liblazyinfer.so"))
    return out


def find(cuda: bool = False) -> Path:
    """The path of liblazyinfer.so (see the module's docstring); runs `make lib` in the source
    tree as a last resort. Raises OSError saying what was tried."""
    tried = candidates(cuda)
    for p in tried:
        if p.is_file():
            return p
    root = source_tree()
    if root is not None and not os.environ.get("LAZYINFER_LIB"):
        cmd = ["make", "-C", str(root), "--no-print-directory"] + (["CUDA=1"] if cuda else []) \
            + ["lib"]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        built = root / _build_dir(cuda) / "liblazyinfer.so"
        if r.returncode == 0 and built.is_file():
            return built
        raise OSError(f"lazyinfer: `{' '.join(cmd)}` failed:\n{r.stdout[-2000:]}")
    raise OSError("lazyinfer: no liblazyinfer.so found (tried "
                  + ", ".join(str(p) for p in tried)
                  + "); build it with `make lib` in the repository and set LAZYINFER_LIB to its "
                    "path, or reinstall with `pip install ./python` from a built checkout")


def load(cuda: bool = False) -> ctypes.CDLL:
    """The loaded library with every prototype declared (loaded once per path)."""
    path = str(find(cuda))
    with _load_lock:
        lib = _loaded.get(path)
        if lib is None:
            lib = ctypes.CDLL(path)  # CDLL, not PyDLL: the GIL is released during calls
            for name, (res, args) in _PROTOTYPES.items():
                f = getattr(lib, name)
                f.restype = res
                f.argtypes = args
            lib.li_path = path  # type: ignore[attr-defined]
            _loaded[path] = lib
        return lib
