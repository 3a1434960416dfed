#!/usr/bin/env python3
"""soak.py — a soak test of `lazyinfer serve` (docs/SERVER.md "Soak"): well-behaved streaming
clients for a long while, with careless and hostile traffic mixed in, then the server's state at
rest compared with its state before. Not part of `make test` (it takes minutes).

Traffic, all at once for --seconds:
  --clients   well-behaved clients streaming chat or completions requests back to back; a share
              (--churn) open a new connection per request, the others keep theirs alive. Each
              answer must be 200 with a finish_reason, a usage chunk and [DONE]: anything else is
              an error, and the run fails on any.
  --disconnect  of their requests, this share is abandoned mid-stream (the socket closed after
              the first event) — the server must free their sequences and pages.
  --malformed  this share are bad bodies (broken JSON, wrong types, unknown fields, a wrong
              Content-Type, a body over the limit): a 4xx is right, a 5xx or no answer an error.
  --idle      sockets opened and left silent (reopened when the server closes them)
  --slow      clients sending their headers one byte every 0.5 s (reopened when closed)
Reported: requests, tokens/s, TTFT p50 / p99 of the well-behaved, errors by kind, the server's
RSS and KV pages before (after a warm-up) and at rest after, and the connections the server timed
out and shed. Exit status 1 when a well-behaved request failed or the server did not return to
its resting state (no request running, KV pages in use = pages the document cache holds, RSS
within --rss-slack MB of before).

  bench/soak.py                                     # SmolLM2, 64 clients, 10 minutes
  bench/soak.py --seconds 120 --clients 32          # shorter
  bench/soak.py --model synth:tiny-llama --json out.json
"""
import argparse
import http.client
import json
import random
import socket
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "server"))
from harness import Server  # noqa: E402

WORDS = ("apple river stone cloud garden window silver music paper candle forest bridge orange "
         "pencil winter summer yellow mountain coffee letter").split()


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.ok = self.tokens = self.abandoned = self.malformed = self.reconnects = 0
        self.ttft = []
        self.errors = {}

    def error(self, kind, detail):
        with self.lock:
            e = self.errors.setdefault(kind, [0, detail])
            e[0] += 1


def sse_request(conn, path, body):
    """Sends a streaming request on conn; yields the parsed events (raises on any protocol error)."""
    data = json.dumps(body).encode()
    conn.request("POST", path, data, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:200]!r}")
    buf = b""
    while True:
        chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(1)
        if not chunk:
            raise RuntimeError("the stream ended without [DONE]")
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            if not ev.startswith(b"data: "):
                continue
            if ev == b"data: [DONE]":
                resp.read()  # the end of the chunked body: the connection is ready for more
                return
            yield json.loads(ev[6:])


def well_behaved(args, port, i, stats, stop):
    r = random.Random(f"{args.seed}-client{i}")
    conn = None
    while not stop.is_set():
        if conn is None or r.random() < args.churn:
            if conn:
                conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        chat = r.random() < 0.5
        body = {"max_tokens": r.randrange(8, args.max_tokens + 1), "temperature": r.choice([0, 0.8]),
                "seed": r.randrange(1 << 30), "stream": True, "stream_options": {"include_usage": True}}
        text = " ".join(r.choice(WORDS) for _ in range(r.randrange(3, 12)))
        if chat:
            body["messages"] = [{"role": "user", "content": text}]
        else:
            body["prompt"] = text
        path = "/v1/chat/completions" if chat else "/v1/completions"
        abandon = r.random() < args.disconnect
        t0 = time.perf_counter()
        ttft, finish, usage, n = None, None, None, 0
        try:
            for ev in sse_request(conn, path, body):
                if ev.get("usage"):
                    usage = ev["usage"]
                for ch in ev.get("choices", []):
                    piece = ch["delta"].get("content") if chat else ch.get("text")
                    if piece and ttft is None:
                        ttft = time.perf_counter() - t0
                    finish = ch.get("finish_reason") or finish
                n += 1
                if abandon:
                    break
            if abandon:
                conn.close()
                conn = None
                with stats.lock:
                    stats.abandoned += 1
                continue
            if finish not in ("stop", "length") or not usage:
                raise RuntimeError(f"no finish_reason / usage ({finish}, {usage})")
            with stats.lock:
                stats.ok += 1
                stats.tokens += usage["completion_tokens"]
                if ttft is not None:
                    stats.ttft.append(ttft)
        except Exception as e:  # noqa: BLE001 — every failure of a well-behaved client counts
            if stop.is_set():
                break
            stats.error("well-behaved: " + type(e).__name__, str(e)[:200])
            if conn:
                conn.close()
            conn = None


MALFORMED = [
    (b'{"messages": [', "application/json"),
    (b'[1, 2, 3]', "application/json"),
    (b'{"prompt": 5}', "application/json"),
    (b'{"prompt": "a", "max_tokens": "ten"}', "application/json"),
    (b'{"prompt": "a", "frobnicate": true}', "application/json"),
    (b'{"prompt": "a", "n": 99}', "application/json"),
    (b'{"prompt": "a"}', "text/plain"),
    (b'{"prompt": "\\ud800 \xff"}', "application/json"),
    (b'{"prompt": "a", "max_tokens": 100000}', "application/json"),
]


def malformed(args, port, stats, stop):
    r = random.Random(f"{args.seed}-malformed")
    while not stop.wait(r.expovariate(args.malformed_rate)):
        body, ctype = r.choice(MALFORMED)
        if r.random() < 0.1:
            body, ctype = b'{"prompt": "' + b"a" * (17 << 20) + b'"}', "application/json"
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            conn.request("POST", r.choice(["/v1/completions", "/v1/chat/completions"]), body,
                         {"Content-Type": ctype})
            st = conn.getresponse().status
            conn.close()
            if not 400 <= st < 500:
                stats.error(f"malformed answered {st}", body[:80].decode(errors="replace"))
            with stats.lock:
                stats.malformed += 1
        except (OSError, http.client.HTTPException) as e:
            # the server may close a connection whose body it refused before reading it
            if "17" not in str(len(body))[:2]:
                stats.error("malformed: " + type(e).__name__, str(e)[:200])


def hostile_sockets(args, port, stats, stop):
    """Idle sockets and slow-header clients, from loopback addresses of their own; each is
    reopened when the server closes it (its deadline)."""
    socks = {}

    def open_one(k):
        s = socket.socket()
        s.bind((f"127.0.2.{1 + k // 100}", 0))
        s.settimeout(5)
        s.connect(("127.0.0.1", port))
        s.setblocking(False)
        if k >= args.idle:
            s.send(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        return s

    for k in range(args.idle + args.slow):
        try:
            socks[k] = open_one(k)
        except OSError as e:
            stats.error("hostile: connect", str(e))
    while not stop.wait(0.5):
        for k, s in list(socks.items()):
            closed = False
            try:
                if s.recv(4096) == b"":
                    closed = True
            except BlockingIOError:
                pass
            except OSError:
                closed = True
            if not closed and k >= args.idle:
                try:
                    s.send(b"X")
                except OSError:
                    closed = True
            if closed:
                s.close()
                try:
                    socks[k] = open_one(k)
                    with stats.lock:
                        stats.reconnects += 1
                except OSError as e:
                    stats.error("hostile: reconnect", str(e))
    for s in socks.values():
        s.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=str(ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--max-batch", type=int, default=8)
    ap.add_argument("--ctx-size", type=int, default=1024)
    ap.add_argument("--churn", type=float, default=0.3, help="share of requests on a new connection")
    ap.add_argument("--disconnect", type=float, default=0.1, help="share abandoned mid-stream")
    ap.add_argument("--malformed-rate", type=float, default=2.0, help="malformed requests per second")
    ap.add_argument("--idle", type=int, default=200, help="idle sockets")
    ap.add_argument("--slow", type=int, default=20, help="slow-header clients")
    ap.add_argument("--rss-slack", type=float, default=64, help="MB the RSS at rest may exceed the warm one")
    ap.add_argument("--seed", type=int, default=20261202)
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()

    s = Server(args.model, "--max-batch", str(args.max_batch), "--max-queue", str(4 * args.clients),
               "--ctx-size", str(args.ctx_size), "-q")
    pid = s.proc.pid
    try:
        # warm-up: a few requests of each kind, then the resting state to come back to
        warm = Stats()
        stop = threading.Event()
        threads = [threading.Thread(target=well_behaved, args=(args, s.port, 1000 + i, warm, stop))
                   for i in range(4)]
        for t in threads:
            t.start()
        time.sleep(10)
        stop.set()
        for t in threads:
            t.join()
        m0 = s.wait_idle(60)
        rss0 = rss_mb(pid)
        stats = Stats()
        stop = threading.Event()
        threads = [threading.Thread(target=well_behaved, args=(args, s.port, i, stats, stop))
                   for i in range(args.clients)]
        threads.append(threading.Thread(target=malformed, args=(args, s.port, stats, stop)))
        threads.append(threading.Thread(target=hostile_sockets, args=(args, s.port, stats, stop)))
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        rss_peak = rss0
        while time.perf_counter() - t0 < args.seconds:
            time.sleep(1)
            rss_peak = max(rss_peak, rss_mb(pid))
        stop.set()
        for t in threads:
            t.join(660)
        wall = time.perf_counter() - t0
        m1 = s.wait_idle(120)
        time.sleep(2)
        rss1 = rss_mb(pid)
        m1 = s.metrics()
        ttft = sorted(stats.ttft)
        pct = lambda q: ttft[min(len(ttft) - 1, int(q * len(ttft)))] * 1e3 if ttft else float("nan")  # noqa: E731
        well_errors = sum(n for k, (n, _) in stats.errors.items() if k.startswith("well-behaved"))
        other_errors = sum(n for k, (n, _) in stats.errors.items() if not k.startswith("well-behaved"))
        at_rest = (m1["lazyinfer_requests_running"] == 0 and m1["lazyinfer_requests_waiting"] == 0
                   and m1["lazyinfer_kv_pages_in_use"] == m1["lazyinfer_kv_pages_cached"])
        fig = {
            "model": Path(args.model).name, "clients": args.clients, "seconds": round(wall, 1),
            "requests_ok": stats.ok, "abandoned": stats.abandoned, "malformed": stats.malformed,
            "hostile_reconnects": stats.reconnects, "tokens": stats.tokens,
            "tokens_per_s": round(stats.tokens / wall, 1), "ttft_p50_ms": round(pct(0.5), 1),
            "ttft_p99_ms": round(pct(0.99), 1), "well_behaved_errors": well_errors,
            "other_errors": other_errors, "errors": stats.errors,
            "rss_warm_mb": round(rss0, 1), "rss_peak_mb": round(rss_peak, 1), "rss_rest_mb": round(rss1, 1),
            "kv_pages_in_use_warm": m0["lazyinfer_kv_pages_in_use"],
            "kv_pages_in_use_rest": m1["lazyinfer_kv_pages_in_use"],
            "kv_pages_cached_rest": m1["lazyinfer_kv_pages_cached"],
            "connections_timed_out": m1["lazyinfer_connections_timed_out_total"],
            "connections_shed": m1["lazyinfer_connections_shed_total"],
            "cancelled": m1["lazyinfer_requests_cancelled_total"], "at_rest": at_rest,
        }
        print(json.dumps(fig, indent=1))
        if args.json:
            Path(args.json).write_text(json.dumps(fig, indent=1) + "\n")
        ok = well_errors == 0 and other_errors == 0 and at_rest and rss1 <= rss0 + args.rss_slack
        print("soak: " + ("PASS" if ok else "FAIL"))
        return 0 if ok else 1
    finally:
        s.stop()


if __name__ == "__main__":
    sys.exit(main())
