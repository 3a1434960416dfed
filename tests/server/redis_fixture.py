"""redis_fixture.py — a private redis-server for tests: a free loopback port, a temporary folder,
persistence off (`--save '' --appendonly no`), an optional password; stopped (and its folder
removed) at the end, on a failure too. The same start/stop as tests/test-blob-store.c, for the
Python tests of the shared document tier (two `serve` replicas on one Redis). Not a test itself;
tests/test_redis_fixture.py checks it.

    from redis_fixture import RedisServer, redis_server   # noqa: F401 (the fixture)

    def test_two_replicas(redis_server):                 # one server per test
        url = redis_server.url                             # redis://127.0.0.1:PORT
        redis_server.command("DBSIZE")                     # a raw command, decoded reply

    with RedisServer(password="pw") as r: ...             # or by hand; r.password_file exists

`command` speaks RESP over a socket itself, so no Python Redis client is needed. Without
redis-server the start fails with a message naming scripts/setup.sh (never a silent skip)."""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest

SETUP_HINT = "redis-server is not installed: run scripts/setup.sh (it installs the Debian package)"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisError(Exception):
    """An error reply (-ERR ..., -WRONGPASS ...) from the server."""


def _encode(args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


class _Reader:
    def __init__(self, sock):
        self.sock, self.buf = sock, b""

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("redis closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(max(65536, n))
            if not chunk:
                raise ConnectionError("redis closed the connection")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RedisError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n)
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.reply() for _ in range(n)]
        raise ConnectionError(f"unexpected reply {line[:40]!r}")


class RedisServer:
    """One redis-server process. port=None picks a free one; password=None runs without AUTH."""

    def __init__(self, password=None, port=None, start=True):
        if not shutil.which("redis-server"):
            raise RuntimeError(SETUP_HINT)
        self.password = password
        self.port = port
        self.dir = tempfile.mkdtemp(prefix="lazyinfer-redis-")
        self.password_file = None
        if password is not None:
            self.password_file = os.path.join(self.dir, "password")
            with open(self.password_file, "w") as f:
                f.write(password + "\n")
        self.proc = None
        if start:
            self.start()

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}"

    def start(self, timeout=10):
        """Starts the server (again, on the same port if it had one) and waits for PING."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        fixed = self.port  # a restart keeps its port; a first start may retry another
        for _ in range(3):
            port = fixed or free_port()
            cmd = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                   "--appendonly", "no", "--dir", self.dir, "--daemonize", "no",
                   "--logfile", os.path.join(self.dir, "redis.log")]
            if self.password is not None:
                cmd += ["--requirepass", self.password]
            self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.port = port
            deadline = time.time() + timeout
            while time.time() < deadline and self.proc.poll() is None:
                try:
                    if self.command("PING") == "PONG":
                        return self
                except (OSError, ConnectionError):
                    pass
                time.sleep(0.05)
            self._reap(signal.SIGKILL)
            if not fixed:
                self.port = None
        raise RuntimeError(f"redis-server did not start on port {self.port}:\n{self.log_tail()}")

    def command(self, *args, db=0, timeout=5):
        """Runs one command on a fresh connection (AUTH and SELECT first as needed); returns the
        decoded reply: str (status), int, bytes, None or list. Error replies raise RedisError."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as s:
            pre = []
            if self.password is not None:
                pre.append(("AUTH", self.password))
            if db:
                pre.append(("SELECT", db))
            s.sendall(b"".join(_encode(p) for p in pre) + _encode(args))
            r = _Reader(s)
            for _ in pre:
                r.reply()
            return r.reply()

    def log_tail(self, n=20):
        try:
            with open(os.path.join(self.dir, "redis.log"), errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return "(no log)"

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def _reap(self, sig):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill(self):
        """SIGKILL, as a crash: the data (not persisted) is gone; start() brings it back empty."""
        self._reap(signal.SIGKILL)

    def stop(self):
        """Stops the server and removes its folder."""
        self._reap(signal.SIGTERM)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


@pytest.fixture
def redis_server():
    """A fresh redis-server without a password for one test, stopped afterwards."""
    r = RedisServer()
    try:
        yield r
    finally:
        r.stop()
