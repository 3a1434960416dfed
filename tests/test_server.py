"""test_server.py — `lazyinfer serve` end to end with real clients (docs/SERVER.md).

The official `openai` package for chat, completions, streaming, documents and diffusion fields;
curl for raw HTTP (bad requests, API key, sizes); a load test of 64 concurrent streaming clients;
clients that disconnect mid-stream. After the load and the disconnects, /metrics must show the KV
pool back to its idle level: pages in use == pages held by the document cache.
synth:tiny-llama (random weights, fast) where the text does not matter, the default SmolLM2 model
where it does, synth:tiny-llada for the diffusion fields. Random inputs come from a seeded RNG
whose seed (fixed unless LI_TEST_SEED says otherwise, tests/seeding.py) is printed in failure
messages.
"""
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "server"))
from harness import ROOT, Server, assert_error, client, curl, open_stream  # noqa: E402
from seeding import li_seed  # noqa: E402

openai = pytest.importorskip("openai")

SEED = li_seed("test_server.py")
KEY = "sk-test-%08x" % random.Random(SEED).randrange(1 << 32)
DEFAULT_MODEL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
WORDS = ("apple river stone cloud garden window silver music paper candle forest bridge "
         "orange pencil winter summer yellow mountain coffee letter").split()


def rng(tag):
    return random.Random(f"{SEED}-{tag}")


def words(r, n):
    return " ".join(r.choice(WORDS) for _ in range(n))


@pytest.fixture(scope="module")
def tiny():
    s = Server("synth:tiny-llama", "--max-batch", "16", "--ctx-size", "1024", api_key=KEY)
    yield s
    assert s.alive(), s.log_tail()
    assert s.stop() == 0


@pytest.fixture(scope="module")
def real():
    if not DEFAULT_MODEL.exists():
        pytest.skip("default model not fetched (make setup)")
    s = Server(str(DEFAULT_MODEL), "--max-batch", "4", "--max-queue", "8", "--ctx-size", "2048")
    yield s
    assert s.alive(), s.log_tail()
    assert s.stop() == 0


def assert_idle_pages(s):
    m = s.wait_idle()
    assert m["lazyinfer_requests_running"] == 0 and m["lazyinfer_requests_waiting"] == 0, m
    assert m["lazyinfer_kv_pages_in_use"] == m["lazyinfer_kv_pages_cached"], (
        f"pages leaked: {m['lazyinfer_kv_pages_in_use']} in use, "
        f"{m['lazyinfer_kv_pages_cached']} held by the cache (seed {SEED})")
    return m


# ---- the default model: text that matters --------------------------------------------------------

def test_chat_and_usage(real):
    c = client(real)
    model = c.models.list().data[0].id
    r = c.chat.completions.create(model=model, temperature=0, max_tokens=24,
                                  messages=[{"role": "user", "content": "What is the capital of France?"}])
    text = r.choices[0].message.content
    assert "Paris" in text, text
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    assert r.usage.prompt_tokens > 5 and 0 < r.usage.completion_tokens <= 24
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    # the same request with a system message and a multi-turn history also answers
    r2 = c.chat.completions.create(model=model, temperature=0, max_tokens=8, messages=[
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Say one word."}])
    assert r2.usage.prompt_tokens > r.usage.prompt_tokens and r2.choices[0].message.content


def test_streaming_equals_non_streaming(real):
    c = client(real)
    r = rng("stream")
    msgs = [{"role": "user", "content": f"Write a sentence about {words(r, 2)}."}]
    full = c.chat.completions.create(model=c.models.list().data[0].id, messages=msgs, temperature=0,
                                     max_tokens=24)
    deltas, finish, usage, roles = [], None, None, []
    for ch in c.chat.completions.create(model=full.model, messages=msgs, temperature=0, max_tokens=24,
                                        stream=True, stream_options={"include_usage": True}):
        if ch.usage:
            usage = ch.usage
        for choice in ch.choices:
            if choice.delta.role:
                roles.append(choice.delta.role)
            if choice.delta.content:
                deltas.append(choice.delta.content)
            if choice.finish_reason:
                finish = choice.finish_reason
    assert "".join(deltas) == full.choices[0].message.content, f"seed {SEED}"
    assert roles == ["assistant"] and finish == full.choices[0].finish_reason
    assert usage.completion_tokens == full.usage.completion_tokens
    assert usage.prompt_tokens == full.usage.prompt_tokens


def test_completions_stop_and_seed(real):
    c = client(real)
    model = c.models.list().data[0].id
    prompt = "Once upon a time, " + words(rng("stop"), 3)
    base = c.completions.create(model=model, prompt=prompt, max_tokens=24, temperature=0)
    text = base.choices[0].text
    assert base.object == "text_completion" and len(text) > 10, text
    # a stop string taken from the middle of the greedy text: output ends right before it
    cut = next(i for i in range(len(text) // 2, len(text) - 3) if text[i:i + 4].strip())
    stop = text[cut:cut + 4]
    for stream in (False, True):
        if stream:
            got = "".join(ch.choices[0].text for ch in c.completions.create(
                model=model, prompt=prompt, max_tokens=24, temperature=0, stop=[stop, "\x07never"],
                stream=True) if ch.choices)
        else:
            r = c.completions.create(model=model, prompt=prompt, max_tokens=24, temperature=0,
                                     stop=[stop, "\x07never"])
            got = r.choices[0].text
            assert r.choices[0].finish_reason == "stop"
        assert got == text[:text.index(stop)], (stream, stop, got, text)
    # the same seed gives the same sample, other seeds (almost surely) something else
    s = rng("seed").randrange(1 << 31)
    a = [c.completions.create(model=model, prompt=prompt, max_tokens=12, temperature=1.0, seed=s)
         .choices[0].text for _ in range(2)]
    with ThreadPoolExecutor(3) as ex:
        others = set(ex.map(lambda k: c.completions.create(model=model, prompt=prompt, max_tokens=12,
                                                           temperature=1.0, seed=s + k).choices[0].text,
                            range(1, 4)))
    assert a[0] == a[1], f"seed {SEED}"
    assert others - {a[0]}, f"seeds gave identical samples (seed {SEED})"


def test_documents(real):
    c = client(real)
    model = c.models.list().data[0].id
    r = rng("docs")
    question = [{"role": "user", "content": "What is the secret code? Answer with the number only."}]

    def ask(code, filler):
        return c.chat.completions.create(model=model, temperature=0, max_tokens=16, messages=question,
                                         extra_body={"documents": [filler, f"The secret code is {code}."]})
    fillers = [{"id": "filler", "text": f"The {words(r, 2)} is next to the {words(r, 2)}."} for _ in range(5)]
    codes = [str(r.randrange(1000, 10000)) for _ in range(5)]
    before = real.metrics()
    # a cache miss, then the same request with every block from the document cache: same answer
    a = ask(codes[0], fillers[0])
    b = ask(codes[0], fillers[0])
    assert a.choices[0].message.content == b.choices[0].message.content, f"seed {SEED}"
    assert b.usage.prompt_tokens_details.cached_tokens > a.usage.prompt_tokens_details.cached_tokens
    assert b.usage.prompt_tokens == a.usage.prompt_tokens
    # the answers use the documents (SmolLM2-135M finds a 4-digit code ~97% of the time, so 3 of
    # 5 fails once in several thousand runs); the other four run concurrently (one batch)
    with ThreadPoolExecutor(4) as ex:
        answers = [a] + list(ex.map(ask, codes[1:], fillers[1:]))
    found = sum(code in x.choices[0].message.content for code, x in zip(codes, answers))
    assert found >= 3, f"the answers ignore the documents ({codes}, {[x.choices[0].message.content for x in answers]}, seed {SEED})"
    after = real.metrics()
    assert after["lazyinfer_doc_cache_hits_total"] >= before["lazyinfer_doc_cache_hits_total"] + 3
    assert after["lazyinfer_doc_cache_misses_total"] >= before["lazyinfer_doc_cache_misses_total"] + 8
    # completions take documents too (strings)
    r2 = c.completions.create(model=model, prompt="Question: what is the secret code?\nAnswer:",
                              max_tokens=8, temperature=0,
                              extra_body={"documents": [f"The secret code is {codes[0]}."]})
    assert r2.usage.prompt_tokens > 10 and r2.usage.prompt_tokens_details.cached_tokens > 0
    assert_idle_pages(real)


# ---- raw HTTP with curl ----------------------------------------------------------------------------

def test_api_key(tiny):
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    assert_error(*curl(tiny, "/v1/chat/completions", chat)[:2], 401, code="invalid_api_key")
    assert_error(*curl(tiny, "/v1/chat/completions", chat, key=KEY + "x")[:2], 401)
    assert_error(*curl(tiny, "/v1/models", key="")[:2], 401)
    st, body, _ = curl(tiny, "/v1/chat/completions", chat, key=KEY)
    assert st == 200 and body["choices"][0]["message"]["role"] == "assistant", body
    with pytest.raises(openai.AuthenticationError):
        client(tiny, key="sk-wrong").models.list()
    assert curl(tiny, "/health")[0] == 200  # health and metrics need no key
    assert curl(tiny, "/metrics")[0] == 200


def test_bad_requests(tiny):
    k = KEY
    cases = [
        (b'{"messages": [', 400, None),
        (b'not json at all', 400, None),
        (b'[1, 2]', 400, None),
        (b'{"prompt": "a", "prompt": "b"}', 400, None),
        (b'{"prompt": "\\ud8\xd2\x9b\xa3"}', 400, None),  # the parse error quotes invalid UTF-8
        ({"messages": "hello"}, 400, "messages"),
        ({"messages": []}, 400, "messages"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, 400, "messages"),
        ({"messages": [{"role": "user", "content": 5}]}, 400, "messages"),
        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": "ten"}, 400, "max_tokens"),
        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, 400, "max_tokens"),
        ({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}, 400, "temperature"),
        ({"messages": [{"role": "user", "content": "x"}], "temperature": 3}, 400, "temperature"),
        ({"messages": [{"role": "user", "content": "x"}], "top_p": 0}, 400, "top_p"),
        ({"messages": [{"role": "user", "content": "x"}], "stream": "yes"}, 400, "stream"),
        ({"messages": [{"role": "user", "content": "x"}], "n": 0}, 400, "n"),
        ({"messages": [{"role": "user", "content": "x"}], "n": 17}, 400, "n"),
        ({"messages": [{"role": "user", "content": "x"}], "seed": 1.5}, 400, "seed"),
        ({"messages": [{"role": "user", "content": "x"}], "stop": ["a", "b", "c", "d", "e"]}, 400, "stop"),
        ({"messages": [{"role": "user", "content": "x"}], "stop": 7}, 400, "stop"),
        ({"messages": [{"role": "user", "content": "x"}], "documents": "doc"}, 400, "documents"),
        ({"messages": [{"role": "user", "content": "x"}], "documents": [{"id": "a"}]}, 400, "documents"),
        ({"messages": [{"role": "user", "content": "x"}], "documents": [""]}, 400, "documents"),
        ({"messages": [{"role": "user", "content": "x"}], "logprobs": "yes"}, 400, "logprobs"),
        ({"messages": [{"role": "user", "content": "x"}], "logprobs": True, "top_logprobs": 21}, 400,
         "top_logprobs"),
        ({"messages": [{"role": "user", "content": "x"}], "ignore_eos": 1}, 400, "ignore_eos"),
        ({"messages": [{"role": "user", "content": "x"}], "repair": "blend:2"}, 400, "repair"),
        ({"messages": [{"role": "user", "content": "x"}], "repair": 16}, 400, "repair"),
        ({"messages": [{"role": "user", "content": "x"}], "repair": "cacheblend"}, 400, "repair"),
        ({"prompt": 12}, 400, "prompt"),
    ]
    for body, want, param in cases:
        path = "/v1/completions" if isinstance(body, dict) and "prompt" in body else "/v1/chat/completions"
        st, b, _ = curl(tiny, path, body, key=k)
        assert_error(st, b, want, param=param)
    st, b, _ = curl(tiny, "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                                    "repair": "blend:2"}, key=k)
    assert "(0, 1]" in b["error"]["message"], b  # the message names the problem
    # a repaired request with documents runs and counts its recomputed tokens as not cached
    docs = {"messages": [{"role": "user", "content": "which?"}], "max_tokens": 3,
            "documents": ["alpha beta gamma delta " * 6, "epsilon zeta eta theta " * 6]}
    for _ in range(2):  # the second time every document is cached
        st, plain, _ = curl(tiny, "/v1/chat/completions", docs, key=k)
        assert st == 200, plain
    st, rep, _ = curl(tiny, "/v1/chat/completions", {**docs, "repair": "head:8"}, key=k)
    assert st == 200, rep
    assert (rep["usage"]["prompt_tokens_details"]["cached_tokens"]
            < plain["usage"]["prompt_tokens_details"]["cached_tokens"]), (plain, rep)
    # prompt of token ids: in range works, out of range is a 400
    st, b, _ = curl(tiny, "/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 3}, key=k)
    assert st == 200, b
    assert_error(*curl(tiny, "/v1/completions", {"prompt": [1, 2, 10 ** 8]}, key=k)[:2], 400)
    # unknown model: 404 model_not_found, as OpenAI
    assert_error(*curl(tiny, "/v1/chat/completions", {"model": "gpt-17", "messages": [
        {"role": "user", "content": "x"}]}, key=k)[:2], 404, code="model_not_found")
    with pytest.raises(openai.NotFoundError):
        client(tiny).chat.completions.create(model="gpt-17", messages=[{"role": "user", "content": "x"}])
    # context overflow: 400 context_length_exceeded, streaming or not
    for stream in (False, True):
        st, b, _ = curl(tiny, "/v1/completions", {"prompt": "x " * 600, "max_tokens": 900, "stream": stream},
                        key=k)
        assert_error(st, b, 400, code="context_length_exceeded")
    with pytest.raises(openai.BadRequestError):
        client(tiny).completions.create(model="synth:tiny-llama", prompt="a", max_tokens=5000)
    # routes and methods
    assert_error(*curl(tiny, "/v1/nothing", key=k)[:2], 404)
    assert_error(*curl(tiny, "/v1/chat/completions", key=k)[:2], 405)
    assert_error(*curl(tiny, "/health", {"a": 1})[:2], 405)
    assert_error(*curl(tiny, "/v1/models/other", key=k)[:2], 404)
    st, b, _ = curl(tiny, "/v1/models/synth:tiny-llama", key=k)
    assert st == 200 and b["id"] == "synth:tiny-llama", b
    # a body over the limit (16 MiB) is a 413
    big = b'{"prompt": "' + b"a" * (17 << 20) + b'"}'
    assert_error(*curl(tiny, "/v1/completions", big, key=k)[:2], 413)
    assert tiny.alive()


def test_random_bodies(tiny):
    """Mutated and random request bodies: never a crash, never a 5xx, never a leaked page."""
    r = rng("bodies")
    seeds = [
        {"prompt": "hello", "max_tokens": 3, "stop": ["x"], "temperature": 0.5},
        {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "documents": ["d1", {"id": "a", "text": "t"}]},
        {"prompt": [1, 2], "max_tokens": 2, "stream": True},
    ]
    n_ok = 0
    for i in range(120):
        b = bytearray(json.dumps(r.choice(seeds)).encode())
        for _ in range(r.randrange(1, 4)):
            op = r.randrange(3)
            p = r.randrange(len(b) + 1)
            if op == 0 and b:
                del b[min(p, len(b) - 1)]
            elif op == 1:
                b.insert(p, r.randrange(256))
            else:
                b[p:p] = r.choice([b'"', b"{", b"]", b"null", b"-1", b"1e999", b"\\u0000", b"\xff"])
        path = r.choice(["/v1/completions", "/v1/chat/completions"])
        st, body, _ = curl(tiny, path, bytes(b), key=KEY)
        assert st in (200, 400, 404), (st, body, bytes(b), SEED)
        n_ok += st == 200
        if st != 200:
            assert_error(st, body, st)
    assert tiny.alive()
    assert_idle_pages(tiny)


# ---- many clients --------------------------------------------------------------------------------

def stream_once(c, model, r, docs, stats, lock):
    t0 = time.perf_counter()
    ttft, n = None, 0
    kw = dict(model=model, max_tokens=r.randrange(8, 48), temperature=r.choice([0, 0.8]),
              seed=r.randrange(1 << 30), stream=True, stream_options={"include_usage": True})
    if r.random() < 0.5:
        kw["extra_body"] = {"documents": r.sample(docs, 2)}
    usage = None
    if r.random() < 0.5:
        it = c.chat.completions.create(messages=[{"role": "user", "content": words(r, 4)}], **kw)
        get = lambda ch: ch.choices[0].delta.content if ch.choices else None  # noqa: E731
    else:
        it = c.completions.create(prompt=words(r, 4), **kw)
        get = lambda ch: ch.choices[0].text if ch.choices else None  # noqa: E731
    for ch in it:
        if ch.usage:
            usage = ch.usage
        if get(ch):
            n += 1
            if ttft is None:
                ttft = time.perf_counter() - t0
    assert usage is not None and usage.completion_tokens <= kw["max_tokens"]
    with lock:
        stats["requests"] += 1
        stats["tokens"] += usage.completion_tokens
        if ttft is not None:
            stats["ttft"].append(ttft)


def run_load(s, model, n_clients, duration):
    """n_clients threads stream requests back to back for `duration` seconds; returns stats."""
    docs = [f"Document {i}: " + words(rng(f"doc{i}"), 40) for i in range(6)]
    stats = {"requests": 0, "tokens": 0, "ttft": [], "errors": []}
    lock = threading.Lock()
    t_end = time.perf_counter() + duration

    def worker(i):
        r = rng(f"client{i}")
        c = client(s, timeout=120)
        while time.perf_counter() < t_end:
            try:
                stream_once(c, model, r, docs, stats, lock)
            except Exception as e:  # noqa: BLE001 — every failure is counted and reported
                with lock:
                    stats["errors"].append(repr(e))

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    ttft = sorted(stats["ttft"])
    pct = lambda q: ttft[min(len(ttft) - 1, int(q * len(ttft)))] * 1e3 if ttft else float("nan")  # noqa: E731
    stats["summary"] = (
        f"load: {n_clients} streaming clients, {wall:.1f} s: {stats['requests']} requests "
        f"({stats['requests'] / wall:.1f}/s), {stats['tokens']} tokens ({stats['tokens'] / wall:.0f}/s), "
        f"TTFT p50 {pct(0.5):.1f} ms p99 {pct(0.99):.1f} ms, errors {len(stats['errors'])}")
    return stats


def test_load_64_streaming_clients(tiny):
    n_clients, duration = 64, float(os.environ.get("LI_LOAD_SECONDS", "8"))
    before = tiny.metrics()
    stats = run_load(tiny, "synth:tiny-llama", n_clients, duration)
    summary = stats["summary"]
    print(summary)
    (ROOT / "build").mkdir(exist_ok=True)
    with open(ROOT / "build" / "server-load.txt", "w") as f:
        f.write(summary + "\n")
    assert not stats["errors"], f"{summary}\nfirst errors: {stats['errors'][:3]}\n{tiny.log_tail()}"
    assert stats["requests"] >= n_clients
    m = assert_idle_pages(tiny)
    done = sum(m[f'lazyinfer_requests_total{{endpoint="{e}",status="2xx"}}']
               - before[f'lazyinfer_requests_total{{endpoint="{e}",status="2xx"}}']
               for e in ("completions", "chat_completions"))
    assert done == stats["requests"], (done, stats["requests"])
    assert (m["lazyinfer_time_to_first_token_seconds_count"]
            >= before["lazyinfer_time_to_first_token_seconds_count"] + len(stats["ttft"]))
    assert m["lazyinfer_doc_cache_hits_total"] > before["lazyinfer_doc_cache_hits_total"]


def raw_stream(s, body):
    return open_stream(s, "/v1/completions", body, key=KEY)


def test_disconnect_mid_stream(real):
    before = real.wait_idle()
    n = 4
    socks = [raw_stream(real, {"prompt": words(rng(f"dc{i}"), 5), "max_tokens": 900, "stream": True,
                               "ignore_eos": True, "documents": [f"shared doc {i % 2}"]}) for i in range(n)]
    for s in socks:
        s.close()
    m = assert_idle_pages(real)
    assert m["lazyinfer_requests_cancelled_total"] >= before["lazyinfer_requests_cancelled_total"] + n
    # they stopped early: far fewer than n x 900 tokens were generated
    assert m["lazyinfer_generation_tokens_total"] - before["lazyinfer_generation_tokens_total"] < n * 900 / 4
    # non-streaming clients that leave are dropped too
    data = json.dumps({"prompt": "x", "max_tokens": 900, "ignore_eos": True}).encode()
    for _ in range(4):
        sock = socket.create_connection(("127.0.0.1", real.port))
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                     + f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
        time.sleep(0.05)
        sock.close()
    m2 = assert_idle_pages(real)
    assert m2["lazyinfer_generation_tokens_total"] - m["lazyinfer_generation_tokens_total"] < 4 * 900 / 4
    st, b, _ = curl(real, "/v1/completions", {"prompt": "still here", "max_tokens": 4})
    assert st == 200, b


def test_overload_503(real):
    """max-batch 4, max-queue 8: 4 running + 4 queued, the 9th request is refused with a 503."""
    real.wait_idle()
    # ignore_eos: none of them may end early and make room
    socks = [raw_stream(real, {"prompt": "a", "max_tokens": 1000, "stream": True, "ignore_eos": True})
             for _ in range(4)]
    data = json.dumps({"prompt": "b", "max_tokens": 1000, "ignore_eos": True}).encode()
    for _ in range(4):  # queued: no answer until one of the running ones ends, so sent raw
        q = socket.create_connection(("127.0.0.1", real.port))
        q.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
        socks.append(q)
    time.sleep(0.2)
    st, b, h = curl(real, "/v1/completions", {"prompt": "c", "max_tokens": 4})
    assert_error(st, b, 503, code="overloaded")
    assert h.get("retry-after") == "1", h
    c = client(real)
    with pytest.raises(openai.InternalServerError):
        c.completions.create(model=c.models.list().data[0].id, prompt="d", max_tokens=2)
    for x in socks:
        x.close()
    assert_idle_pages(real)
    assert curl(real, "/v1/completions", {"prompt": "e", "max_tokens": 2})[0] == 200


# ---- diffusion -------------------------------------------------------------------------------------

def test_diffusion_fields():
    s = Server("synth:tiny-llada")
    try:
        c = client(s)
        r = c.completions.create(model="synth:tiny-llada", prompt="Hello", temperature=0, extra_body={
            "gen_length": 32, "block_length": 16, "steps": 32, "threshold": 0.9, "lacache": True,
            "dpad": False, "fp8": False})
        assert r.usage.completion_tokens <= 32 and r.choices[0].finish_reason in ("stop", "length")
        # the exact caches do not change the committed tokens
        r0 = c.completions.create(model="synth:tiny-llada", prompt="Hello", temperature=0, extra_body={
            "gen_length": 32, "block_length": 16, "steps": 32, "threshold": 0.9, "lacache": 0})
        assert r0.choices[0].text == r.choices[0].text
        # requests that arrive together are decoded in one batch, each exactly as alone
        body = {"gen_length": 32, "block_length": 16, "steps": 32, "lacache": True}
        prompts = [words(rng(f"dllm{i}"), 3) for i in range(4)]
        alone = [c.completions.create(model="synth:tiny-llada", prompt=p, temperature=0, extra_body=body)
                 .choices[0].text for p in prompts]
        together = [None] * len(prompts)

        def one(i):
            together[i] = c.completions.create(model="synth:tiny-llada", prompt=prompts[i], temperature=0,
                                               extra_body=body).choices[0].text
        before = s.metrics()
        blocker = threading.Thread(target=lambda: c.completions.create(
            model="synth:tiny-llada", prompt="wait", extra_body={"gen_length": 64, "steps": 64}))
        blocker.start()
        time.sleep(0.05)
        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads + [blocker]:
            t.join()
        assert together == alone, f"seed {SEED}"
        m = s.metrics()
        assert m["lazyinfer_dllm_batched_requests_total"] - before["lazyinfer_dllm_batched_requests_total"] >= 2
        # streaming sends the committed prefix as blocks complete; it adds up to the whole text
        body4 = {"gen_length": 32, "block_length": 8, "steps": 32}
        whole = c.completions.create(model="synth:tiny-llada", prompt=prompts[0], temperature=0,
                                     extra_body=body4).choices[0].text
        parts = [ch.choices[0].text for ch in c.completions.create(
            model="synth:tiny-llada", prompt=prompts[0], temperature=0, stream=True, extra_body=body4)
            if ch.choices]
        assert "".join(parts) == whole, (parts, whole)
        # max_tokens alone sets gen_length; streaming ends with a finish reason
        chunks = list(c.chat.completions.create(model="synth:tiny-llada", max_tokens=8, stream=True,
                                                messages=[{"role": "user", "content": "hi"}]))
        assert chunks[-1].choices[0].finish_reason in ("stop", "length")
        st, b, _ = curl(s, "/v1/completions", {"prompt": "x", "gen_length": 30, "block_length": 16})
        assert_error(st, b, 400)
        assert "block_length" in b["error"]["message"] or "gen_length" in b["error"]["message"], b
        assert_error(*curl(s, "/v1/completions", {"prompt": "x", "documents": ["d"]})[:2], 400)
        assert_error(*curl(s, "/v1/completions", {"prompt": "x", "threshold": 0.5, "factor": 1})[:2], 400,
                     param="factor")
        assert_error(*curl(s, "/v1/completions", {"prompt": "x", "lacache": "all"})[:2], 400, param="lacache")
    finally:
        assert s.stop() == 0


def test_fast_dllm_v2():
    """A Fast-dLLM v2 model (block diffusion, engine-bd.c) served: the text equals `lazyinfer dllm`'s
    for the same options (that decoder is checked against the reference by
    test-bd-generate-ref), streaming adds up to it, concurrent requests each get their own, and a
    sub-block that does not divide the block is a 400 naming it."""
    model = str(ROOT / "tests/data/ref/tiny-fdllm-a")
    body = {"gen_length": 32, "block_length": 8, "sub_block_length": 4, "threshold": 0.5}
    prompts = [words(rng(f"fdllm{i}"), 4) for i in range(3)]
    cli = []
    for p in prompts:
        out = subprocess.run([os.environ.get("BIN", str(ROOT / "lazyinfer")), "dllm", "-m", model,
                              "-p", p, "--gen-length", "32", "--block-length", "8",
                              "--sub-block-length", "4", "--threshold", "0.5", "-t", "1"],
                             capture_output=True, check=True)
        # (random weights write bytes that are not UTF-8; the server's JSON has U+FFFD there, one
        # per invalid sequence where Python has one per byte: compared without them)
        cli.append(out.stdout[:-1].decode("utf-8", errors="replace").replace("\ufffd", ""))
    s = Server(model)
    try:
        c = client(s)
        mid = c.models.list().data[0].id
        alone = [c.completions.create(model=mid, prompt=p, temperature=0, extra_body=body)
                 .choices[0].text for p in prompts]
        assert [a.replace("\ufffd", "") for a in alone] == cli, (alone, cli)
        together = [None] * len(prompts)

        def one(i):
            together[i] = c.completions.create(model=mid, prompt=prompts[i], temperature=0,
                                               extra_body=body).choices[0].text
        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert together == alone
        parts = [ch.choices[0].text for ch in c.completions.create(
            model=mid, prompt=prompts[0], temperature=0, stream=True, extra_body=body) if ch.choices]
        assert "".join(parts) == alone[0], (parts, alone[0])
        st, b, _ = curl(s, "/v1/completions", {"prompt": "x", "gen_length": 32, "block_length": 8,
                                               "sub_block_length": 3})
        assert_error(st, b, 400)
        assert "sub_block_length" in b["error"]["message"], b
    finally:
        assert s.stop() == 0


@pytest.mark.parametrize("mode", ["copy", "prefix", "none", "full"])
def test_cache_modes_return_pages(mode):
    """Every --cache mode: concurrent requests with shared documents, some cut off mid-stream; at
    idle the pool holds only what the mode's cache keeps (nothing for none/full)."""
    s = Server("synth:tiny-llama", "--cache", mode, "--max-batch", "8", "--ctx-size", "1024",
               "--kv-budget", str(1 << 19))  # 64 pages of 16 tokens: evictions and waits happen
    try:
        c = client(s)
        docs = [f"Document {i}: " + words(rng(f"mode{i}"), 12) for i in range(4)]
        r = rng(f"modes-{mode}")
        jobs = [(words(r, 3), r.sample(docs, 2), r.randrange(4, 24)) for _ in range(24)]

        def one(job):
            q, d, n = job
            return c.completions.create(model="synth:tiny-llama", prompt=q, max_tokens=n, temperature=0,
                                        extra_body={"documents": d}).usage.completion_tokens
        with ThreadPoolExecutor(8) as ex:
            got = list(ex.map(one, jobs))
        assert all(1 <= g <= j[2] for g, j in zip(got, jobs))
        socks = [raw_stream(s, {"prompt": "x y z", "max_tokens": 150, "stream": True,
                                "documents": docs[:2]}) for _ in range(2)]  # both fit at once
        for x in socks:
            x.close()
        # a request larger than the whole KV budget is a 400, streaming or not (the stream's
        # headers wait for its first token, so the status is still a real one)
        for stream in (False, True):
            st, b, _ = curl(s, "/v1/completions", {"prompt": "x", "max_tokens": 1000, "stream": stream,
                                                  "documents": docs[:2]})
            assert_error(st, b, 400, code="context_length_exceeded")
        m = assert_idle_pages(s)
        if mode in ("none", "full"):
            assert m["lazyinfer_kv_pages_in_use"] == 0, m
    finally:
        assert s.stop() == 0
