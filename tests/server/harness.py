"""harness.py — starts `lazyinfer serve` on a free port for tests/test_server*.py, reads its
/metrics, and talks to it: the openai client, raw HTTP with curl, the error shape. Not a test
itself. The server's stderr (one line per request) goes to a log file whose tail is shown when a
test fails."""
import json
import os
import re
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def binary():
    b = os.environ.get("BIN", "./lazyinfer")
    p = Path(b)
    return str(p if p.is_absolute() else ROOT / p)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, model, *args, api_key=None, port=None, host=None):
        self.port = port or free_port()
        self.api_key = api_key
        self.url = f"http://{'[' + host + ']' if host and ':' in host else host or '127.0.0.1'}:{self.port}"
        self.log = tempfile.NamedTemporaryFile("w+", prefix="lazyinfer-serve-", suffix=".log", delete=False)
        cmd = [binary(), "serve", "-m", model, "--port", str(self.port), *args]
        if host:
            cmd += ["--host", host]
        if api_key:
            cmd += ["--api-key", api_key]
        self.cmd = cmd
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log_tail()}")
            # up = this process says it listens (printed once its signal handling is set up) and
            # /health answers; /health alone is not enough with --reuse-port, where another server
            # on the same port may answer while this one still loads its model
            if "listening on" in self.log_tail(200):
                try:
                    with urllib.request.urlopen(self.url + "/health", timeout=1) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
            if time.time() > deadline:
                self.stop()
                raise RuntimeError(f"server did not come up:\n{self.log_tail()}")
            time.sleep(0.05)

    def log_tail(self, n=40):
        self.log.flush()
        with open(self.log.name, errors="replace") as f:
            return "".join(f.readlines()[-n:])

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                # killed: say why it did not stop (its log tells how far its shutdown got)
                # before the log is gone
                self.proc.kill()
                self.proc.wait()
                print(f"server did not stop within 10 s of SIGTERM; its log's tail:\n{self.log_tail()}")
        self.log.close()
        os.unlink(self.log.name)
        return self.proc.returncode

    def metrics(self):
        with urllib.request.urlopen(self.url + "/metrics", timeout=5) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?) (\S+)$", line)
            assert m, f"bad metrics line: {line!r}"
            out[m.group(1)] = float(m.group(2))
        return out

    def wait_idle(self, timeout=10):
        """Waits until no request runs or waits; returns the metrics then."""
        deadline = time.time() + timeout
        while True:
            m = self.metrics()
            if m["lazyinfer_requests_running"] == 0 and m["lazyinfer_requests_waiting"] == 0:
                return m
            if time.time() > deadline:
                return m
            time.sleep(0.05)


def client(s, key=None, **kw):
    import openai  # only the tests that use it need the package

    return openai.OpenAI(base_url=s.url + "/v1", api_key=key or s.api_key or "none", max_retries=0, **kw)


# curl's limit on one request, in seconds. It is there to turn a hung server into a failure, not
# to time the server: the slowest request of the tests (test_response_format_json's answer of 290
# tokens) takes 10.6 s on a quiet 2-core machine and took over 30 s, the former limit, with two
# CPU-bound processes beside it (load average above 3). 300 s leaves room for 25 times that.
CURL_MAX_TIME = 300


def curl(s, path, body=None, key=None, method=None, headers=()):
    """Raw HTTP with curl: returns (status, parsed JSON or text, response headers)."""
    cmd = ["curl", "-s", "-S", "-D", "-", "--max-time", str(CURL_MAX_TIME), s.url + path]
    if method:
        cmd += ["-X", method]
    if key:
        cmd += ["-H", f"Authorization: Bearer {key}"]
    for h in headers:
        cmd += ["-H", h]
    data = None
    if body is not None:
        data = body if isinstance(body, bytes) else (body if isinstance(body, str) else json.dumps(body)).encode()
        cmd += ["-H", "Content-Type: application/json", "--data-binary", "@-"]
    out = subprocess.run(cmd, input=data, capture_output=True, timeout=CURL_MAX_TIME + 30)
    assert out.returncode == 0, out.stderr.decode()
    raw = out.stdout.decode(errors="replace")
    head, _, text = raw.partition("\r\n\r\n")
    while head.startswith("HTTP/1.1 100"):
        head, _, text = text.partition("\r\n\r\n")
    status = int(head.split()[1])
    hdrs = {k.strip().lower(): v.strip() for k, _, v in (l.partition(":") for l in head.split("\r\n")[1:])}
    try:
        return status, json.loads(text), hdrs
    except ValueError:
        return status, text, hdrs


def assert_error(status, body, want_status, param=None, code=None):
    assert status == want_status, (status, body)
    assert set(body) == {"error"}, body
    e = body["error"]
    assert set(e) == {"message", "type", "param", "code"}, e
    assert isinstance(e["message"], str) and e["message"]
    if param is not None:
        assert e["param"] == param, e
    if code is not None:
        assert e["code"] == code, e


def open_stream(s, path, body, key=None, received=None):
    """Opens a streaming request on a plain socket; returns the socket after the first event
    (the bytes read so far are appended to the list `received` when one is given)."""
    data = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=60)
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{auth}"
                 f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    got = b""
    while b"data: " not in got:
        chunk = sock.recv(4096)
        assert chunk, got
        got += chunk
        assert b"\r\n\r\n" not in got or got.startswith(b"HTTP/1.1 200"), got
    if received is not None:
        received.append(got)
    return sock
