"""tests/test_dllm_serve_bench.py — bench/dllm_serve.py (the diffusion serving benchmark) on the
CPU with synth:tiny-llada (random weights: the text does not matter, only that it repeats).

  - a small run (levels 1, 2, 4; prompts cut to 64 tokens, gen 32, block 16, 32 steps) exits 0,
    prints one table row per level after the solo row, every concurrent answer equal to its solo
    one, and writes JSON with the same figures;
  - a concurrent answer that differs from its solo one (the run's own answers, one altered in
    the driver) is named and makes the exit status 1;
  - SIGTERM in the middle of a long request stops the server too (exit status 2, port closed).
Uses the binary of env BIN (default ./lazyinfer); skipped when it is not built.
"""
import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "bench" / "dllm_serve.py"
BIN = os.environ.get("BIN", "./lazyinfer")
BIN_PATH = Path(BIN) if Path(BIN).is_absolute() else ROOT / BIN
SMALL = ["--bin", str(BIN_PATH), "-m", "synth:tiny-llada", "--levels", "1,2,4", "--shots", "1",
         "--prompt-tokens", "64", "--gen-length", "32", "--block-length", "16", "--steps", "32",
         "--", "-t", "1"]

pytestmark = pytest.mark.skipif(not BIN_PATH.exists(), reason=f"{BIN_PATH} not built (make)")


def rows(text):
    """The table's rows by their level column ("solo", "1", ...): lists of cells."""
    lines = [line for line in text.splitlines() if re.match(r"^\| (solo|\d+) \|", line)]
    return {c[0]: c for c in ([x.strip() for x in line.strip().strip("|").split("|")]
                              for line in lines)}


def test_small_run_table_and_equal_outputs(tmp_path):
    out = tmp_path / "r.json"
    p = subprocess.run([sys.executable, str(DRIVER), "--json", str(out), *SMALL], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "| level | requests | wall s | generated tok/s | × solo tok/s |" in p.stdout, p.stdout
    r = rows(p.stdout)
    assert list(r) == ["solo", "1", "2", "4"], p.stdout
    assert r["solo"][1] == "4"
    for lv in ("1", "2", "4"):
        assert r[lv][1] == lv and r[lv][-1] == "yes", p.stdout
        assert float(r[lv][3]) > 0 and r[lv][4].endswith("×"), p.stdout
    assert "MISMATCH" not in p.stdout
    d = json.loads(out.read_text())
    assert d["gen_length"] == 32 and d["steps"] == 32 and d["prompt_tokens_cut"] == 64
    assert len(d["solo"]) == 4 and all(s["prompt_tokens"] == 64 for s in d["solo"])
    # tiny-llada commits some EOS now and then; most of the 32 positions are tokens
    assert all(0 < s["tokens"] <= 32 for s in d["solo"]), d["solo"]
    assert [x["equal"] for x in d["rows"][1:]] == ["yes"] * 3 and d["mismatches"] == []
    for x in d["rows"][1:]:
        assert len(x["latencies_s"]) == x["requests"] and x["tokens"] > 0


def test_mismatch_is_named_and_fails(capsys):
    spec = importlib.util.spec_from_file_location("dllm_serve", DRIVER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    real = mod.concurrent

    def altered(srv, prompts, a):
        got = real(srv, prompts, a)
        if len(got) == 2:
            got[1]["text"] += "x"  # request 1 of level 2 answers differently
        return got

    mod.concurrent = altered
    a, extra = mod.parse(SMALL)
    assert mod.run(a, extra) == 1
    text = capsys.readouterr().out
    assert re.search(r"^MISMATCH level 2: request 1 ", text, re.M), text
    r = rows(text)
    assert r["2"][-1] == "no (1)" and r["1"][-1] == "yes" and r["4"][-1] == "yes", text


def test_sigterm_stops_the_server(tmp_path):
    log = tmp_path / "serve.log"
    # one request of 1,024 steps on a 1,024-token canvas: minutes alone on tiny-llada
    p = subprocess.Popen([sys.executable, str(DRIVER), "--log", str(log), "--levels", "1",
                          "--bin", str(BIN_PATH), "-m", "synth:tiny-llada", "--gen-length", "1024",
                          "--block-length", "32", "--steps", "1024", "--", "-t", "1"], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 30
        while "listening on" not in (log.read_text() if log.exists() else ""):
            assert time.time() < deadline and p.poll() is None, p.communicate()
            time.sleep(0.05)
        port = int(re.search(r"listening on http://\S+?:(\d+) ", log.read_text()).group(1))
        time.sleep(0.3)  # the warm-up request is decoding
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 2, out + err
    assert "interrupted" in err, err
    assert "signal 15, stopping" in log.read_text()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
