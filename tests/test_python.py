"""test_python.py — the Python package (python/lazyinfer, ctypes over liblazyinfer.so) against
the CLI (./lazyinfer, env BIN) for the same arguments: generate (raw, chat, messages, sampled),
tokenize, rag (answers and per-request figures, a document reused across calls is a hit), dllm;
streaming = non-streaming; two engines in one process and in two threads; errors carry the C
message; the GIL is released during engine calls; RSS stays flat over 1,000 calls.

The package is imported from the checkout (python/ on sys.path), so it loads this build's
build/release/liblazyinfer.so (`make` builds it). synth:tiny-llama / tiny-llada keep it fast;
the default model (SmolLM2) runs one chat and one RAG request where it is present.
"""
import ctypes
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))

from lazyinfer import Engine, InvalidArgumentError, LazyInferError  # noqa: E402

BIN = os.environ.get("BIN", str(ROOT / "lazyinfer"))
TINY = "synth:tiny-llama"
LLADA = "synth:tiny-llada"
SMOL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def cli(*args, **kw):
    """stdout bytes of ./lazyinfer ARGS (the command must succeed)."""
    r = subprocess.run([BIN, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       cwd=kw.get("cwd", ROOT), timeout=120)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    return r.stdout


def cli_text(*args):
    """The CLI's text (generate / dllm print it and a newline) decoded as the package does."""
    out = cli(*args)
    assert out.endswith(b"\n")
    return out[:-1].decode("utf-8", "replace")


@pytest.fixture(scope="module")
def tiny():
    with Engine(TINY, threads=1) as e:
        yield e


# ---- each call against the CLI ---------------------------------------------------------------

@pytest.mark.parametrize("prompt", ["hello", "The capital of France is", "ünïcödé ✓"])
def test_generate_greedy_matches_cli(tiny, prompt):
    want = cli_text("generate", "-m", TINY, "-t", "1", "-p", prompt, "-n", "40", "--temp", "0")
    assert tiny.generate(prompt, max_tokens=40, temperature=0) == want


def test_generate_sampled_matches_cli(tiny):
    # not greedy: the same seed and sampling parameters draw the same tokens
    args = ["--temp", "0.9", "--top-k", "20", "--top-p", "0.9", "--min-p", "0.01", "--seed", "7"]
    want = cli_text("generate", "-m", TINY, "-t", "1", "-p", "abc", "-n", "32", *args)
    got = tiny.generate("abc", max_tokens=32, temperature=0.9, top_k=20, top_p=0.9, min_p=0.01,
                        seed=7)
    assert got == want
    assert got != tiny.generate("abc", max_tokens=32, temperature=0.9, top_k=20, top_p=0.9,
                                min_p=0.01, seed=8)


def test_chat_and_messages_match_cli(tiny):
    want = cli_text("generate", "-m", TINY, "-t", "1", "--chat", "--system", "Be brief.", "-p",
                    "Name a colour.", "-n", "24", "--temp", "0")
    assert tiny.generate("Name a colour.", chat=True, system="Be brief.", max_tokens=24,
                         temperature=0) == want
    msgs = [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Name a colour."}]
    assert tiny.generate(messages=msgs, max_tokens=24, temperature=0) == want


@pytest.mark.skipif(not SMOL.exists(), reason="no default model (scripts/setup.sh fetches it)")
def test_real_model_chat_and_rag_match_cli(tmp_path):
    want = cli_text("generate", "-m", str(SMOL), "--chat", "-p", "What is 2+2?", "-n", "6",
                    "--temp", "0")
    wl = tmp_path / "w.jsonl"
    wl.write_text(json.dumps({"documents": ["The secret code is 4821.", "Bob likes cheese."],
                              "query": "What is the secret code? Answer with the number only.",
                              "max_tokens": 6}) + "\n")
    rec = json.loads(cli("rag", "-m", str(SMOL), "--workload", str(wl), "--output", "jsonl"))
    with Engine(str(SMOL)) as e:
        assert e.generate("What is 2+2?", chat=True, max_tokens=6, temperature=0) == want
        r = e.rag("What is the secret code? Answer with the number only.",
                  ["The secret code is 4821.", "Bob likes cheese."], max_tokens=6)
    assert r.answer == rec["answer"] and r.finish_reason == rec["finish_reason"]
    assert (r.prompt_tokens, r.generated_tokens) == (rec["prompt_tokens"],
                                                     rec["generated_tokens"])


def test_tokenize_matches_cli(tiny):
    for text in ["Hello world", "<|im_start|>user", "ünï ✓"]:
        want = [int(x) for x in cli("tokenize", "-m", TINY, text).split()]
        assert tiny.tokenize(text) == want
        assert tiny.detokenize(tiny.tokenize(text)) == text
    bos = [int(x) for x in cli("tokenize", "-m", TINY, "--add-bos", "--no-special", "x").split()]
    assert tiny.tokenize("x", add_bos=True, special=False) == bos


def test_rag_matches_cli_and_reuses_documents(tmp_path):
    docs = [("memo", "The secret code is 4821.\r\n"), ("b", "Bob likes cheese. " * 5)]
    queries = ["What is the code?", "Who likes cheese?"]
    wl = tmp_path / "w.jsonl"
    wl.write_text("".join(json.dumps({"documents": [{"id": i, "text": t} for i, t in docs],
                                      "query": q, "max_tokens": 12}) + "\n" for q in queries))
    # --max-batch 1: one request after the other, as the Python calls run
    recs = [json.loads(line) for line in cli("rag", "-m", TINY, "-t", "1", "--workload", str(wl),
                                             "--output", "jsonl", "--max-batch", "1").splitlines()]
    with Engine(TINY, threads=1) as e:
        got = [e.rag(q, docs, max_tokens=12) for q in queries]
        again = e.rag(queries[0], [docs[1][1], docs[0][1]], max_tokens=12)  # texts, new order
        stats = e.cache_stats()
    for r, rec in zip(got, recs):
        assert r.answer == rec["answer"] and r.finish_reason == rec["finish_reason"]
        for k in ("prompt_tokens", "cached_tokens", "computed_tokens", "generated_tokens",
                  "doc_hits", "doc_misses"):
            assert getattr(r, k) == rec[k], k
    assert got[0].doc_misses == 3 and got[0].cached_tokens == 0  # system block + 2 documents
    assert got[1].doc_hits == 3 and got[1].cached_tokens == got[1].doc_tokens > 0
    assert again.doc_hits == 3 and again.doc_misses == 0
    assert stats["doc_hits"] == 6 and stats["doc_misses"] == 3
    assert all(r.ttft_ms > 0 and r.total_ms >= r.ttft_ms for r in got + [again])


def test_rag_repair():
    # a repair of every document token answers as full attention does; a bad value is named
    docs = [("a", "The secret code is 4821. " * 3), ("b", "Bob likes cheese. " * 5)]
    with Engine(TINY, threads=1, cache="full") as e:
        full = e.rag("What is the code?", docs, max_tokens=8, ignore_eos=True)
    with Engine(TINY, threads=1) as e:
        none = e.rag("What is the code?", docs, max_tokens=8, ignore_eos=True)
        rep = e.rag("What is the code?", docs, max_tokens=8, ignore_eos=True, repair="blend:1")
        with pytest.raises(ValueError, match=r"\(0, 1\]"):
            e.rag("q", docs, repair="blend:2")
    assert rep.answer == full.answer
    assert none.repair_tokens == 0 and rep.repair_tokens == rep.doc_tokens - rep.cached_tokens > 0
    assert rep.computed_tokens == rep.prompt_tokens - rep.cached_tokens


@pytest.mark.parametrize("opts", [
    {},
    {"threshold": 0.5, "lacache": "off"},
    {"lacache": "embed,fa", "temperature": 0.5, "seed": 3},
    {"fp8": True, "commit_per_step": 2},
])
def test_dllm_matches_cli(opts):
    args = ["dllm", "-m", LLADA, "-t", "1", "-p", "hello", "--gen-length", "32",
            "--block-length", "8", "--steps", "16"]
    flags = {"threshold": "--threshold", "lacache": "--lacache", "temperature": "--temp",
             "seed": "--seed", "commit_per_step": "--commit-per-step"}
    for k, v in opts.items():
        args += ["--fp8", "on"] if k == "fp8" else [flags[k], str(v)]
    want = cli(*args)
    with Engine(LLADA, threads=1) as e:
        r = e.dllm("hello", gen_length=32, block_length=8, steps=16, **opts)
    assert (r.text + "\n").encode() == want.decode("utf-8", "replace").encode()
    assert len(r.tokens) == 32 and r.nfe >= 1


def test_dllm_fast_dllm_v2_matches_cli():
    """A Fast-dLLM v2 model (block diffusion) through Engine.dllm: sub_block_length reaches the C
    struct (the text changes with it) and the text equals the CLI's."""
    model = str(ROOT / "tests" / "data" / "ref" / "tiny-fdllm-a")
    texts = {}
    with Engine(model, threads=1) as e:
        assert e.info["bd_size"] == 8 and e.info["diffusion"]
        for S in (4, 8):
            want = cli("dllm", "-m", model, "-t", "1", "-p", "hello world", "--gen-length", "32",
                       "--block-length", "8", "--sub-block-length", str(S), "--threshold", "0.5")
            r = e.dllm("hello world", gen_length=32, block_length=8, sub_block_length=S,
                       threshold=0.5)
            assert (r.text + "\n").encode() == want.decode("utf-8", "replace").encode()
            assert len(r.tokens) == 32 and r.nfe >= 4
            texts[S] = r.text
    assert texts[4] != texts[8]


def test_logits_last_position(tiny):
    np = pytest.importorskip("numpy")
    lg = tiny.logits("hello")
    assert lg.shape == (tiny.info["n_vocab"],) and lg.dtype == np.float32
    assert np.isfinite(lg).all() and lg.std() > 0
    first = tiny.generate(tiny.tokenize("hello", add_bos=True, special=False), max_tokens=1,
                          temperature=0, ignore_eos=True)
    assert tiny.detokenize([int(lg.argmax())]) == first
    assert not np.array_equal(lg, tiny.logits("hellp"))


# ---- streaming --------------------------------------------------------------------------------

@pytest.mark.parametrize("stop", [None, "e", ["zz", "%3"]])
def test_stream_equals_non_stream(tiny, stop):
    for prompt, temp in [("hello", 0.0), ("abc", 0.9), ("The capital of France is", 0.0)]:
        whole = tiny.generate(prompt, max_tokens=64, temperature=temp, seed=5, stop=stop)
        pieces = list(tiny.generate(prompt, max_tokens=64, temperature=temp, seed=5, stop=stop,
                                    stream=True))
        assert "".join(pieces) == whole
        if stop is None:
            assert len(pieces) > 1  # pieces as they come, not one at the end
    assert "%3" not in tiny.generate("hello", max_tokens=40, temperature=0, stop="%3")


def test_stream_closed_early_cancels(tiny):
    it = tiny.generate("hello", max_tokens=200, temperature=0, ignore_eos=True, stream=True)
    next(it)
    with pytest.raises(LazyInferError, match="still open"):
        tiny.generate("x", max_tokens=1)
    it.close()
    stats = tiny.cache_stats()
    assert stats["kv_pages_free"] == stats["kv_pages_total"]  # the request's pages are back
    assert tiny.generate("hello", max_tokens=40, temperature=0) == \
        cli_text("generate", "-m", TINY, "-t", "1", "-p", "hello", "-n", "40", "--temp", "0")


# ---- engines, threads, the GIL ----------------------------------------------------------------

def test_two_engines_in_one_process():
    want_a = cli_text("generate", "-m", TINY, "-t", "1", "-p", "hello", "-n", "24", "--temp", "0")
    want_b = cli_text("generate", "-m", "synth:tiny-llama:7", "-t", "1", "-p", "hello", "-n",
                      "24", "--temp", "0")
    assert want_a != want_b
    with Engine(TINY, threads=1) as a, Engine("synth:tiny-llama:7", threads=1) as b, \
            Engine(LLADA, threads=1) as d:
        for _ in range(2):
            assert a.generate("hello", max_tokens=24, temperature=0) == want_a
            assert b.generate("hello", max_tokens=24, temperature=0) == want_b
            d.dllm("hello", gen_length=16, block_length=8, steps=4)
        out = {}

        def run(name, e):
            out[name] = [e.generate("hello", max_tokens=24, temperature=0) for _ in range(20)]
        ts = [threading.Thread(target=run, args=(n, e)) for n, e in (("a", a), ("b", b))]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    assert out["a"] == [want_a] * 20 and out["b"] == [want_b] * 20


def test_gil_released_during_engine_calls():
    # a decode with no Python callback: if the GIL were held through the C call (PyDLL), the
    # main thread would stall for the whole call; released, it keeps running
    kw = dict(gen_length=1024, block_length=1024, steps=2, lacache="off")
    with Engine(LLADA, threads=1) as e:
        t0 = time.perf_counter()
        e.dllm("hello", **kw)
        call_s = time.perf_counter() - t0
        th = threading.Thread(target=e.dllm, args=("hello",), kwargs=kw)
        last, gap = time.perf_counter(), 0.0
        th.start()
        while th.is_alive():
            now = time.perf_counter()
            gap, last = max(gap, now - last), now
        th.join()
    assert call_s > 0.1, "the call is too short to tell"
    # 0.5: a held GIL would show a gap of the whole call; the interpreter's switch interval is
    # 5 ms, so even a loaded 2-core machine stays far below half the call
    assert gap < 0.5 * call_s, (gap, call_s)


# ---- errors -----------------------------------------------------------------------------------

def test_errors_carry_the_c_message(tiny):
    with pytest.raises(LazyInferError, match="unknown synthetic model 'nope'") as ei:
        Engine("synth:nope")
    assert ei.value.status != "LI_OK" and "tiny-llama" in ei.value.message
    with pytest.raises(LazyInferError, match="/no/such/model.gguf"):
        Engine("/no/such/model.gguf")
    with pytest.raises(LazyInferError, match="bogus"):
        Engine(TINY, cache="bogus")
    with pytest.raises(ValueError, match="fp8"):
        Engine(TINY, fp8="some")
    with pytest.raises(ValueError, match="max_tokens"):
        tiny.generate("hi", max_tokens=0)
    with pytest.raises(ValueError, match="one of prompt and messages"):
        tiny.generate()
    with pytest.raises(ValueError, match="document 1 is empty"):
        tiny.rag("q", ["ok", " \n"])
    with pytest.raises(TypeError, match="documents"):
        tiny.rag("q", "one string")
    with pytest.raises(LazyInferError, match="context|n_ctx|exceed|long"):
        tiny.generate("x" * 5000, max_tokens=4)
    with Engine(LLADA, threads=1) as d:
        with pytest.raises(InvalidArgumentError, match="gen_length"):
            d.dllm("hi", gen_length=30, block_length=8, steps=8)
        with pytest.raises(LazyInferError, match="diffusion"):
            d.generate("hi", max_tokens=2)
    with pytest.raises(LazyInferError, match="not a diffusion model"):
        tiny.dllm("hi", gen_length=32, block_length=8, steps=8)
    e = Engine(TINY, threads=1)
    e.close()
    e.close()
    with pytest.raises(LazyInferError, match="closed"):
        e.generate("hi")
    # the engine that raised goes on working
    assert tiny.generate("hello", max_tokens=4, temperature=0)


# ---- memory -----------------------------------------------------------------------------------

def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                                "usmblks", "fsmblks", "uordblks", "fordblks",
                                                "keepcost")]


def malloc_in_use():
    """Bytes malloc has handed out and not had back, every arena (glibc's mallinfo2); None
    where the C library has no mallinfo2."""
    libc = ctypes.CDLL(None)
    if not hasattr(libc, "mallinfo2"):
        return None
    libc.mallinfo2.restype = MallInfo2
    m = libc.mallinfo2()
    return m.uordblks + m.hblkhd


def test_no_leak_over_1000_calls(tiny):
    def calls(n):
        for i in range(n):
            k = i % 4
            if k == 0:
                tiny.generate("hello", max_tokens=4, temperature=0.7, seed=i)
            elif k == 1:
                "".join(tiny.generate("abc", max_tokens=4, stream=True, stop="q"))
            elif k == 2:
                tiny.rag("what?", ["doc %d" % (i % 8), "shared doc"], max_tokens=2)
            else:
                tiny.detokenize(tiny.tokenize("some text %d" % i))
    calls(200)  # warm-up: caches, the document cache's 8 documents, allocator pools
    before, heap = rss_kib(), malloc_in_use()
    calls(1000)
    grown = rss_kib() - before
    # RSS moves in pages: flat within 1 MiB. The heap is exact: 64 KiB over 1,000 calls is 64
    # bytes a call, while the noise measured here is ~6 KiB and one token array not freed per
    # tokenize() call (250 of the 1,000) already shows as ~200 KiB.
    assert grown < 1024, f"RSS grew by {grown} KiB over 1,000 calls"
    if heap is not None:
        heap_grown = malloc_in_use() - heap
        assert heap_grown < 64 * 1024, f"malloc'ed bytes grew by {heap_grown} over 1,000 calls"
