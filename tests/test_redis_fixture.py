"""test_redis_fixture.py — the private redis-server of the Python tests (tests/server/
redis_fixture.py): it starts on a free loopback port with persistence off, answers raw commands,
enforces its password, comes back empty on the same port after a kill, and leaves no process or
folder behind. Nothing here is random."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "server"))
from redis_fixture import RedisError, RedisServer, redis_server  # noqa: E402,F401


def test_starts_answers_and_persists_nothing(redis_server):
    r = redis_server
    assert r.url == f"redis://127.0.0.1:{r.port}"
    assert r.command("CONFIG", "GET", "save") == [b"save", b""]
    assert r.command("CONFIG", "GET", "appendonly") == [b"appendonly", b"no"]
    assert r.command("CONFIG", "GET", "bind")[1].startswith(b"127.0.0.1")
    assert r.command("SET", "k", b"\x00binary\r\n") == "OK"
    assert r.command("GET", "k") == b"\x00binary\r\n"
    assert r.command("SET", "k2", "v", db=3) == "OK"
    assert r.command("DBSIZE") == 1 and r.command("DBSIZE", db=3) == 1


def test_password_enforced():
    with RedisServer(password="pw-123") as r:
        assert open(r.password_file).read() == "pw-123\n"
        assert r.command("PING") == "PONG"
        r.password = None  # talk to it without AUTH
        with pytest.raises(RedisError, match="NOAUTH"):
            r.command("PING")
        r.password = "wrong"
        with pytest.raises(RedisError, match="WRONGPASS"):
            r.command("PING")
        r.password = "pw-123"


def test_kill_restart_same_port_then_stop_cleans_up():
    r = RedisServer()
    port, folder, pid = r.port, r.dir, r.proc.pid
    r.command("SET", "k", "v")
    r.kill()
    assert not r.alive()
    with pytest.raises(OSError):
        r.command("PING", timeout=1)
    r.start()
    assert r.port == port and r.alive()
    assert r.command("GET", "k") is None  # no persistence: the restart is empty
    r.stop()
    assert not r.alive() and not os.path.exists(folder)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
