"""test_server_robust.py — `lazyinfer serve` against careless and hostile clients (docs/SERVER.md
"Limits, connections, shutdown"): bounded work per request, diffusion requests that share the
engine and stop when their client leaves. Each test names the failure of the server it guards
against; every one failed on the server before the fix (issue 19).

synth:tiny-llama and synth:tiny-llada (random weights: the text does not matter, the timing and
the status codes do). Timing checks compare against the failure they guard with a wide margin
(the machine may be loaded): a bound of tens of seconds where the broken server takes minutes.
"""
import contextlib
import json
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "server"))
from harness import ROOT, Server, assert_error, binary, client, curl, open_stream  # noqa: E402
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


def test_n_choices_leave_rows_for_others():
    """A request's choices take at most half the batch rows: a 4-token request sent while an
    n = 8 request decodes on --max-batch 8 finishes while that one still runs (it waited for all
    8 choices to end: 11.4 s behind max_tokens 2048 on the default model). Ordering, not time:
    the big request's choices all end at the same step (ignore_eos), so on the old server the
    short one could only start after it; the big one's choices still equal their n = 1 runs."""
    s = Server("synth:tiny-llama", "--max-batch", "8")
    sock = None
    try:
        big = {"prompt": "many choices", "max_tokens": 600, "ignore_eos": True, "n": 8, "seed": SEED}
        sock = open_stream(s, "/v1/completions", {**big, "stream": True})
        done = threading.Event()

        def read():
            got = b""
            sock.settimeout(120)
            while b"data: [DONE]" not in got:
                try:
                    chunk = sock.recv(65536)
                except OSError:
                    break
                if not chunk:
                    break
                got += chunk
            done.set()
        threading.Thread(target=read, daemon=True).start()
        st, b, _ = curl(s, "/v1/completions", {"prompt": "short", "max_tokens": 4, "ignore_eos": True})
        assert st == 200 and b["usage"]["completion_tokens"] == 4, b
        assert not done.is_set(), "the short request waited for the n = 8 request to end"
        assert done.wait(120), "the n = 8 request did not end"
        # the choices started later draw as they would alone
        small = {**big, "max_tokens": 6, "stream": False}
        whole = curl(s, "/v1/completions", small)[1]
        alone = [curl(s, "/v1/completions", {**small, "n": 1, "seed": SEED + i})[1] for i in range(8)]
        assert [c["text"] for c in whole["choices"]] == [a["choices"][0]["text"] for a in alone]
        assert whole["usage"]["completion_tokens"] == 8 * 6, whole
        # a client that leaves while choices wait to start: they never start, nothing stays held
        before = s.metrics()["lazyinfer_generation_tokens_total"]
        open_stream(s, "/v1/completions", {**big, "stream": True}).close()
        m = s.wait_idle()
        assert m["lazyinfer_requests_running"] == 0 and m["lazyinfer_requests_waiting"] == 0, m
        assert m["lazyinfer_kv_pages_in_use"] == m["lazyinfer_kv_pages_cached"], m
        assert m["lazyinfer_generation_tokens_total"] - before < 8 * 600 / 2, m
        st, b, _ = curl(s, "/v1/completions", {"prompt": "after", "max_tokens": 2, "n": 8})
        assert st == 200 and len(b["choices"]) == 8, b
    finally:
        if sock:
            sock.close()
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


# ---- 2. connections --------------------------------------------------------------------------------

def raise_fd_limit(n):
    """This process holds n sockets at once: raise its descriptor limit (soft up to hard)."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, n + 256))
    if want > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    if want < n + 256:
        pytest.skip(f"needs {n + 256} file descriptors, the hard limit is {hard}")


def connect_address(s, address):
    """A socket to the server from the loopback address `address` (127.x.y.z)."""
    sock = socket.socket()
    sock.bind((address, 0))
    sock.settimeout(30)
    sock.connect(("127.0.0.1", s.port))
    return sock


def connect_from(s, i, per_address=100):
    """A socket to the server from loopback address 127.0.1.(1 + i // per_address): each address
    stays under the per-client cap, as a crowd of clients would."""
    return connect_address(s, f"127.0.1.{1 + i // per_address}")


def recv_until(sock, marker):
    """What sock receives until `marker` has come (the server must not close before)."""
    got = b""
    while marker not in got:
        chunk = sock.recv(4096)
        assert chunk, got
        got += chunk
    return got


def health_seconds(s):
    """Seconds a new client (127.0.0.1, its own connection) takes to get 200 from /health."""
    t0 = time.perf_counter()
    with socket.create_connection(("127.0.0.1", s.port), timeout=10) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        got = recv_until(sock, b"\r\n\r\n")
    assert got.startswith(b"HTTP/1.1 200"), got
    return time.perf_counter() - t0


def test_idle_and_slow_clients_cannot_lock_others_out():
    """The check of issue 19: N idle sockets and M clients sending their headers a byte at a time
    are open, and a new client still gets /health within 1 s (1,000 idle sockets locked every new
    client out for up to 600 s). N = LI_CONN_IDLE (default 2000), M = LI_CONN_SLOW (default 50)."""
    import os
    n_idle = int(os.environ.get("LI_CONN_IDLE", "2000"))
    n_slow = int(os.environ.get("LI_CONN_SLOW", "50"))
    raise_fd_limit(n_idle + n_slow + 64)
    s = Server("synth:tiny-llama", "--ctx-size", "256")
    socks = []
    stop = threading.Event()
    try:
        for i in range(n_idle):
            socks.append(connect_from(s, i))
        slow = [connect_from(s, n_idle + 100 + i, per_address=25) for i in range(n_slow)]
        for x in slow:
            x.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")

        def trickle():  # one header byte per client every 0.2 s: never idle, never done
            while not stop.wait(0.2):
                for x in slow:
                    try:
                        x.sendall(b"X")
                    except OSError:
                        pass
        t = threading.Thread(target=trickle, daemon=True)
        t.start()
        socks += slow
        # every one of them is held by the server (none was refused)
        wait_for(lambda: s.metrics()["lazyinfer_connections_open"] >= n_idle + n_slow, 60,
                 f"{n_idle + n_slow} connections open")
        took = [health_seconds(s) for _ in range(3)]
        assert max(took) < 1.0, f"/health took {took} s beside {n_idle} idle and {n_slow} slow clients"
        st, b, _ = curl(s, "/v1/completions", {"prompt": "still served", "max_tokens": 4})
        assert st == 200, b
    finally:
        stop.set()
        for x in socks:
            x.close()
        assert s.stop() == 0


def closed_within(sock, seconds):
    """True when the server closes sock (end of stream or reset) within `seconds`; what it sends
    before that is read and dropped."""
    sock.settimeout(0.2)
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            if sock.recv(4096) == b"":
                return True
        except socket.timeout:
            continue
        except OSError:
            return True
    return False


def test_deadlines_idle_headers_body():
    """Deadlines per phase (--idle-timeout, --header-timeout, --body-timeout): a silent socket, a
    client sending its headers or its body a byte at a time, and a kept-alive connection left
    idle are closed; an answer that takes longer than the idle timeout is still sent (before, a
    silent socket or a trickling client held its connection for 600 s or forever)."""
    s = Server("synth:tiny-llada", "--idle-timeout", "2", "--header-timeout", "2", "--body-timeout", "2")
    stop = threading.Event()
    try:
        silent = socket.create_connection(("127.0.0.1", s.port))
        heads = socket.create_connection(("127.0.0.1", s.port))
        heads.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
        body = socket.create_connection(("127.0.0.1", s.port))
        body.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000\r\n\r\n{")
        kept = socket.create_connection(("127.0.0.1", s.port))
        kept.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert kept.recv(4096).startswith(b"HTTP/1.1 200")

        def trickle():  # one byte every 0.2 s: MHD's inactivity timeout alone never fires
            while not stop.wait(0.2):
                for x, byte in ((heads, b"X"), (body, b" ")):
                    try:
                        x.sendall(byte)
                    except OSError:
                        pass
        threading.Thread(target=trickle, daemon=True).start()
        for name, x in (("silent", silent), ("slow headers", heads), ("slow body", body),
                        ("kept alive", kept)):
            assert closed_within(x, 20), f"the {name} connection is still open"
        # the trickling two can only have been closed by the guard (silent ones may go to
        # libmicrohttpd's own inactivity timeout, the same 2 s)
        m = s.metrics()
        assert m["lazyinfer_connections_timed_out_total"] >= 2, m
        # 256 tokens in 256 steps take seconds, longer than the idle timeout: still answered
        st, b, _ = curl(s, "/v1/completions", {"prompt": "x", "gen_length": 256})
        assert st == 200, b
    finally:
        stop.set()
        assert s.stop() == 0


def raw_headers(s, head, key=None):
    """Sends only a request's head (no body) and returns the status line the server answers with
    within 10 s (socket.timeout if none)."""
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=10)
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    sock.sendall(head.replace("\r\n\r\n", f"\r\n{auth}\r\n").encode())
    got = b""
    while b"\r\n" not in got:
        chunk = sock.recv(4096)
        assert chunk, "closed without an answer"
        got += chunk
    sock.close()
    return got.split(b"\r\n")[0].decode()


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:")) / 1024


def test_key_size_and_type_checked_before_the_body():
    """The API key, Content-Length against the body limit (413) and Content-Type (415) are answered
    from the headers, before any body is read: unauthenticated clients made the server buffer up
    to 16 MiB each (16 connections: +258 MB), and Content-Type was never checked."""
    key = "sk-robust-%d" % SEED
    s = Server("synth:tiny-llama", "--ctx-size", "256", api_key=key)
    try:
        head = ("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                "Content-Length: 10000000\r\n\r\n")
        assert raw_headers(s, head).startswith("HTTP/1.1 401"), "no 401 before the body"
        big = head.replace("10000000", str(20 << 20))
        assert raw_headers(s, big, key=key).startswith("HTTP/1.1 413"), "no 413 before the body"
        for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; b=x"):
            st, b, _ = curl(s, "/v1/completions", b'{"prompt": "a", "max_tokens": 2}', key=key,
                            headers=[f"Content-Type: {ctype}"])
            assert_error(st, b, 415, code="unsupported_media_type")
        st, b, _ = curl(s, "/v1/completions", b'{"prompt": "a", "max_tokens": 2}', key=key,
                        headers=["Content-Type: application/json; charset=utf-8"])
        assert st == 200, b
        # 16 clients without the key push 8 MB each: the server's memory does not follow
        rss0 = rss_mb(s.proc.pid)
        payload = b'{"prompt": "' + b"a" * (8 << 20) + b'"}'

        def push(i):
            try:
                with socket.create_connection(("127.0.0.1", s.port), timeout=30) as x:
                    x.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                              + f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
                    x.recv(4096)
            except OSError:
                pass  # the server answered 401 and closed without reading: the point
        threads = [threading.Thread(target=push, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        grew = rss_mb(s.proc.pid) - rss0
        assert grew < 48, f"the server's RSS grew by {grew:.0f} MB for unauthenticated bodies"
    finally:
        assert s.stop() == 0


def raw_exchange(s, data, timeout=10):
    """Sends raw bytes on a new connection; returns (status, JSON body or text, seconds, closed):
    the answer read until the server closes the connection (closed=True) or `timeout` passes."""
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=timeout)
    t0 = time.time()
    sock.sendall(data)
    got = b""
    closed = False
    sock.settimeout(0.2)
    while time.time() - t0 < timeout:
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            continue
        except OSError:
            chunk = b""
        if not chunk:
            closed = True
            break
        got += chunk
    took = time.time() - t0
    sock.close()
    head, _, body = got.partition(b"\r\n\r\n")
    status = int(head.split()[1]) if head.startswith(b"HTTP/1.1 ") else None
    try:
        return status, json.loads(body), took, closed
    except ValueError:
        return status, body.decode(errors="replace"), took, closed


def test_ambiguous_framing_is_a_json_4xx():
    """Request framing (RFC 9112 §6.3): two Content-Length headers, Content-Length with
    Transfer-Encoding, or a transfer coding other than chunked are a 400 and the connection
    closes, so a smuggled second request is never read (all were answered 200, the body taken by
    one of the headers); a chunked body is a 411 at the headers (a 7fffffff chunk held the
    connection until --body-timeout, a 1 MB chunk extension got libmicrohttpd's HTML 500)."""
    s = Server("synth:tiny-llama", "--ctx-size", "256", "--body-timeout", "30")
    try:
        body = b'{"prompt": "a", "max_tokens": 2}'
        smuggled = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
        head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        cases = [
            (b"two lengths", head + b"Content-Length: %d\r\nContent-Length: %d\r\n\r\n"
             % (len(body), len(body) + len(smuggled)) + body + smuggled, 400),
            (b"length and chunked", head + b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n"
             % (len(body) + 7) + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n", 400),
            (b"gzip, chunked", head + b"Transfer-Encoding: gzip, chunked\r\n\r\n%x\r\n" % len(body)
             + body + b"\r\n0\r\n\r\n", 400),
            (b"7fffffff chunk", head + b"Transfer-Encoding: chunked\r\n\r\n7fffffff\r\n{", 411),
            (b"1 MB chunk extension", head + b"Transfer-Encoding: chunked\r\n\r\n10;"
             + b"x" * (1 << 20) + b"\r\n", 411),
        ]
        for name, data, want in cases:
            st, b, took, closed = raw_exchange(s, data)
            assert st is not None, (name, b)
            assert_error(st, b, want)
            assert closed and took < 5, f"{name}: the connection stayed open {took:.1f} s"
            assert "/v1/models" not in json.dumps(b), (name, b)
        st, b, _ = curl(s, "/v1/completions", body)
        assert st == 200, b
    finally:
        assert s.stop() == 0


def test_bearer_scheme_is_case_insensitive():
    """`Authorization: bearer KEY` is the key (RFC 9110 §11.1: the scheme is case-insensitive;
    it was a 401); a wrong key under any spelling is still a 401."""
    key = "sk-bearer-%d" % SEED
    s = Server("synth:tiny-llama", "--ctx-size", "256", api_key=key)
    try:
        for scheme in ("Bearer", "bearer", "BEARER", "bEaReR"):
            st, b, _ = curl(s, "/v1/models", headers=[f"Authorization: {scheme} {key}"])
            assert st == 200, (scheme, b)
            st, b, _ = curl(s, "/v1/models", headers=[f"Authorization: {scheme} {key}x"])
            assert_error(st, b, 401, code="invalid_api_key")
        st, b, _ = curl(s, "/v1/models", headers=[f"Authorization: Basic {key}"])
        assert_error(st, b, 401, code="invalid_api_key")
    finally:
        assert s.stop() == 0


def test_per_client_cap_and_shedding():
    """--max-connections-per-client sheds one address's oldest idle connections for its new ones;
    past 15/16 of --max-connections the idle connections nearest their deadline are shed, so a
    new client is still served when idle sockets from many addresses fill the server."""
    s = Server("synth:tiny-llama", "--ctx-size", "256", "--max-connections", "64",
               "--max-connections-per-client", "8")
    socks = []
    try:
        own = []
        for i in range(12):  # one address, cap 8
            own.append(connect_from(s, i, per_address=100))
            wait_for(lambda: s.metrics()["lazyinfer_connections_open"] >= min(i + 1, 8), 20,
                     f"{i + 1} connections")
        socks += own
        closed = [closed_within(x, 0.5) for x in own]
        assert closed == [True] * 4 + [False] * 8, f"closed: {closed}, want the 4 oldest"
        for i in range(120):  # 8 per address, 15 addresses: twice the cap
            socks.append(connect_from(s, 1000 + i, per_address=8))
        took = health_seconds(s)
        assert took < 1.0, f"/health took {took:.2f} s with the server full of idle sockets"
        m = s.metrics()
        assert m["lazyinfer_connections_shed_total"] > 0 and m["lazyinfer_connections_open"] <= 64, m
    finally:
        for x in socks:
            x.close()
        assert s.stop() == 0


def busy_from(s, address, headers=""):
    """A connection from `address` (with extra header lines) that the server holds busy: a POST
    whose headers it took (its "100 Continue" came) and whose body never comes (until
    --body-timeout); returns its socket."""
    sock = connect_address(s, address)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 + headers.encode() + b"Expect: 100-continue\r\nContent-Length: 1000\r\n\r\n")
    got = recv_until(sock, b"\r\n\r\n")
    assert got.startswith(b"HTTP/1.1 100"), got
    return sock


def health_from(s, address, headers=""):
    """GET /health on a new connection from `address`: (status or None when the connection ended
    without an answer, JSON body or text, response headers, whether the server closed the
    connection after the answer)."""
    sock = connect_address(s, address)
    try:
        sock.sendall(f"GET /health HTTP/1.1\r\nHost: x\r\n{headers}\r\n".encode())
        got = b""
        while b"\r\n\r\n" not in got:
            chunk = sock.recv(4096)
            if not chunk:
                return None, got, {}, True
            got += chunk
        head, _, body = got.partition(b"\r\n\r\n")
        hdrs = {k.strip().lower(): v.strip() for k, _, v in
                (l.partition(":") for l in head.decode().split("\r\n")[1:])}
        while len(body) < int(hdrs.get("content-length", 0)):
            body += sock.recv(4096)
        return int(head.split()[1]), json.loads(body), hdrs, closed_within(sock, 0.5)
    except ConnectionResetError:
        return None, b"", {}, True
    finally:
        sock.close()


@contextlib.contextmanager
def tiny_server_and_sockets(*args):
    """A synth:tiny-llama server started with args, and a list for the sockets the test opens:
    all are closed, then the server stopped (exiting 0), however the test ends."""
    s = Server("synth:tiny-llama", *args)
    socks = []
    try:
        yield s, socks
    finally:
        for x in socks:
            x.close()
        assert s.stop() == 0


def test_per_client_cap_sheds_idle_then_answers_503():
    """At --max-connections-per-client, a client's new connection sheds that client's oldest idle
    one; when all of them are busy, its request gets a JSON 503 with Retry-After and the
    connection closes (it was reset at once: on 127.0.0.1 every local client shares the cap).
    Refusals are counted in /metrics and logged as one summary line, not one line each (845 lines
    for one burst)."""
    with tiny_server_and_sockets("--max-connections-per-client", "4") as (s, socks):
        for i in range(4):
            socks.append(connect_address(s, "127.0.1.1"))
            wait_for(lambda: s.metrics()["lazyinfer_connections_open"] >= i + 1, 20, "idle connections")
        st, b, _, _ = health_from(s, "127.0.1.1")
        assert st == 200, b
        assert closed_within(socks[0], 2), "the client's oldest idle connection was not shed"
        assert not any(closed_within(x, 0.3) for x in socks[1:4])
        socks += [busy_from(s, "127.0.2.1") for _ in range(4)]
        before = s.metrics()["lazyinfer_connections_refused_total"]
        for _ in range(20):
            st, b, h, closed = health_from(s, "127.0.2.1")
            assert st is not None, "the connection was reset without an answer"
            assert_error(st, b, 503, code="overloaded")
            assert h.get("retry-after") == "1", h
            assert "--max-connections-per-client" in b["error"]["message"], b
            assert closed, "the refused connection stayed open"
        st, b, _, _ = health_from(s, "127.0.2.2")  # another client is not affected
        assert st == 200, b
        m = s.metrics()
        assert m["lazyinfer_connections_refused_total"] == before + 20, m
        wait_for(lambda: "connections refused" in s.log_tail(400), 5, "the refusal summary line")
        log = s.log_tail(400)
        assert log.count("connections refused") == 1, log
        assert "GET /health 503" not in log, log


def test_trusted_proxy_counts_clients_by_x_forwarded_for():
    """--trusted-proxy ADDR: that address's connections are not capped as one client; each request
    counts for the right-most X-Forwarded-For address that is not the proxy, so a client over
    --max-connections-per-client behind the proxy gets a JSON 503 and the others are served
    (through a proxy every client shared the proxy's address: the 257th stream was reset)."""
    args = ("--max-connections-per-client", "2", "--trusted-proxy", "127.0.3.1")
    with tiny_server_and_sockets(*args) as (s, socks):
        xff = "X-Forwarded-For: {}\r\n"
        # the proxy's own connections: more than the cap, idle, none shed
        idle = [connect_address(s, "127.0.3.1") for _ in range(5)]
        busy = [busy_from(s, "127.0.3.1", xff.format("10.0.0.1")) for _ in range(2)]
        socks += idle + busy
        assert not any(closed_within(x, 0.3) for x in idle), "the proxy's idle connections were shed"
        for forwarded, want in (("10.0.0.1", 503), ("10.0.0.9, 10.0.0.1", 503),
                                ("10.0.0.1, 127.0.3.1", 503), ("10.0.0.1, 10.0.0.2", 200),
                                ("10.0.0.2", 200), ("not-an-address", 200)):
            st, b, _, closed = health_from(s, "127.0.3.1", xff.format(forwarded))
            assert st == want, (forwarded, st, b)
            if want == 503:
                assert_error(st, b, 503, code="overloaded")
                assert not closed, "the proxy's connection was closed for one client"
        # the same client without the proxy is its own address, not capped by the proxied one
        st, b, _, _ = health_from(s, "127.0.3.2", xff.format("10.0.0.1"))
        assert st == 200, b
        for x in busy:
            x.close()
        wait_for(lambda: health_from(s, "127.0.3.1", xff.format("10.0.0.1"))[0] == 200, 20,
                 "the proxied client's requests to end")


# ---- 3. tokenization off the engine thread, once per request ---------------------------------------

def test_huge_prompt_does_not_stall_streams():
    """A 15 MB chat without max_tokens is refused (400) without stalling a running stream: it was
    tokenised on the engine thread, up to 9 times (the default max_tokens halved until it fit),
    and every stream stopped for seconds meanwhile."""
    model = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not model.exists():
        pytest.skip("default model not fetched (make setup)")
    s = Server(str(model), "--ctx-size", "2048")
    try:
        sock = open_stream(s, "/v1/completions", {"prompt": "Tell me a story", "max_tokens": 1500,
                                                  "ignore_eos": True, "stream": True})
        arrivals = []

        def read():
            sock.settimeout(60)
            while True:
                try:
                    chunk = sock.recv(65536)
                except OSError:
                    return
                if not chunk:
                    return
                arrivals.append(time.perf_counter())
        threading.Thread(target=read, daemon=True).start()
        wait_for(lambda: len(arrivals) >= 10, 60, "the stream's first events")
        r = random.Random(f"{SEED}-huge")
        words = "apple river stone cloud garden window silver music paper candle".split()
        huge = " ".join(r.choice(words) for _ in range(15_000_000 // 6))
        t0 = time.perf_counter()
        st, b, _ = curl(s, "/v1/chat/completions", {"messages": [{"role": "user", "content": huge}]})
        t1 = time.perf_counter()
        assert_error(st, b, 400, code="context_length_exceeded")
        time.sleep(0.5)
        during = [b - a for a, b in zip(arrivals, arrivals[1:]) if t0 <= b <= t1 + 0.3]
        assert during, "the stream sent nothing while the prompt was refused"
        # one event per token every ~20 ms; the old server stalled it for several seconds
        assert max(during) < 2.5, f"the stream stalled {max(during):.2f} s while a 15 MB prompt was refused"
        sock.close()
    finally:
        assert s.stop() == 0


def test_default_max_tokens_fills_the_context():
    """Without max_tokens a chat gets what the context leaves, up to --max-tokens, from one
    tokenisation (the default was halved and the prompt tokenised again until it fit)."""
    s = Server("synth:tiny-llama", "--ctx-size", "512")
    try:
        text = "".join(random.Random(f"{SEED}-fill").choice("abcdefgh ") for _ in range(400))
        st, b, _ = curl(s, "/v1/chat/completions", {"messages": [{"role": "user", "content": text}],
                                                     "ignore_eos": True})
        assert st == 200, b
        u = b["usage"]
        assert u["prompt_tokens"] > 256, u
        assert u["completion_tokens"] == 512 - u["prompt_tokens"], u
        assert b["choices"][0]["finish_reason"] == "length", b
    finally:
        assert s.stop() == 0


def test_cancelled_requests_log_their_counts():
    """A request whose client leaves is logged with its prompt and the tokens generated until
    then, streamed or not (both were logged as "prompt 0, generated 0": the counts came only from
    the engine's result, collected after the log line)."""
    s = Server("synth:tiny-llama")
    try:
        body = {"prompt": "a cancelled request", "max_tokens": 2000, "ignore_eos": True}
        got = []
        sock = open_stream(s, "/v1/completions", {**body, "stream": True}, received=got)
        while got[0].count(b"data: ") < 5:
            got[0] += sock.recv(4096)
        sock.close()

        def gone_lines():
            return [l for l in s.log_tail(400).splitlines() if "client gone" in l]
        # the streamed request is cancelled before the count below starts: until then its own
        # tokens raised the total too, and the plain request could be closed after 2 of its own
        wait_for(lambda: len(gone_lines()) >= 1, 30, "the streamed request's 'client gone' line")
        before = s.metrics()["lazyinfer_generation_tokens_total"]
        data = json.dumps(body).encode()
        plain = socket.create_connection(("127.0.0.1", s.port))
        plain.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      + f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
        wait_for(lambda: s.metrics()["lazyinfer_generation_tokens_total"] >= before + 10, 30,
                 "the non-streaming request's first tokens")
        plain.close()
        wait_for(lambda: len(gone_lines()) >= 2, 30, "two 'client gone' log lines")
        for line in gone_lines():
            m = re.search(r"prompt (\d+), generated (\d+)", line)
            assert m, line
            assert int(m.group(1)) >= 2 and 5 <= int(m.group(2)) < 2000, line
    finally:
        assert s.stop() == 0


# ---- 4. no silent port sharing ---------------------------------------------------------------------

def test_port_in_use_is_an_error():
    """A second server on a port in use fails with a clear error (port reuse was always on: it
    started and took half the clients; a keyed and an unkeyed server alternated 401 / 200);
    --reuse-port shares a port on purpose. An IPv6 host prints a valid URL."""
    a = Server("synth:tiny-llama", "--ctx-size", "256")
    try:
        second = subprocess.Popen([binary(), "serve", "-m", "synth:tiny-llama", "--port", str(a.port),
                                   "--api-key", "sk-other"], stderr=subprocess.PIPE, text=True)
        try:
            err = second.communicate(timeout=30)[1]
        except subprocess.TimeoutExpired:
            second.kill()
            second.communicate()
            pytest.fail("a second server started on a port in use")
        assert second.returncode != 0 and "in use" in err and "--reuse-port" in err, err
        assert all(curl(a, "/v1/models")[0] == 200 for _ in range(20)), "another server answers too"
    finally:
        assert a.stop() == 0
    b = Server("synth:tiny-llama", "--ctx-size", "256", "--reuse-port")
    try:
        c = Server("synth:tiny-llama", "--ctx-size", "256", "--reuse-port", port=b.port)
        assert c.alive() and curl(c, "/health")[0] == 200
        assert c.stop() == 0
    finally:
        assert b.stop() == 0
    try:
        socket.create_server(("::1", 0), family=socket.AF_INET6).close()
    except OSError:
        return  # no IPv6 loopback here
    v6 = Server("synth:tiny-llama", "--ctx-size", "256", host="::1")
    try:
        assert f"http://[::1]:{v6.port}" in v6.log_tail(), v6.log_tail()
        assert curl(v6, "/health")[0] == 200
    finally:
        assert v6.stop() == 0


# ---- 7. graceful shutdown --------------------------------------------------------------------------

def read_to_end(sock, timeout):
    """Everything the server sends on sock until it closes it (within timeout seconds)."""
    sock.settimeout(timeout)
    got = b""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            break
        except OSError:
            break
        if not chunk:
            break
        got += chunk
    return got


def sse_events(raw):
    """The data: payloads of a chunked SSE body, in order."""
    return [line[6:] for line in raw.decode(errors="replace").split("\n") if line.startswith("data: ")]


def test_shutdown_cuts_with_an_error_event_and_503s_the_queue():
    """SIGTERM: new connections are refused, queued requests get 503, a running stream that does
    not finish within --drain-timeout ends with an error event and [DONE], and the server exits
    (queued requests got 500 or nothing, streams were cut without [DONE], and a diffusion batch
    held the exit for its whole run)."""
    s = Server("synth:tiny-llada", "--max-batch", "1", "--drain-timeout", "2")
    sock = long_diffusion(s, "long")
    queued = {}
    t = threading.Thread(target=lambda: queued.update(r=curl(s, "/v1/completions", {"prompt": "q", "gen_length": 32})))
    t.start()
    wait_for(lambda: s.metrics()["lazyinfer_requests_waiting"] >= 1, 30, "a queued request")
    t0 = time.time()
    s.proc.send_signal(signal.SIGTERM)
    t.join(30)
    st, b, h = queued["r"]
    assert_error(st, b, 503, code="overloaded")
    assert h.get("retry-after") == "1", h
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", s.port), timeout=5).close()
    events = sse_events(read_to_end(sock, 30))
    took = time.time() - t0
    assert events[-1] == "[DONE]", events[-3:]
    assert "error" in json.loads(events[-2]), events[-3:]
    assert took < 20, f"the stream was cut {took:.1f} s after SIGTERM (drain 2 s)"
    assert s.proc.wait(30) == 0
    s.stop()


def test_shutdown_lets_running_streams_finish():
    """Streams that finish within --drain-timeout end normally after SIGTERM (they were cut)."""
    model = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not model.exists():
        pytest.skip("default model not fetched (make setup)")
    s = Server(str(model), "--ctx-size", "512", "--drain-timeout", "60")
    body = {"prompt": "Once upon a time", "max_tokens": 100, "ignore_eos": True, "temperature": 0}
    want = curl(s, "/v1/completions", body)[1]["choices"][0]["text"]
    first = []
    sock = open_stream(s, "/v1/completions", {**body, "stream": True}, received=first)
    s.proc.send_signal(signal.SIGTERM)
    events = sse_events(first[0] + read_to_end(sock, 60))
    assert events[-1] == "[DONE]", events[-3:]
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length", chunks[-1]
    assert "".join(c["choices"][0]["text"] for c in chunks) == want
    assert s.proc.wait(30) == 0
    s.stop()
