"""test_server_robust.py — `lazyinfer serve` against careless and hostile clients (docs/SERVER.md
"Limits, connections, shutdown"): bounded work per request, diffusion requests that share the
engine and stop when their client leaves. Each test names the failure of the server it guards
against; every one failed on the server before the fix (issue 19).

synth:tiny-llama and synth:tiny-llada (random weights: the text does not matter, the timing and
the status codes do). Timing checks compare against the failure they guard with a wide margin
(the machine may be loaded): a bound of tens of seconds where the broken server takes minutes.
"""
import json
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "server"))
from harness import Server, assert_error, client, curl, open_stream  # noqa: E402
from seeding import li_seed  # noqa: E402

SEED = li_seed("test_server_robust.py")


def wait_for(pred, timeout, what):
    """Polls pred() until it holds; fails naming `what` after `timeout` seconds."""
    deadline = time.time() + timeout
    while not pred():
        assert time.time() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.05)


# ---- 1. bounded work -----------------------------------------------------------------------------

def test_max_gen_and_context_autoregressive():
    """max_tokens above --max-gen is a 400 naming the limit (it was accepted up to the context)."""
    s = Server("synth:tiny-llama", "--max-gen", "64", "--ctx-size", "512")
    try:
        st, b, _ = curl(s, "/v1/completions", {"prompt": "a", "max_tokens": 65})
        assert_error(st, b, 400, param="max_tokens")
        assert "64" in b["error"]["message"] and "--max-gen" in b["error"]["message"], b
        st, b, _ = curl(s, "/v1/completions", {"prompt": "a", "max_tokens": 64, "ignore_eos": True})
        assert st == 200 and b["usage"]["completion_tokens"] == 64, b
        # the context: prompt + max_tokens over -c is a 400 with the context in the message
        st, b, _ = curl(s, "/v1/completions", {"prompt": "x " * 300, "max_tokens": 64})
        assert_error(st, b, 400, code="context_length_exceeded")
        assert "512" in b["error"]["message"], b
    finally:
        assert s.stop() == 0


def test_diffusion_limits():
    """Diffusion requests: gen_length within --max-gen and the context (-c, which was ignored, and
    /v1/models said n_ctx 0), steps <= gen_length (both were accepted up to 2^20)."""
    s = Server("synth:tiny-llada", "--ctx-size", "256", "--max-gen", "192")
    try:
        models = curl(s, "/v1/models")[1]
        assert models["data"][0]["n_ctx"] == 256, models
        t0 = time.time()
        st, b, _ = curl(s, "/v1/completions", {"prompt": "x", "gen_length": 1000000, "steps": 1000000})
        assert_error(st, b, 400, param="gen_length")
        assert "192" in b["error"]["message"] and "--max-gen" in b["error"]["message"], b
        assert time.time() - t0 < 10, "the refusal must not wait for any decoding"
        st, b, _ = curl(s, "/v1/completions", {"prompt": "x", "gen_length": 32, "steps": 64})
        assert_error(st, b, 400, param="steps")
        assert "32" in b["error"]["message"], b
        st, b, _ = curl(s, "/v1/completions", {"prompt": "x", "max_tokens": 500})
        assert_error(st, b, 400, param="max_tokens")
        # the prompt counts: 150 prompt tokens (the byte tokenizer: one per byte) + 128 > 256
        st, b, _ = curl(s, "/v1/completions", {"prompt": "y" * 150, "gen_length": 128, "block_length": 32})
        assert_error(st, b, 400, code="context_length_exceeded")
        assert "256" in b["error"]["message"], b
        st, b, _ = curl(s, "/v1/completions", {"prompt": "y" * 100, "gen_length": 128, "block_length": 32,
                                                "steps": 32})
        assert st == 200, b
    finally:
        assert s.stop() == 0


def long_diffusion(s, prompt):
    """A diffusion stream of 1024 tokens in 1024 steps (over a minute alone on tiny-llada on one
    core), open until its socket is closed."""
    return open_stream(s, "/v1/completions", {"prompt": prompt, "gen_length": 1024, "block_length": 32,
                                              "steps": 1024, "stream": True})


def test_diffusion_shares_the_engine_and_stops_when_its_client_leaves():
    """A long diffusion request no longer holds the engine until its end: requests that come later
    decode alongside it (batches take turns by step), it counts in the gauges, and it stops
    between steps when its client leaves (it ran to the end before, blocking everyone)."""
    s = Server("synth:tiny-llada", "--max-batch", "4")
    try:
        c = client(s)
        body = {"gen_length": 64, "block_length": 32, "steps": 64}
        alone = c.completions.create(model="synth:tiny-llada", prompt="medium", temperature=0,
                                     extra_body=body).choices[0].text
        before = s.metrics()
        sock = long_diffusion(s, "long")
        m = s.metrics()
        assert m["lazyinfer_requests_running"] >= 1, "a decoding diffusion request is not counted"
        t0 = time.time()
        beside = c.completions.create(model="synth:tiny-llada", prompt="medium", temperature=0,
                                      extra_body=body).choices[0].text
        took = time.time() - t0
        # alone it takes ~1 s; behind the long request it waited over a minute
        assert took < 40, f"a short request waited {took:.1f} s behind a long one"
        assert beside == alone, "decoding beside another batch changed the tokens"
        sock.close()
        t0 = time.time()
        r = c.completions.create(model="synth:tiny-llada", prompt="after", extra_body={"gen_length": 32})
        took = time.time() - t0
        assert r.choices[0].finish_reason in ("stop", "length")
        assert took < 20, f"the request after a departed client waited {took:.1f} s"
        wait_for(lambda: s.metrics()["lazyinfer_requests_running"] == 0, 20, "the gauges at rest")
        m = s.metrics()
        assert m["lazyinfer_requests_cancelled_total"] >= before["lazyinfer_requests_cancelled_total"] + 1
    finally:
        assert s.stop() == 0
