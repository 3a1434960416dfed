"""harness.py — starts `lazyinfer serve` on a free port for tests/test_server.py and reads its
/metrics. Not a test itself. The server's stderr (one line per request) goes to a log file whose
tail is shown when a test fails."""
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
    def __init__(self, model, *args, api_key=None):
        self.port = free_port()
        self.api_key = api_key
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile("w+", prefix="lazyinfer-serve-", suffix=".log", delete=False)
        cmd = [binary(), "serve", "-m", model, "--port", str(self.port), *args]
        if api_key:
            cmd += ["--api-key", api_key]
        self.cmd = cmd
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log_tail()}")
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
                self.proc.kill()
                self.proc.wait()
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
