"""engine.py — the Python face of lazyinfer: `Engine` over one loaded model (li_model), with
generate (text or a stream of pieces), tokenize / detokenize, the last position's logits, RAG
requests over the document cache, and diffusion decoding (li_dllm_*).

It is a thin layer: prompts are tokenised, requests submitted and decoded by the C library
(include/lazyinfer.h); what lives here is argument checking, the text rules the CLI also applies
(documents trimmed and ended by a blank line, stop strings, an answer cut by max_tokens ending on
a whole character) and turning C failures into exceptions that carry li_last_error().
Not here: any engine logic. Tested by tests/test_python.py against the CLI's output.
"""
from __future__ import annotations

import codecs
import ctypes
import threading
from ctypes import byref, c_char_p, c_float, c_int, c_int32, c_int64, c_size_t, c_void_p
from dataclasses import dataclass
from typing import (Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple,
                    Union)

from . import _lib

Message = Mapping[str, str]
Document = Union[str, Tuple[str, str], Mapping[str, str]]

_LACACHE_BITS = {"embed": 1, "rope": 2, "fa": 4, "trunc": 8}


class LazyInferError(RuntimeError):
    """A failure reported by the C library: `status` is the li_status name (e.g.
    "LI_ERR_FORMAT"), `message` li_last_error()'s text."""

    def __init__(self, status: int, message: str, what: str = "") -> None:
        self.status = _lib.STATUS_NAMES[status] if 0 <= status < len(_lib.STATUS_NAMES) \
            else str(status)
        self.message = message
        super().__init__(f"{what}: {message}" if what else message)


class InvalidArgumentError(LazyInferError, ValueError):
    """LI_ERR_INVALID_ARG: a parameter out of range or malformed (also a ValueError)."""


def _error(status: int, message: str, what: str = "") -> LazyInferError:
    cls = InvalidArgumentError if status == _lib.LI_ERR_INVALID_ARG else LazyInferError
    return cls(status, message, what)


@dataclass
class RagResult:
    """One RAG request's answer and figures (li_request_result)."""
    answer: str
    finish_reason: str      # "stop" (EOS or a stop string) or "length" (max_tokens)
    prompt_tokens: int      # all blocks + query
    cached_tokens: int      # prompt tokens served from a cache, not recomputed
    computed_tokens: int    # prompt_tokens - cached_tokens
    generated_tokens: int
    doc_tokens: int         # tokens in the system and document blocks
    doc_hits: int           # blocks (system block included) found in the cache
    doc_misses: int
    repair_tokens: int      # document tokens recomputed in context (repair), counted as computed
    ttft_ms: float          # submit → first token
    total_ms: float         # submit → finished
    queue_ms: float         # submit → admitted


@dataclass
class DllmResult:
    """A diffusion decode: the text (up to the first EOS/EOT, special tokens left out), the
    generated part of the canvas as token ids, and li_dllm_stats' figures."""
    text: str
    tokens: List[int]
    steps: int
    nfe: int
    early_stopped: bool
    latency_ms: float
    ms_per_step: float
    tps_fastdllm: float
    tps_dinfer: float


def _utf8_complete_prefix(b: bytes) -> int:
    """Largest n <= len(b) such that b[:n] does not end inside a UTF-8 sequence that later bytes
    could complete (li_api_utf8_complete_prefix)."""
    n = len(b)
    for back in range(1, min(4, n) + 1):
        c = b[n - back]
        if c & 0xC0 != 0x80:  # a lead byte (or ASCII)
            need = 2 if c & 0xE0 == 0xC0 else 3 if c & 0xF0 == 0xE0 else \
                4 if c & 0xF8 == 0xF0 else 1
            return n - back if need > back else n
    return n


def _stop_find(text: bytes, old: int, stops: Sequence[bytes]) -> int:
    """Offset of the earliest match of a stop string that ends past `old` (text[:old] was
    searched before); -1 when none (li_api_stop_find)."""
    best = -1
    for s in stops:
        i = text.find(s, max(0, old - len(s) + 1))
        if i >= 0 and (best < 0 or i < best):
            best = i
    return best


def _bytes(s: Optional[str], what: str) -> Optional[bytes]:
    if s is None:
        return None
    if not isinstance(s, str):
        raise TypeError(f"{what} must be a str, not {type(s).__name__}")
    b = s.encode("utf-8")
    if b"\0" in b:
        raise ValueError(f"{what} contains a NUL character")
    return b


def _size(v: Union[int, str, None], what: str) -> int:
    """Bytes from an int or a "64M" / "2G" / "512K" string (binary multiples); None → 0."""
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise TypeError(f"{what} must be bytes as an int or a string like '64M'")
    if isinstance(v, int):
        n = v
    else:
        s = v.strip().upper().removesuffix("B").removesuffix("I")
        mul = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
        try:
            n = int(float(s[:-1] if mul > 1 else s) * mul)
        except ValueError:
            raise ValueError(f"{what} {v!r}: expected bytes with an optional K/M/G suffix") \
                from None
    if n < 0:
        raise ValueError(f"{what} must not be negative (got {v!r})")
    return n


def _documents(docs: Iterable[Document]) -> List[Tuple[Optional[bytes], bytes]]:
    """(id, text) pairs as the engine sees them: CRLF read as LF, trailing whitespace trimmed and
    one blank line appended (the CLI's rule, docs/RAG.md); an empty document is an error."""
    out: List[Tuple[Optional[bytes], bytes]] = []
    if isinstance(docs, (str, bytes)):
        raise TypeError("documents must be a list of texts, (id, text) pairs or "
                        "{'id', 'text'} dicts, not one string")
    for k, d in enumerate(docs):
        if isinstance(d, str):
            did, text = None, d
        elif isinstance(d, tuple) and len(d) == 2:
            did, text = d
        elif isinstance(d, Mapping) and "text" in d:
            did, text = d.get("id"), d["text"]
        else:
            raise TypeError(f"document {k}: expected a text, an (id, text) pair or a dict with "
                            f"'text', not {type(d).__name__}")
        b = _bytes(text, f"document {k}")
        assert b is not None
        b = b.replace(b"\r\n", b"\n").rstrip(b" \n\t\r")
        if not b:
            raise ValueError(f"document {k} is empty")
        out.append((_bytes(str(did), f"document {k}'s id") if did is not None else None,
                    b + b"\n\n"))
    return out


class _Collector:
    """The on_token callback of one request: appends each token's bytes, cuts the text before
    the first stop string and ends the request there (returns false). An exception raised in
    the callback is kept for the caller to raise after the C call (ctypes would only print it)."""

    def __init__(self, engine: "Engine", stops: Sequence[bytes]) -> None:
        self.engine, self.stops = engine, stops
        self.out = bytearray()
        self.stopped = False
        self.err: List[BaseException] = []
        self.cb = _lib.TOKEN_CB(self.on_token)  # kept alive as long as the request may call it

    def on_token(self, _user: object, tok: int) -> bool:
        try:
            old = len(self.out)
            self.out.extend(self.engine._piece(tok))
            cut = _stop_find(bytes(self.out), old, self.stops) if self.stops else -1
            if cut >= 0:
                del self.out[cut:]
                self.stopped = True
                return False
            return True
        except BaseException as e:
            self.err.append(e)
            return False

    def raise_error(self) -> None:
        if self.err:
            raise self.err[0]


def _stop_bytes(stop: Union[str, Sequence[str], None]) -> List[bytes]:
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    out = [_bytes(s, "stop") or b"" for s in stops]
    if any(not s for s in out):
        raise ValueError("a stop string must not be empty")
    return out


class Engine:
    """One loaded model and its KV pool (li_model_load); every method runs on it.

    Engine(model, backend="cpu", cache="lazy", budget=None, ...) maps to li_model_params:
      model          HF directory, .gguf file or "synth:NAME[:SEED]" (path)
      backend        "cpu", "cpu-ref" or "cuda" (the library of `make CUDA=1`)
      cache          document cache: "lazy", "copy", "prefix", "none", "full" (cache_mode)
      budget         KV pool bytes, an int or "64M" / "2G" (kv_budget_bytes; None: default)
      attn_impl      "auto", "cudnn", "native" (cuda only)
      kv_dtype       "f32", "bf16", "auto"
      fp8            FP8 prefill of autoregressive models: "off", "ffn", "all"
      n_ctx, threads, device, page_size, max_seqs, tokenizer, chat_template, evict ("lru" or
      "gdsf"), host_cache, disk_cache + disk_budget, kv_remote, kv_remote_password_file:
      as the CLI's flags of the same names.

    Use it as a context manager or call close(). One thread at a time runs an engine (a lock
    serialises calls); the GIL is released while the C library works, so two engines in two
    threads run in parallel.
    """

    def __init__(self, model: str, *, backend: str = "cpu", cache: str = "lazy",
                 budget: Union[int, str, None] = None, attn_impl: Optional[str] = None,
                 kv_dtype: Optional[str] = None, fp8: Optional[str] = None, n_ctx: int = 0,
                 threads: int = 0, device: int = 0, page_size: int = 0, max_seqs: int = 0,
                 tokenizer: Optional[str] = None, chat_template: Optional[str] = None,
                 evict: Optional[str] = None, host_cache: Union[int, str, None] = None,
                 disk_cache: Optional[str] = None, disk_budget: Union[int, str, None] = None,
                 kv_remote: Optional[str] = None,
                 kv_remote_password_file: Optional[str] = None) -> None:
        self._m = c_void_p()
        self._lock = threading.Lock()
        self._streaming = False
        self._pieces: Dict[int, bytes] = {}
        for name, v in (("n_ctx", n_ctx), ("threads", threads), ("device", device),
                        ("page_size", page_size), ("max_seqs", max_seqs)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"{name} must be an int >= 0 (got {v!r})")
        if fp8 is not None and fp8 not in ("off", "ffn", "all"):
            raise ValueError(f"fp8 {fp8!r}: expected 'off', 'ffn' or 'all'")
        self._lib = _lib.load(cuda=backend == "cuda")
        p = self._lib.li_model_default_params()
        # the byte strings must outlive li_model_load: keep them on the instance
        self._keep = [_bytes(x, n) for n, x in (
            ("model", model), ("tokenizer", tokenizer), ("chat_template", chat_template),
            ("backend", backend), ("cache", cache), ("kv_dtype", kv_dtype),
            ("attn_impl", attn_impl), ("evict", evict), ("disk_cache", disk_cache),
            ("kv_remote", kv_remote), ("kv_remote_password_file", kv_remote_password_file),
            ("fp8", fp8))]
        (p.path, p.tokenizer_path, p.chat_template, p.backend, p.cache_mode, p.kv_dtype,
         p.attn_impl, p.doc_evict, p.disk_cache_dir, p.kv_remote, p.kv_remote_password_file,
         p.fp8) = self._keep
        p.n_ctx, p.n_threads, p.device, p.page_size, p.max_seqs = \
            n_ctx, threads, device, page_size, max_seqs
        p.kv_budget_bytes = _size(budget, "budget")
        p.host_cache_bytes = _size(host_cache, "host_cache")
        p.disk_budget_bytes = _size(disk_budget, "disk_budget")
        self._check(self._lib.li_model_load(byref(self._m), byref(p)), "cannot load the model")
        info = _lib.ModelInfo()
        self._lib.li_model_get_info(self._m, byref(info))
        self.info: Dict[str, Any] = {
            f: (getattr(info, f).decode() if isinstance(getattr(info, f), bytes)
                else getattr(info, f)) for f, *_ in _lib.ModelInfo._fields_}
        self.library: str = str(getattr(self._lib, "li_path"))  # the file loaded

    # ---- lifetime ------------------------------------------------------------------------------

    def close(self) -> None:
        """Frees the model and its KV pool (li_model_free); later calls raise. Idempotent."""
        with self._lock:
            if self._m:
                self._lib.li_model_free(self._m)
                self._m = c_void_p()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    # ---- helpers -------------------------------------------------------------------------------

    def _check(self, st: int, what: str = "") -> None:
        if st != 0:
            raise _error(st, self._lib.li_last_error().decode("utf-8", "replace"), what)

    def _usable(self) -> c_void_p:
        if not self._m:
            raise LazyInferError(0, "the engine is closed")
        if self._streaming:
            raise LazyInferError(_lib.LI_ERR_INVALID_ARG,
                                 "a generate(stream=True) iterator on this engine is still open: "
                                 "consume or close() it first")
        return self._m

    def _piece(self, tok: int) -> bytes:
        b = self._pieces.get(tok)
        if b is None:
            buf = ctypes.create_string_buffer(256)
            n = c_size_t()
            self._check(self._lib.li_token_to_piece(self._m, tok, buf, 256, byref(n)),
                        f"token {tok}")
            if n.value > 256:
                buf = ctypes.create_string_buffer(n.value)
                self._check(self._lib.li_token_to_piece(self._m, tok, buf, n.value, byref(n)))
            b = self._pieces[tok] = buf.raw[:n.value]
        return b

    def _ids_from_c(self, ids: "ctypes._Pointer[c_int32]", n: int) -> List[int]:
        out = ids[:n]
        self._lib.li_free_tokens(ids)
        return out

    def _prompt_ids(self, prompt: Union[str, Sequence[int], None],
                    messages: Optional[Sequence[Message]], chat: bool,
                    system: Optional[str]) -> List[int]:
        """Token ids of a prompt: raw text (BOS when the model wants one), text as a user message
        of the chat format (chat=True, as `generate --chat`), a conversation (messages, the
        assistant turn opened), or ids as given."""
        m = self._m
        ids = ctypes.POINTER(c_int32)()
        n = c_int()
        if (prompt is None) == (messages is None):
            raise ValueError("give one of prompt and messages")
        if messages is not None:
            if isinstance(messages, (str, bytes)):
                raise TypeError("messages must be a list of {'role', 'content'} dicts")
            keep = []
            arr = (_lib.ChatMessage * max(1, len(messages)))()
            for k, msg in enumerate(messages):
                if not isinstance(msg, Mapping) or "role" not in msg or "content" not in msg:
                    raise TypeError(f"messages[{k}] must be a dict with 'role' and 'content'")
                keep.append((_bytes(msg["role"], f"messages[{k}].role"),
                             _bytes(msg["content"], f"messages[{k}].content")))
                arr[k].role, arr[k].content = keep[-1]
            self._check(self._lib.li_chat_tokenize_messages(m, arr, len(messages), True,
                                                            byref(ids), byref(n)),
                        "cannot tokenize the messages")
            return self._ids_from_c(ids, n.value)
        assert prompt is not None
        if not isinstance(prompt, str):
            out = [int(t) for t in prompt]  # ids as given
            if not out:
                raise ValueError("the prompt has no tokens")
            return out
        text = _bytes(prompt, "prompt")
        assert text is not None
        if chat:
            r = c_void_p()
            self._check(self._lib.li_chat_render(m, _bytes(system, "system"), text, byref(r)),
                        "cannot render the chat")
            text = ctypes.string_at(r)
            _libc_free(r)
            self._check(self._lib.li_tokenize(m, text, len(text), False, True, byref(ids),
                                              byref(n)), "cannot tokenize the prompt")
        else:
            if system is not None:
                raise ValueError("system needs chat=True (or a system message in messages)")
            self._check(self._lib.li_tokenize(m, text, len(text), True, False, byref(ids),
                                              byref(n)), "cannot tokenize the prompt")
        return self._ids_from_c(ids, n.value)

    def _gen_params(self, max_tokens: int, temperature: Optional[float], top_p: Optional[float],
                    top_k: Optional[int], min_p: Optional[float], seed: int,
                    ignore_eos: bool) -> "_lib.GenerateParams":
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"max_tokens must be an int >= 1 (got {max_tokens!r})")
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 1 << 64:
            raise ValueError(f"seed must be an int in [0, 2^64) (got {seed!r})")
        gp: _lib.GenerateParams = self._lib.li_generate_default_params()
        gp.n_predict = max_tokens
        s = gp.sampling
        if temperature is not None:
            s.temperature = temperature
        if top_p is not None:
            s.top_p = top_p
        if top_k is not None:
            s.top_k = top_k
        if min_p is not None:
            s.min_p = min_p
        s.seed = seed
        gp.stop_at_eos = not ignore_eos
        return gp

    # ---- tokens --------------------------------------------------------------------------------

    def tokenize(self, text: str, *, add_bos: bool = False, special: bool = True) -> List[int]:
        """Token ids of `text` (li_tokenize). add_bos: prepend BOS when the model wants one;
        special: match special-token text such as "<|im_start|>" (as `lazyinfer tokenize`,
        whose defaults these are)."""
        b = _bytes(text, "text")
        assert b is not None
        with self._lock:
            m = self._usable()
            ids = ctypes.POINTER(c_int32)()
            n = c_int()
            self._check(self._lib.li_tokenize(m, b, len(b), add_bos, special, byref(ids),
                                              byref(n)), "cannot tokenize")
            return self._ids_from_c(ids, n.value)

    def detokenize(self, ids: Iterable[int]) -> str:
        """The text of token ids: their pieces joined, invalid UTF-8 replaced by U+FFFD."""
        with self._lock:
            self._usable()
            return b"".join(self._piece(int(t)) for t in ids).decode("utf-8", "replace")

    # ---- generation ----------------------------------------------------------------------------

    def generate(self, prompt: Union[str, Sequence[int], None] = None, *,
                 messages: Optional[Sequence[Message]] = None, max_tokens: int = 128,
                 temperature: Optional[float] = None, top_p: Optional[float] = None,
                 top_k: Optional[int] = None, min_p: Optional[float] = None, seed: int = 0,
                 stop: Union[str, Sequence[str], None] = None, ignore_eos: bool = False,
                 chat: bool = False, system: Optional[str] = None,
                 stream: bool = False) -> Union[str, Iterator[str]]:
        """A completion of `prompt` (raw text with BOS, or token ids), of `prompt` as a user
        message (chat=True, optional system), or of a conversation (`messages`: [{"role",
        "content"}], the assistant turn opened). Sampling defaults are the engine's
        (li_sampling_default_params: temperature 0.8, top_k 40, top_p 0.95, min_p 0.05);
        temperature=0 is greedy. Generation ends at EOS (unless ignore_eos), after max_tokens,
        or before the first occurrence of a `stop` string (cut off with what follows).

        stream=False returns the text; stream=True an iterator of text pieces as tokens come
        (the scheduler stepped from Python: li_submit + li_step), whose concatenation is the
        same text; closing it early (break, close()) cancels the request (li_cancel).
        Invalid UTF-8 in the output reads as U+FFFD, the same in both modes."""
        stop_b = _stop_bytes(stop)
        with self._lock:
            self._usable()
            gp = self._gen_params(max_tokens, temperature, top_p, top_k, min_p, seed, ignore_eos)
            ids = self._prompt_ids(prompt, messages, chat, system)
        if stream:
            return self._stream(ids, gp, stop_b)
        c = _Collector(self, stop_b)
        gp.on_token = c.cb
        arr = (c_int32 * len(ids))(*ids)
        with self._lock:
            m = self._usable()
            self._check(self._lib.li_generate(m, arr, len(ids), byref(gp), None),
                        "generation failed")
        c.raise_error()
        return c.out.decode("utf-8", "replace")

    def _stream(self, ids: List[int], gp: "_lib.GenerateParams",
                stop_b: List[bytes]) -> Iterator[str]:
        """generate(stream=True): steps the scheduler one iteration at a time and yields the text
        of the tokens each step produced. The tail that could still be the start of a stop
        string is held back until it is decided."""
        c = _Collector(self, stop_b)
        gp.on_token = c.cb
        arr = (c_int32 * len(ids))(*ids)
        req = _lib.Request(prompt_ids=arr, n_prompt_ids=len(ids), gen=gp)
        rid = c_int64()
        with self._lock:
            m = self._usable()
            self._check(self._lib.li_submit(m, byref(req), byref(rid)), "generation failed")
            self._streaming = True
        dec = codecs.getincrementaldecoder("utf-8")("replace")
        hold = max((len(s) for s in stop_b), default=1) - 1
        sent = 0
        finished = False
        try:
            while True:
                res = _lib.RequestResult()
                with self._lock:
                    self._check(self._lib.li_step(m, None), "generation failed")
                    finished = self._lib.li_result(m, rid, byref(res)) == 0
                c.raise_error()
                if finished and res.status != 0:
                    raise _error(res.status, res.error.decode("utf-8", "replace"),
                                 "generation failed")
                end = len(c.out) if finished or c.stopped else max(sent, len(c.out) - hold)
                if end > sent:
                    text = dec.decode(bytes(c.out[sent:end]))
                    sent = end
                    if text:
                        yield text
                if finished:
                    tail = dec.decode(b"", final=True)
                    if tail:
                        yield tail
                    return
        finally:
            if not finished and self._m:
                with self._lock:  # closed early: the request ends now and is forgotten
                    self._lib.li_cancel(m, rid)
                    self._lib.li_result(m, rid, byref(_lib.RequestResult()))
            self._streaming = False

    def logits(self, prompt: Union[str, Sequence[int], None] = None, *,
               messages: Optional[Sequence[Message]] = None, chat: bool = False,
               system: Optional[str] = None) -> Any:
        """The logits (n_vocab,) float32 NumPy array of the prompt's last position: what the first
        token would be drawn from (li_request.first_logits). Needs numpy."""
        try:
            import numpy as np  # type: ignore[import-not-found, unused-ignore]
        except ImportError:
            raise ImportError("Engine.logits needs numpy: pip install numpy") from None
        with self._lock:
            m = self._usable()
            ids = self._prompt_ids(prompt, messages, chat, system)
            V = int(self.info["n_vocab"])
            out = np.empty(V, dtype=np.float32)
            gp = self._gen_params(1, 0.0, None, None, None, 0, True)
            arr = (c_int32 * len(ids))(*ids)
            req = _lib.Request(prompt_ids=arr, n_prompt_ids=len(ids), gen=gp,
                               first_logits=out.ctypes.data_as(ctypes.POINTER(c_float)))
            self._run_request(m, req, "cannot compute the logits")
            return out

    def _run_request(self, m: c_void_p, req: "_lib.Request", what: str) -> "_lib.RequestResult":
        rid = c_int64()
        self._check(self._lib.li_submit(m, byref(req), byref(rid)), what)
        res = _lib.RequestResult()
        st = self._lib.li_run(m)
        if st != 0:  # the request is forgotten either way
            msg = self._lib.li_last_error().decode("utf-8", "replace")
            self._lib.li_cancel(m, rid)
            self._lib.li_result(m, rid, byref(res))
            raise _error(st, msg, what)
        self._check(self._lib.li_result(m, rid, byref(res)), what)
        if res.status != 0:
            raise _error(res.status, res.error.decode("utf-8", "replace"), what)
        return res

    # ---- RAG -----------------------------------------------------------------------------------

    def rag(self, query: str, documents: Iterable[Document] = (), *,
            system: Optional[str] = None, chat: bool = True, max_tokens: int = 64,
            temperature: float = 0.0, top_p: Optional[float] = None, top_k: Optional[int] = None,
            min_p: Optional[float] = None, seed: int = 0,
            stop: Union[str, Sequence[str], None] = None,
            ignore_eos: bool = False, repair: str = "none") -> RagResult:
        """Answers `query` over `documents` (texts, (id, text) pairs or {"id", "text"} dicts) as
        one request [system][document …][query] (README "Documents (RAG)"): each document is
        encoded once and kept in the engine's document cache, so a later call naming the same
        text is served from it (doc_hits, cached_tokens). Defaults as `lazyinfer rag`: chat
        format, greedy, 64 tokens. Returns the answer with the request's figures.

        repair: "none", "head[:K]" or "blend[:R]" recomputes document tokens in this request's
        context (docs/RAG.md "Repair"; the engine's cache mode must be lazy or copy)."""
        stop_b = _stop_bytes(stop)
        q = _bytes(query, "query")
        if q is None or not q.strip(b" \n\t\r"):
            raise ValueError("the query is empty")
        docs = _documents(documents)
        rp = _lib.Repair()
        if self._lib.li_repair_parse(_bytes(repair, "repair"), ctypes.byref(rp)) != 0:
            raise ValueError(self._lib.li_last_error().decode("utf-8", "replace"))
        c = _Collector(self, stop_b)
        with self._lock:
            m = self._usable()
            gp = self._gen_params(max_tokens, temperature, top_p, top_k, min_p, seed, ignore_eos)
            gp.on_token = c.cb
            arr = (_lib.Doc * max(1, len(docs)))()
            for k, (did, text) in enumerate(docs):
                arr[k].text, arr[k].len, arr[k].id = text, len(text), did
            req = _lib.Request(system=_bytes(system, "system"), docs=arr, n_docs=len(docs),
                               query=q, chat=chat, gen=gp, repair=rp)
            res = self._run_request(m, req, "the request failed")
        c.raise_error()
        reason = "stop" if c.stopped or res.n_generated < max_tokens else "length"
        text = bytes(c.out)
        if reason == "length":  # a character whose last bytes max_tokens cut is left out
            text = text[:_utf8_complete_prefix(text)]
        return RagResult(answer=text.decode("utf-8", "replace"), finish_reason=reason,
                         prompt_tokens=res.n_prompt, cached_tokens=res.n_cached_tokens,
                         computed_tokens=res.n_prompt - res.n_cached_tokens,
                         generated_tokens=res.n_generated, doc_tokens=res.n_doc_tokens,
                         doc_hits=res.doc_hits, doc_misses=res.doc_misses,
                         repair_tokens=res.n_repair_tokens, ttft_ms=res.ttft_ms, total_ms=res.total_ms, queue_ms=res.queue_ms)

    def cache_stats(self) -> Dict[str, Any]:
        """The document cache's counters (li_get_cache_stats): lookups, hits, misses, resident
        documents and bytes, KV pages; "tiers" holds the host, disk and remote tiers'."""
        with self._lock:
            m = self._usable()
            cs = _lib.CacheStats()
            self._lib.li_get_cache_stats(m, byref(cs))
        d: Dict[str, Any] = {f: getattr(cs, f) for f, *_ in _lib.CacheStats._fields_
                             if f != "tiers"}
        d["tiers"] = {name: {f: getattr(cs.tiers[i], f) for f, *_ in _lib.CacheTierStats._fields_}
                      for i, name in enumerate(("host", "disk", "remote"))}
        return d

    # ---- diffusion -----------------------------------------------------------------------------

    def dllm(self, prompt: Union[str, Sequence[int]], *, gen_length: int = 128,
             block_length: int = 32, steps: int = 128, threshold: Optional[float] = None,
             factor: Optional[float] = None, commit_per_step: int = 0,
             lacache: Union[bool, str, Iterable[str]] = "all", fp8: bool = False,
             temperature: float = 0.0, cfg: float = 0.0, remasking: str = "low_confidence",
             confidence: str = "auto", dpad: bool = False, early_stop: bool = False,
             seed: int = 0, chat: bool = False, system: Optional[str] = None,
             sub_block_length: int = 0) -> DllmResult:
        """Semi-autoregressive decoding of a diffusion LM (arch "llada", li_dllm_generate; the
        exact contract: docs/DLLM.md) with the options of `lazyinfer dllm`: threshold τ or
        factor f (Fast-dLLM parallel decoding, at most one), lacache ("all" — the default, exact
        —, "off"/False, or components among "embed", "rope", "fa", "trunc"), fp8 (FP8 FFN for
        layers >= 1, approximate), dpad (DPad with its defaults), cfg, remasking
        ("low_confidence", "random"), confidence ("auto", "f32", "f64"). A Fast-dLLM v2 model
        (block diffusion) takes gen_length, block_length, sub_block_length (0: 8) and threshold
        only (docs/DLLM.md, "Fast-dLLM v2")."""
        if lacache is True or lacache == "all":
            bits = 15
        elif lacache is False or lacache in ("off", "", None):
            bits = 0
        else:
            names = lacache.split(",") if isinstance(lacache, str) else list(lacache)
            bad = [n for n in names if n not in _LACACHE_BITS]
            if bad:
                raise ValueError(f"lacache: unknown component {bad[0]!r} (expected embed, rope, "
                                 f"fa, trunc, 'all' or 'off')")
            bits = sum(_LACACHE_BITS[n] for n in set(names))
        if remasking not in ("low_confidence", "random"):
            raise ValueError(f"remasking {remasking!r}: expected 'low_confidence' or 'random'")
        if confidence not in ("auto", "f32", "f64"):
            raise ValueError(f"confidence {confidence!r}: expected 'auto', 'f32' or 'f64'")
        if threshold is not None and factor is not None:
            raise ValueError("threshold and factor are exclusive: give one")
        with self._lock:
            m = self._usable()
            p = self._lib.li_dllm_default_params()
            p.gen_length, p.block_length, p.steps = gen_length, block_length, steps
            p.sub_block_length = sub_block_length
            p.threshold = threshold or 0.0
            p.factor = factor or 0.0
            p.commit_per_step = commit_per_step
            p.lacache, p.fp8, p.dpad, p.early_stop = bits, bool(fp8), bool(dpad), bool(early_stop)
            p.temperature, p.cfg, p.seed = temperature, cfg, seed
            p.remasking = 0 if remasking == "low_confidence" else 1
            p.confidence = ("auto", "f32", "f64").index(confidence)
            self._check(self._lib.li_dllm_check_params(byref(p)), "bad dllm parameters")
            if not self.info["diffusion"]:
                raise InvalidArgumentError(
                    _lib.LI_ERR_INVALID_ARG, f"{self.info['name']} is not a diffusion model "
                    f"(arch '{self.info['arch']}'): use generate()")
            ids = self._prompt_ids(prompt, None, chat, system)
            arr = (c_int32 * len(ids))(*ids)
            gen = (c_int32 * gen_length)()
            st = _lib.DllmStats()
            self._check(self._lib.li_dllm_generate(m, arr, len(ids), byref(p), gen, byref(st)),
                        "decoding failed")
            r = c_void_p()
            self._check(self._lib.li_dllm_detokenize(m, gen, gen_length, byref(r)),
                        "cannot decode the tokens")
            text = ctypes.string_at(r).decode("utf-8", "replace")
            _libc_free(r)
        return DllmResult(text=text, tokens=list(gen), steps=st.steps, nfe=st.nfe,
                          early_stopped=st.early_stopped, latency_ms=st.latency_ms,
                          ms_per_step=st.ms_per_step, tps_fastdllm=st.tps_fastdllm,
                          tps_dinfer=st.tps_dinfer)


_libc = ctypes.CDLL(None)
_libc.free.argtypes = [c_void_p]
_libc.free.restype = None


def _libc_free(p: c_void_p) -> None:
    """free() for the strings the library malloc'ed (li_chat_render, li_dllm_detokenize)."""
    _libc.free(p)
