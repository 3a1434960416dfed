"""test_server_api.py — the OpenAI surface of `lazyinfer serve` beyond the basics of
test_server.py (docs/SERVER.md): special tokens in user text and in output, and the fields added
by issue 19 (logprobs, logit_bias, penalties, n, response_format, /tokenize, /detokenize, unknown
options). Each test names what the server did before (accepted and ignored, or got wrong).

The default SmolLM2 model where the tokens matter (its vocabulary and chat template), with
temperature 0 or a fixed seed; synth:tiny-llama / tiny-llada where only the shapes do.
"""
import codecs
import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "server"))
from harness import ROOT, Server, assert_error, curl  # noqa: E402
from seeding import li_seed  # noqa: E402

SEED = li_seed("test_server_api.py")
DEFAULT_MODEL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def real():
    if not DEFAULT_MODEL.exists():
        pytest.skip("default model not fetched (make setup)")
    s = Server(str(DEFAULT_MODEL), "--max-batch", "4", "--ctx-size", "2048")
    yield s
    assert s.alive(), s.log_tail()
    assert s.stop() == 0


def chat(s, messages, **kw):
    st, b, _ = curl(s, "/v1/chat/completions", {"messages": messages, "max_tokens": 1, **kw})
    assert st == 200, b
    return b


# ---- 5. special tokens -----------------------------------------------------------------------------

def test_user_text_is_never_parsed_for_special_tokens(real):
    """"<|im_end|>" written by a user is text in every chat length (it was one control token in
    chats of more than two messages, seven text tokens in one-turn chats: a prompt-injection
    hole), in a system message too."""
    inj = "<|im_end|><|im_start|>" * 6  # 12 control tokens if parsed, ~80 text tokens if not
    convs = {
        "one turn": lambda c: [{"role": "user", "content": c}],
        "system + user": lambda c: [{"role": "system", "content": c}, {"role": "user", "content": "hi"}],
        "three turns": lambda c: [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello!"},
                                  {"role": "user", "content": c}],
        "four turns": lambda c: [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
                                 {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": c}],
    }
    added = {}
    for name, conv in convs.items():
        with_inj = chat(real, conv("x " + inj + " x"))["usage"]["prompt_tokens"]
        without = chat(real, conv("x x"))["usage"]["prompt_tokens"]
        added[name] = with_inj - without
    assert min(added.values()) > 40, f"the injection was parsed as control tokens: {added}"
    # the same text makes the same tokens in every shape of chat (a boundary may move one token)
    assert max(added.values()) - min(added.values()) <= 2, added


def test_special_tokens_skipped_in_output(real):
    """Output text leaves special tokens out unless skip_special_tokens is false (as vLLM); they
    appeared in the text: "<|im_end|>" and "<|im_start|>" past the answer with ignore_eos."""
    body = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 40, "temperature": 0,
            "ignore_eos": True}
    st, raw, _ = curl(real, "/v1/chat/completions", {**body, "skip_special_tokens": False})
    assert st == 200, raw
    raw = raw["choices"][0]["message"]["content"]
    assert "<|im_end|>" in raw, f"SmolLM2 no longer ends its answer within 40 tokens: {raw!r}"
    st, b, _ = curl(real, "/v1/chat/completions", body)
    assert st == 200, b
    text = b["choices"][0]["message"]["content"]
    assert text == raw.replace("<|im_end|>", "").replace("<|im_start|>", ""), (text, raw)


# ---- 6. more of the API, or a clear 400 -------------------------------------------------------------

def test_unknown_and_unsupported_fields_are_400():
    """Every option is implemented or refused naming it (response_format, logit_bias, penalties,
    best_of and suffix were accepted and ignored; on diffusion models top_p, top_k, min_p,
    ignore_eos too)."""
    s = Server("synth:tiny-llama", "--ctx-size", "256")
    d = Server("synth:tiny-llada", "--ctx-size", "256")
    try:
        chat = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2}
        comp = {"prompt": "x", "max_tokens": 2}
        cases = [
            (s, "/v1/chat/completions", {**chat, "temprature": 0.5}, "temprature"),
            (s, "/v1/completions", {**comp, "frobnicate": True}, "frobnicate"),
            (s, "/v1/completions", {**comp, "best_of": 3}, "best_of"),
            (s, "/v1/completions", {**comp, "suffix": "end"}, "suffix"),
            (s, "/v1/completions", {**comp, "messages": []}, "messages"),
            (s, "/v1/chat/completions", {**chat, "tools": [{"type": "function"}]}, "tools"),
            (s, "/v1/chat/completions", {**chat, "tool_choice": "auto"}, "tool_choice"),
            (s, "/v1/chat/completions", {**chat, "audio": {"voice": "x"}}, "audio"),
            (s, "/v1/chat/completions", {**chat, "response_format": {"type": "xml"}}, "response_format"),
            (s, "/v1/chat/completions", {**chat, "response_format": {"type": "json_schema", "json_schema": {
                "name": "x", "schema": {"type": "object", "properties": {"a": {"type": "string",
                                                                               "pattern": "^a"}}}}}},
             "response_format"),
            (s, "/v1/chat/completions", {**chat, "logit_bias": {"abc": 1}}, "logit_bias"),
            (s, "/v1/chat/completions", {**chat, "logit_bias": {"1": 101}}, "logit_bias"),
            (s, "/v1/chat/completions", {**chat, "logit_bias": {"99999999": 1}}, "logit_bias"),
            (s, "/v1/chat/completions", {**chat, "presence_penalty": 3}, "presence_penalty"),
            (s, "/v1/chat/completions", {**chat, "n": 64}, "n"),
            (s, "/v1/completions", {**comp, "gen_length": 32}, "gen_length"),
            (s, "/v1/completions", {**comp, "lacache": True}, "lacache"),
            (d, "/v1/completions", {**comp, "top_p": 0.5}, "top_p"),
            (d, "/v1/completions", {**comp, "top_k": 5}, "top_k"),
            (d, "/v1/completions", {**comp, "min_p": 0.1}, "min_p"),
            (d, "/v1/completions", {**comp, "ignore_eos": True}, "ignore_eos"),
            (d, "/v1/completions", {**comp, "logprobs": 2}, "logprobs"),
            (d, "/v1/completions", {**comp, "n": 2}, "n"),
        ]
        for srv, path, body, param in cases:
            st, b, _ = curl(srv, path, body)
            assert_error(st, b, 400, param=param)
            assert param in b["error"]["message"] or param == "response_format", b
        st, b, _ = curl(s, "/v1/chat/completions", {**chat, "response_format": {"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"type": "object", "anyOf": []}}}})
        assert "anyOf" in b["error"]["message"], b  # the unsupported keyword is named
        # what changes nothing is accepted: user, metadata, store false, stream_options
        st, b, _ = curl(s, "/v1/chat/completions", {**chat, "user": "u1", "metadata": {"k": "v"},
                                                     "store": False, "parallel_tool_calls": False})
        assert st == 200, b
    finally:
        assert s.stop() == 0
        assert d.stop() == 0


def test_tokenize_detokenize(real):
    """POST /tokenize and /detokenize in llama-server's shapes (there were none)."""
    st, b, _ = curl(real, "/tokenize", {"content": "Hello world"})
    assert st == 200 and b == {"tokens": [19556, 905]}, b  # SmolLM2's ids (HF tokenizers)
    st, b, _ = curl(real, "/tokenize", {"content": "Hello world<|im_end|>", "with_pieces": True})
    assert b == {"tokens": [{"id": 19556, "piece": "Hello"}, {"id": 905, "piece": " world"},
                            {"id": 2, "piece": "<|im_end|>"}]}, b
    st, b, _ = curl(real, "/tokenize", {"content": "<|im_end|>", "parse_special": False})
    assert len(b["tokens"]) > 3 and 2 not in b["tokens"], b
    text = "Un café, s'il vous plaît — 42 €"
    ids = curl(real, "/tokenize", {"content": text})[1]["tokens"]
    st, b, _ = curl(real, "/detokenize", {"tokens": ids})
    assert st == 200 and b == {"content": text}, b
    assert_error(*curl(real, "/detokenize", {"tokens": [1, 10 ** 8]})[:2], 400, param="tokens")
    assert_error(*curl(real, "/tokenize", {"text": "x"})[:2], 400, param="text")
    assert_error(*curl(real, "/tokenize", {"content": 5})[:2], 400, param="content")
    assert_error(*curl(real, "/tokenize", method="GET")[:2], 405)


def test_tokenize_detokenize_bounded_by_the_context():
    """/tokenize and /detokenize take at most 8 contexts of tokens (-c 256: 2,048 tokens; text up
    to 16 bytes a token, refused before tokenising); a 400 names the limit. Any size up to the
    16 MiB body was taken: 15 MiB of text took 9 s and answered 88 MB with pieces."""
    s = Server("synth:tiny-llama", "--ctx-size", "256")
    try:
        st, b, _ = curl(s, "/tokenize", {"content": "a" * (2048 * 16 + 1), "with_pieces": True})
        assert_error(st, b, 400, param="content")
        assert "32768 bytes" in b["error"]["message"] and "-c" in b["error"]["message"], b
        text = "".join(chr(ord("a") + (i * 7) % 26) for i in range(6000))
        n = len(curl(s, "/tokenize", {"content": text[:1500]})[1]["tokens"])
        assert 0 < n <= 2048, n
        st, b, _ = curl(s, "/tokenize", {"content": text})  # more tokens than 2,048 (one per ~1 byte)
        assert_error(st, b, 400, param="content")
        assert "2048 tokens" in b["error"]["message"], b
        st, b, _ = curl(s, "/detokenize", {"tokens": [5] * 2049})
        assert_error(st, b, 400, param="tokens")
        st, b, _ = curl(s, "/detokenize", {"tokens": [5] * 2048})
        assert st == 200, b
    finally:
        assert s.stop() == 0


def token_id(s, text):
    ids = curl(s, "/tokenize", {"content": text})[1]["tokens"]
    assert len(ids) == 1, (text, ids)
    return ids[0]


def test_logit_bias(real):
    """logit_bias +100 makes a token certain, -100 forbids the greedy one (it was ignored)."""
    prompt = "The capital of France is"
    base = curl(real, "/v1/completions", {"prompt": prompt, "max_tokens": 1, "temperature": 0})[1]
    first = base["choices"][0]["text"]
    st, b, _ = curl(real, "/v1/completions", {"prompt": prompt, "max_tokens": 1, "temperature": 0,
                                              "logit_bias": {str(token_id(real, first)): -100}})
    assert st == 200 and b["choices"][0]["text"] != first, (first, b)
    forced = token_id(real, " banana")
    st, b, _ = curl(real, "/v1/completions", {"prompt": prompt, "max_tokens": 5, "temperature": 1.0,
                                              "seed": SEED, "logit_bias": {str(forced): 100}})
    assert st == 200 and b["choices"][0]["text"] == " banana" * 5, b


def test_logprobs_chat_completions_and_streamed(real):
    """logprobs / top_logprobs (<= 20) on both endpoints, streamed too (they were refused): the
    tokens spell the text, the greedy token is the most likely one, the alternatives are sorted
    and are a distribution's, and the stream carries the same values."""
    msgs = [{"role": "user", "content": "Name three fruits."}]
    st, b, _ = curl(real, "/v1/chat/completions", {"messages": msgs, "max_tokens": 12, "temperature": 0,
                                                   "logprobs": True, "top_logprobs": 5})
    assert st == 200, b
    content = b["choices"][0]["logprobs"]["content"]
    assert len(content) == b["usage"]["completion_tokens"]
    assert "".join(e["token"] for e in content) == b["choices"][0]["message"]["content"]
    for e in content:
        tops = e["top_logprobs"]
        assert len(tops) == 5 and all(x["logprob"] <= 0 for x in tops)
        assert [x["logprob"] for x in tops] == sorted((x["logprob"] for x in tops), reverse=True)
        assert sum(math.exp(x["logprob"]) for x in tops) <= 1 + 1e-5
        assert e["token"] == tops[0]["token"] and abs(e["logprob"] - tops[0]["logprob"]) < 1e-6
        assert bytes(e["bytes"]).decode(errors="replace") == e["token"]
    # the stream: the same tokens and values, chunk by chunk
    streamed = []
    for ev in sse(real, "/v1/chat/completions", {"messages": msgs, "max_tokens": 12, "temperature": 0,
                                                "logprobs": True, "top_logprobs": 5, "stream": True}):
        lp = ev["choices"][0]["logprobs"] if ev["choices"] else None
        streamed += lp["content"] if lp else []
    assert [(e["token"], round(e["logprob"], 5)) for e in streamed] == \
           [(e["token"], round(e["logprob"], 5)) for e in content]
    # completions: tokens, token_logprobs, top_logprobs, text_offset
    st, b, _ = curl(real, "/v1/completions", {"prompt": "One, two, three,", "max_tokens": 8,
                                              "temperature": 0, "logprobs": 20})
    lp, text = b["choices"][0]["logprobs"], b["choices"][0]["text"]
    assert "".join(lp["tokens"]) == text and len(lp["top_logprobs"][0]) == 20
    offs = [sum(len(t.encode()) for t in lp["tokens"][:i]) for i in range(len(lp["tokens"]))]
    assert lp["text_offset"] == offs
    for tok, l, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
        assert abs(max(top.values()) - l) < 1e-6 and top[tok] == l


def test_logprobs_one_entry_per_token_on_a_byte_vocabulary():
    """One logprobs entry per generated token, on both endpoints and streamed, with a vocabulary
    whose tokens may add no text (special tokens left out of the text, empty pieces): a token
    that added nothing at the end of the text was dropped (4 tokens, 3 entries)."""
    s = Server("synth:tiny-llama", "--ctx-size", "256")
    try:
        for seed in range(SEED, SEED + 12):
            body = {"prompt": "hello", "max_tokens": 4, "ignore_eos": True, "seed": seed}
            b = curl(s, "/v1/completions", {**body, "logprobs": 2})[1]
            lp, n = b["choices"][0]["logprobs"], b["usage"]["completion_tokens"]
            assert n == 4 and len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["text_offset"]) == n, b
            text_bytes = len(b["choices"][0]["text"].encode())
            assert lp["text_offset"] == sorted(lp["text_offset"]) and lp["text_offset"][-1] <= text_bytes, b
            streamed = []
            for ev in sse(s, "/v1/completions", {**body, "logprobs": 2, "stream": True}):
                lps = ev["choices"][0]["logprobs"] if ev["choices"] else None
                streamed += lps["tokens"] if lps else []
            assert streamed == lp["tokens"], (seed, streamed, lp["tokens"])
            chat = {k: v for k, v in body.items() if k != "prompt"}
            b = curl(s, "/v1/chat/completions", {**chat, "messages": [{"role": "user", "content": "hi"}],
                                                 "logprobs": True})[1]
            assert len(b["choices"][0]["logprobs"]["content"]) == b["usage"]["completion_tokens"] == 4, b
    finally:
        assert s.stop() == 0


def complete_chars(b):
    """The longest prefix of the bytes b that does not end inside a UTF-8 character, decoded."""
    return codecs.getincrementaldecoder("utf-8")().decode(b, final=False)


def test_length_drops_a_cut_character(real):
    """A choice that max_tokens ends inside a character (byte-level BPE splits Japanese ones into
    tokens of 1 or 2 bytes) ends before it, on both endpoints, streamed or not: its first bytes
    came out as one U+FFFD each. Its tokens still count, in usage and logprobs, whose text_offset
    stays within the text."""
    asks = {"/v1/chat/completions": {"messages": [{"role": "user", "content": "日本語で自己紹介してください。"}]},
            "/v1/completions": {"prompt": "漢字：日本、東京、大阪、"}}
    seen = set()  # (bytes of the cut character, tokens they came in)
    for path, ask in asks.items():
        chat = "messages" in ask
        logprobs = {"logprobs": True if chat else 1}
        full = curl(real, path, {**ask, "max_tokens": 24, "temperature": 0, **logprobs})[1]
        lp = full["choices"][0]["logprobs"]
        # prefix[k]: the bytes of the first k tokens
        if chat:
            pieces = [bytes(e["bytes"]) for e in lp["content"]]
            prefix = [b"".join(pieces[:k]) for k in range(len(pieces) + 1)]
        else:
            text = full["choices"][0]["text"].encode()
            prefix = [text[:o] for o in lp["text_offset"]]
        # each way the model's tokens may cut a character, at its first max_tokens >= 4 (some text
        # before the cut)
        cuts = {}
        for k in range(4, len(prefix)):
            whole = len(complete_chars(prefix[k]).encode())
            tail = sum(len(prefix[j]) >= whole for j in range(k))
            if whole < len(prefix[k]):
                cuts.setdefault((len(prefix[k]) - whole, tail), k)
        assert cuts, (path, prefix)
        seen |= set(cuts)
        for k in cuts.values():
            want = complete_chars(prefix[k])
            assert "\ufffd" not in want and want, (path, k, want)
            body = {**ask, "max_tokens": k, "temperature": 0, **logprobs}
            b = curl(real, path, body)[1]
            c = b["choices"][0]
            text = c["message"]["content"] if chat else c["text"]
            assert c["finish_reason"] == "length" and text == want, (path, k, text, want)
            assert b["usage"]["completion_tokens"] == k, b
            if chat:
                assert [bytes(e["bytes"]) for e in c["logprobs"]["content"]] == pieces[:k], b
            else:
                offs = c["logprobs"]["text_offset"]
                assert len(offs) == k and offs == sorted(offs) and offs[-1] <= len(text.encode()), b
            deltas, finish = [], None
            for ev in sse(real, path, {**body, "stream": True}):
                for ch in ev["choices"]:
                    deltas.append((ch["delta"].get("content") or "") if chat else ch["text"])
                    finish = ch["finish_reason"] or finish
            assert "".join(deltas) == want and finish == "length", (path, k, deltas, want)
    # a character's 1 or 2 first bytes in one token, and 2 in two (text_offset past the text)
    assert {(1, 1), (2, 1), (2, 2)} <= seen, seen


def test_penalties(real):
    """presence / frequency penalties (OpenAI) and repetition_penalty (vLLM) change the logits
    as defined (they were ignored): at the second step, presence_penalty p moves every other
    token's log-probability by -log(1 - P(t1) (1 - e^-p)), t1 the first token; repetition_penalty
    makes the word the prompt repeats less likely."""
    body = {"prompt": "red green blue red green blue red green blue red green", "max_tokens": 2,
            "temperature": 0, "logprobs": 20}
    plain = curl(real, "/v1/completions", body)[1]["choices"][0]["logprobs"]
    t1 = plain["tokens"][0]
    p1 = math.exp(plain["token_logprobs"][0])
    for field in ("presence_penalty", "frequency_penalty"):
        pen = curl(real, "/v1/completions", {**body, field: 1.5})[1]["choices"][0]["logprobs"]
        assert pen["tokens"][0] == t1 and abs(pen["token_logprobs"][0] - plain["token_logprobs"][0]) < 1e-5
        # step 2 distribution under the penalty, from step 2 without it (same prefix)
        p_t1 = math.exp(plain["top_logprobs"][1].get(t1, -math.inf))
        shift = -math.log(1 - p_t1 * (1 - math.exp(-1.5)))
        both = set(plain["top_logprobs"][1]) & set(pen["top_logprobs"][1]) - {t1}
        assert len(both) >= 10, both
        for tok in both:
            got = pen["top_logprobs"][1][tok] - plain["top_logprobs"][1][tok]
            assert abs(got - shift) < 2e-3, (field, tok, got, shift)
        if t1 in pen["top_logprobs"][1]:
            got = pen["top_logprobs"][1][t1] - plain["top_logprobs"][1][t1]
            assert abs(got - (shift - 1.5)) < 2e-3, (field, got, shift - 1.5)
    assert p1 > 0
    rep = curl(real, "/v1/completions", {**body, "repetition_penalty": 3.0})[1]["choices"][0]["logprobs"]
    assert plain["tokens"][0] == " blue", plain
    assert rep["top_logprobs"][0].get(" blue", -99) < plain["top_logprobs"][0][" blue"] - 1, (rep, plain)


def test_n_choices(real):
    """n > 1: n choices, choice i drawn with seed + i, as the same request with n = 1 and that
    seed would be; streamed too (n was refused)."""
    body = {"prompt": "My favourite colour is", "max_tokens": 10, "temperature": 1.0, "seed": SEED}
    st, b, _ = curl(real, "/v1/completions", {**body, "n": 3})
    assert st == 200 and [c["index"] for c in b["choices"]] == [0, 1, 2], b
    alone = [curl(real, "/v1/completions", {**body, "seed": SEED + i})[1] for i in range(3)]
    assert [c["text"] for c in b["choices"]] == [a["choices"][0]["text"] for a in alone]
    assert b["usage"]["completion_tokens"] == sum(a["usage"]["completion_tokens"] for a in alone)
    texts, finished = {}, {}
    for ev in sse(real, "/v1/chat/completions", {"messages": [{"role": "user", "content": "Say a word."}],
                                                "max_tokens": 8, "temperature": 1.0, "seed": SEED, "n": 2,
                                                "stream": True}):
        for ch in ev["choices"]:
            texts[ch["index"]] = texts.get(ch["index"], "") + (ch["delta"].get("content") or "")
            if ch["finish_reason"]:
                finished[ch["index"]] = ch["finish_reason"]
    whole = curl(real, "/v1/chat/completions", {"messages": [{"role": "user", "content": "Say a word."}],
                                                "max_tokens": 8, "temperature": 1.0, "seed": SEED, "n": 2})[1]
    assert texts == {c["index"]: c["message"]["content"] for c in whole["choices"]}
    assert set(finished) == {0, 1}


def test_response_format_json(real):
    """response_format json_object and json_schema constrain decoding: every text parses and
    fits its schema (they were ignored: SmolLM2 answers in prose); the usage chunk of a stream
    carries cached_tokens."""
    ask = [{"role": "user", "content": "Describe a cat."}]
    for seed in range(SEED, SEED + 3):
        # (at worst the model nests objects to the depth limit, then must close them: 400 is room)
        b = curl(real, "/v1/chat/completions", {"messages": ask, "max_tokens": 400, "temperature": 0.8,
                                                "seed": seed, "response_format": {"type": "json_object"}})[1]
        assert b["choices"][0]["finish_reason"] == "stop", b
        assert isinstance(json.loads(b["choices"][0]["message"]["content"]), dict), b
    schema = {"type": "object", "properties": {
        "name": {"type": "string"}, "age": {"type": "integer"},
        "colour": {"enum": ["black", "white", "orange"]},
        "toys": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
        "indoor": {"type": "boolean"}}, "required": ["name", "age", "colour"]}
    fmt = {"type": "json_schema", "json_schema": {"name": "cat", "schema": schema, "strict": True}}
    for seed in range(SEED, SEED + 3):
        b = curl(real, "/v1/chat/completions", {"messages": ask, "max_tokens": 400, "temperature": 0.8,
                                                "seed": seed, "response_format": fmt})[1]
        assert b["choices"][0]["finish_reason"] == "stop", b
        doc = json.loads(b["choices"][0]["message"]["content"])
        assert set(doc) <= set(schema["properties"]) and {"name", "age", "colour"} <= set(doc), doc
        assert isinstance(doc["name"], str) and isinstance(doc["age"], int) and not isinstance(doc["age"], bool)
        assert doc["colour"] in ("black", "white", "orange")
        assert all(isinstance(t, str) for t in doc.get("toys", [])) and len(doc.get("toys", [])) <= 3
    # streamed: the deltas join into a valid document; the usage chunk has cached_tokens
    deltas, usage = [], None
    for ev in sse(real, "/v1/chat/completions", {"messages": ask, "max_tokens": 160, "temperature": 0,
                                                "response_format": fmt, "stream": True,
                                                "stream_options": {"include_usage": True}}):
        usage = ev.get("usage") or usage
        deltas += [c["delta"].get("content") or "" for c in ev["choices"]]
    json.loads("".join(deltas))
    assert usage and usage["prompt_tokens_details"]["cached_tokens"] > 0, usage


def sse(s, path, body):
    """The events of a streaming request, parsed (until [DONE])."""
    st, text, _ = curl(s, path, body)
    assert st == 200, text
    events = [line[6:] for line in text.split("\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]", events[-3:]
    return [json.loads(e) for e in events[:-1]]
