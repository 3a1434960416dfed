#!/usr/bin/env python3
"""dllm_serve.py — diffusion serving benchmark: GSM8K requests to `lazyinfer serve` one by one
against 1, 4, 8 (--levels) of them at once, on a diffusion model (docs/SERVER.md "Diffusion
models"). Not part of `make test` (tests/test_dllm_serve_bench.py runs it small on the CPU).

It starts `serve` itself (--bin, -m, --backend, --max-batch = the largest level unless given,
anything after `--` passed on), waits for its start line and /health, and stops it at the end
(SIGTERM, a second one after --drain-wait s, then SIGKILL), also on an error, a timeout or a
SIGTERM of its own (gpu-run.sh's `timeout`).

Prompts: bench dllm's (tools/cmd-dllm.c): `--shots K` solved examples (the first K records of
--prompts), then `Question: …\\nAnswer:` of record K + i; raw text, not the chat format. With
--prompt-tokens P each prompt is tokenised by the server (/tokenize, BOS included) and cut to its
last P tokens, sent as token ids (bench dllm's --prompt-tokens). Every request has the same
gen_length, block_length, steps, seed and temperature (default 0: argmax, deterministic).

Phases (after one untimed warm-up request, which pays one-time set-up such as plans):
  solo        the N = --n-prompts requests one after another: latency of each, and tokens / wall
  concurrent  for each level L, the first L requests sent at once (threads released together):
              wall from the first send to the last answer, generated tokens / wall, latency of
              each (mean, max)
Generated tokens = usage.completion_tokens (up to the first EOS: bench dllm's "Fast-dLLM"
count). "× solo" = the level's tokens/s over the same L requests' tokens / the sum of their solo
latencies. "batched" = requests the server decoded in batches of two or more / the level's
requests, and how many such batches (/metrics: lazyinfer_dllm_batched_requests_total,
lazyinfer_dllm_batches_total): requests that arrive while a batch decodes start a batch of their
own, which takes turns with it step by step.
Every concurrent answer must equal the same request's solo answer (text and completion_tokens):
a mismatch names the request and makes the exit status 1. Any other failure (server, HTTP,
timeout): exit status 2.

  bench/dllm_serve.py --bin ./lazyinfer -m synth:tiny-llada --levels 1,2,4 --gen-length 32 \\
      --block-length 16 --steps 32 -- -t 1
  bench/dllm_serve.py --bin .gpu/bin/lazyinfer-cuda -m synth:llada-8b --backend cuda \\
      --shots 4 --prompt-tokens 575 --gen-length 128 --block-length 32 --steps 128 --json out.json
"""
import argparse
import ctypes
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class Failure(Exception):
    """Anything but a mismatch that ends the run: exit status 2."""


class Interrupted(BaseException):
    """SIGTERM (gpu-run.sh's timeout): unwinds through the finally that stops the server."""


def on_sigterm(sig, frame):
    raise Interrupted(f"signal {sig}")


def die_with_parent():
    """In the server's process: SIGTERM when this driver dies, even by SIGKILL (Linux prctl
    PR_SET_PDEATHSIG = 1), so no server outlives a killed benchmark."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


class Serve:
    """`lazyinfer serve` on --port (0: the one it prints), its stderr in a log file."""

    def __init__(self, argv, start_timeout, log_path):
        self.log_path = log_path
        self.log = open(log_path, "w+")
        self.proc = subprocess.Popen(argv, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT,
                                     preexec_fn=die_with_parent)
        deadline = time.time() + start_timeout
        while True:
            if self.proc.poll() is not None:
                raise Failure(f"serve exited with {self.proc.returncode} at start:\n{self.tail()}")
            m = re.search(r"listening on http://(\S+?):(\d+) ", self.tail(200))
            if m:
                self.host = m.group(1).strip("[]")
                self.port = int(m.group(2))
                try:
                    if self.get("/health", 2)[0] == 200:
                        break
                except OSError:
                    pass
            if time.time() > deadline:
                raise Failure(f"serve did not come up within {start_timeout} s:\n{self.tail()}")
            time.sleep(0.1)

    def tail(self, n=30):
        with open(self.log_path, errors="replace") as f:
            return "".join(f.readlines()[-n:])

    def request(self, method, path, body, timeout):
        c = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            hdrs = {"Content-Type": "application/json"} if body is not None else {}
            c.request(method, path, body=None if body is None else json.dumps(body), headers=hdrs)
            r = c.getresponse()
            return r.status, r.read().decode("utf-8", errors="replace")
        finally:
            c.close()

    def get(self, path, timeout):
        return self.request("GET", path, None, timeout)

    def post(self, path, body, timeout):
        st, text = self.request("POST", path, body, timeout)
        if st != 200:
            raise Failure(f"POST {path}: {st} {text[:500]}")
        return json.loads(text)

    def metrics(self, timeout=10):
        st, text = self.get("/metrics", timeout)
        if st != 200:
            raise Failure(f"GET /metrics: {st}")
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out

    def stop(self, drain_wait):
        """SIGTERM; a second one (which cuts running requests) after drain_wait s; SIGKILL 10 s
        later. Returns the exit status."""
        for sig, wait in ((signal.SIGTERM, drain_wait), (signal.SIGTERM, 10), (signal.SIGKILL, 10)):
            if self.proc.poll() is not None:
                break
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                pass
        self.log.close()
        return self.proc.wait()


def gsm8k_prompts(path, n, shots):
    """bench dllm's prompts: `shots` solved examples (records 0..shots-1), then question
    shots + i."""
    recs = []
    with open(path) as f:
        for line in f:
            if line.strip():
                recs.append(json.loads(line))
    if len(recs) < n + shots:
        raise Failure(f"{path} has {len(recs)} questions, {n + shots} needed (n-prompts + shots)")
    head = "".join(f"Question: {r['question']}\nAnswer: {r['answer']}\n\n" for r in recs[:shots])
    return [f"{head}Question: {recs[shots + i]['question']}\nAnswer:" for i in range(n)]


def complete(srv, prompt, a):
    """One diffusion request; returns (latency s, text, completion_tokens, prompt_tokens)."""
    body = {"prompt": prompt, "gen_length": a.gen_length, "block_length": a.block_length,
            "steps": a.steps, "temperature": a.temperature, "seed": a.seed}
    t0 = time.perf_counter()
    r = srv.post("/v1/completions", body, a.request_timeout)
    t1 = time.perf_counter()
    return {"t0": t0, "t1": t1, "latency_s": t1 - t0, "text": r["choices"][0]["text"],
            "tokens": r["usage"]["completion_tokens"], "prompt_tokens": r["usage"]["prompt_tokens"]}


def concurrent(srv, prompts, a):
    """Sends every prompt at once (threads released by one barrier); returns the answers in
    order. A failed request fails the level."""
    out, errs = [None] * len(prompts), []
    gate = threading.Barrier(len(prompts))

    def one(i):
        try:
            gate.wait()
            out[i] = complete(srv, prompts[i], a)
        except Exception as e:  # noqa: BLE001 — reported below with the request's index
            errs.append(f"request {i}: {e}")

    ts = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(prompts))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errs:
        raise Failure("; ".join(errs))
    return out


def mismatches(solo, conc):
    """The requests whose concurrent answer differs from their solo one, as messages."""
    bad = []
    for i, (s, c) in enumerate(zip(solo, conc)):
        if c["text"] != s["text"] or c["tokens"] != s["tokens"]:
            bad.append(f"request {i} (question {i}): {c['tokens']} tokens {c['text'][:60]!r}… "
                       f"concurrent, {s['tokens']} tokens {s['text'][:60]!r}… solo")
    return bad


def table(rows):
    head = ("| level | requests | wall s | generated tok/s | × solo tok/s | latency mean s | "
            "latency max s | solo latency mean s | batched | outputs equal |")
    lines = [head, "|" + "---:|" * 9 + ":-:|"]
    for r in rows:
        lines.append(
            f"| {r['level']} | {r['requests']} | {r['wall_s']:.2f} | {r['tok_s']:.1f} | "
            f"{r['x_solo']:.2f}× | {r['latency_mean_s']:.2f} | {r['latency_max_s']:.2f} | "
            f"{r['solo_latency_mean_s']:.2f} | {r['batched']} | {r['equal']} |")
    return "\n".join(lines)


def run(a, extra):
    prompts_text = gsm8k_prompts(a.prompts, a.n_prompts, a.shots)
    argv = [a.bin, "serve", "-m", a.model, "--backend", a.backend, "--port", str(a.port),
            "--max-batch", str(a.max_batch), *extra]
    log_path = a.log
    if not log_path:
        fd, log_path = tempfile.mkstemp(prefix="dllm-serve-", suffix=".log")
        os.close(fd)
    print(f"serve: {' '.join(argv)} (log {log_path})", file=sys.stderr)
    srv = Serve(argv, a.start_timeout, log_path)
    result, rc = None, 2
    try:
        prompts = prompts_text
        if a.prompt_tokens > 0:
            prompts = []
            for p in prompts_text:
                ids = srv.post("/tokenize", {"content": p, "add_special": True},
                               a.request_timeout)["tokens"]
                prompts.append(ids[-a.prompt_tokens:])
        complete(srv, prompts[0], a)  # warm-up, untimed
        t0 = time.perf_counter()
        solo = [complete(srv, p, a) for p in prompts]
        solo_wall = time.perf_counter() - t0
        solo_tokens = sum(s["tokens"] for s in solo)
        lats = [s["latency_s"] for s in solo]
        rows = [{"level": "solo", "requests": len(solo), "wall_s": solo_wall,
                 "tok_s": solo_tokens / solo_wall, "x_solo": 1.0,
                 "latency_mean_s": sum(lats) / len(lats), "latency_max_s": max(lats),
                 "solo_latency_mean_s": sum(lats) / len(lats), "batched": "—", "equal": "—"}]
        bad_all = []
        for level in a.levels:
            m0 = srv.metrics()
            conc = concurrent(srv, prompts[:level], a)
            m1 = srv.metrics()
            wall = max(c["t1"] for c in conc) - min(c["t0"] for c in conc)
            tokens = sum(c["tokens"] for c in conc)
            same = solo[:level]
            solo_rate = sum(s["tokens"] for s in same) / sum(s["latency_s"] for s in same)
            lat = [c["latency_s"] for c in conc]
            n_batches = m1["lazyinfer_dllm_batches_total"] - m0["lazyinfer_dllm_batches_total"]
            n_batched = (m1["lazyinfer_dllm_batched_requests_total"]
                         - m0["lazyinfer_dllm_batched_requests_total"])
            bad = mismatches(same, conc)
            bad_all += [f"level {level}: {b}" for b in bad]
            rows.append({"level": level, "requests": level, "wall_s": wall,
                         "tok_s": tokens / wall, "x_solo": tokens / wall / solo_rate,
                         "latency_mean_s": sum(lat) / level, "latency_max_s": max(lat),
                         "solo_latency_mean_s": sum(s["latency_s"] for s in same) / level,
                         "batched": f"{int(n_batched)}/{level} in {int(n_batches)}",
                         "equal": "yes" if not bad else f"no ({len(bad)})",
                         "latencies_s": lat, "tokens": tokens})
        n_prompt = [s["prompt_tokens"] for s in solo]
        print(f"## lazyinfer serve, diffusion — {a.model} on {a.backend}, max batch "
              f"{a.max_batch}\n\n{len(prompts)} GSM8K questions ({a.prompts}, {a.shots}-shot"
              f"{f', cut to the last {a.prompt_tokens} tokens' if a.prompt_tokens else ''}; "
              f"prompt {min(n_prompt)}–{max(n_prompt)} tokens), gen {a.gen_length}, block "
              f"{a.block_length}, {a.steps} steps, temperature {a.temperature}, seed {a.seed}; "
              f"generated tokens = usage.completion_tokens\n")
        print(table(rows))
        for b in bad_all:
            print(f"MISMATCH {b}")
        rc = 1 if bad_all else 0
        result = {"model": a.model, "backend": a.backend, "max_batch": a.max_batch,
                  "serve_args": extra, "prompts": a.prompts, "shots": a.shots,
                  "prompt_tokens_cut": a.prompt_tokens, "gen_length": a.gen_length,
                  "block_length": a.block_length, "steps": a.steps,
                  "temperature": a.temperature, "seed": a.seed,
                  "solo": [{k: s[k] for k in ("latency_s", "tokens", "prompt_tokens", "text")}
                           for s in solo],
                  "rows": rows, "mismatches": bad_all}
    finally:
        code = srv.stop(a.drain_wait)
        if rc != 0 or code != 0:
            print(f"serve exited with {code}; its log's tail:\n{srv.tail()}", file=sys.stderr)
        if code != 0 and rc == 0:
            rc = 2
        if not a.log:
            os.unlink(log_path)
    if a.json and result:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    return rc


def parse(argv):
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog="arguments after -- go to `lazyinfer serve`")
    p.add_argument("--bin", default=os.environ.get("BIN", "./lazyinfer"),
                   help="the lazyinfer binary (default: env BIN, else ./lazyinfer)")
    p.add_argument("-m", "--model", required=True, help="a diffusion model: HF dir or synth:NAME")
    p.add_argument("--backend", default="cpu", help="serve --backend (default cpu)")
    p.add_argument("--port", type=int, default=0, help="serve --port (default 0: a free one)")
    p.add_argument("--max-batch", type=int, help="serve --max-batch (default: the largest level)")
    p.add_argument("--levels", default="1,4,8", help="concurrent requests per level (1,4,8)")
    p.add_argument("-n", "--n-prompts", type=int, help="questions (default: the largest level)")
    p.add_argument("--prompts", default=str(ROOT / "data" / "gsm8k" / "test.jsonl"))
    p.add_argument("--shots", type=int, default=0, help="solved examples before each question")
    p.add_argument("--prompt-tokens", type=int, default=0,
                   help="cut each prompt to its last N tokens (0: whole)")
    p.add_argument("--gen-length", type=int, default=128)
    p.add_argument("--block-length", type=int, default=32)
    p.add_argument("--steps", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--start-timeout", type=float, default=180, help="s for serve to come up")
    p.add_argument("--request-timeout", type=float, default=600, help="s per HTTP request")
    p.add_argument("--drain-wait", type=float, default=5,
                   help="s after SIGTERM before the second one cuts running requests")
    p.add_argument("--log", help="keep serve's log here (default: a temporary file, removed)")
    p.add_argument("--json", help="write the results here")
    a = p.parse_args(argv)
    try:
        a.levels = [int(x) for x in a.levels.split(",")]
    except ValueError:
        p.error(f"--levels {a.levels!r}: a list of integers such as 1,4,8")
    if not a.levels or min(a.levels) < 1:
        p.error("--levels: each level must be >= 1")
    if not os.path.isabs(a.bin):  # relative to here, else to the repository (tests' BIN)
        a.bin = os.path.abspath(a.bin) if os.path.exists(a.bin) else str(ROOT / a.bin)
    a.n_prompts = a.n_prompts or max(a.levels)
    a.max_batch = a.max_batch or max(a.levels)
    if max(a.levels) > a.n_prompts:
        p.error(f"--levels {max(a.levels)} is more than --n-prompts {a.n_prompts}")
    if a.shots < 0 or a.prompt_tokens < 0:
        p.error("--shots and --prompt-tokens must not be negative")
    return a, extra


def main():
    a, extra = parse(sys.argv[1:])
    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        return run(a, extra)
    except (Failure, OSError, ValueError, KeyError) as e:  # HTTP, socket, JSON, the answer's shape
        print(f"dllm_serve: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    except (Interrupted, KeyboardInterrupt) as e:
        print(f"dllm_serve: interrupted ({e or 'SIGINT'}); serve stopped", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
