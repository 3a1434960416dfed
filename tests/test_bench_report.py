"""tests/test_bench_report.py — bench/report.py on logs laid out as bench/gpu-run.sh writes them.

The fixture (tests/data/bench-report/, see its README.md) holds two cut-down H200 runs. The report
must print every table of docs/BENCHMARKS.md's GPU areas with the figures of those runs, read a
results.tgz as it reads a folder, let the first of several inputs win, and fail clearly on a
missing input or on a folder without logs. Standard library only; no GPU, nothing random.
"""
import json
import os
import subprocess
import sys
import tarfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPORT = os.path.join(ROOT, "bench", "report.py")
DATA = os.path.join(ROOT, "tests", "data", "bench-report")
A, B = os.path.join(DATA, "a"), os.path.join(DATA, "b")


def report(*paths):
    return subprocess.run([sys.executable, REPORT, *map(str, paths)], capture_output=True,
                          text=True, timeout=60)


def test_every_table_from_the_logs():
    p = report(A, B)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    for line in [
        "**Run:** NVIDIA H200, driver 580.159.04; Mon Nov 30 11:36:48 PM UTC 2026.",
        "gpu-check 595 / 0; gpu-model 13 / 0;",
        "test-llada on CUDA 47 / 0.",
        "| decode attention, batch 16 (GB/s) | 4,227 | cuDNN 4,463, FA2 4,332 |",
        "| decode rotation overhead (Δ vs none), batch 1 / 16 / 64 | +7.9 % / +0.6 % / +0.5 % | — |",
        "| prefill attention T 4096 causal, no Δ | 0.754 ms, 182 TFLOP/s | cuDNN 0.261 ms, 527 "
        "TFLOP/s, FA2 0.504 ms, 273 TFLOP/s |",
        "| prefill rotation overhead (Δ per 512-token document) | +10.9 % | — |",
        "| RAG query prefill: 64 rows over 5 documents × 2,048 + own | 0.089 ms, 121 TFLOP/s "
        "(+3.7 % with Δ) | — |",
        "| decode GEMV gate/up / down (TB/s) | 3.63 / 3.88 | copy 4.30 TB/s |",
        "| gate / up (N 12288, K 4096) | 1.23× | 1.04× | 1.28× | 1.32× |",
        "| down (N 4096, K 12288) | 1.10× | 1.00× | 1.00× | 0.98× |",
        "| prefill 20,544 tokens | 1,104 ms (18,605 tok/s) | 771 ms |",
        "| decode, batch 1 | 4.59 ms/token (217.7 tok/s) | 52.0 ms/token (median) |",
        "| 1024 | 30.76 | 29.03 | 27.19 | 33.57 | 34.73 |",
        "PyTorch eager vanilla, same run: 8,244 ms.",
        "| all combined (K = 4) | 1,417 | 180.6 | 22.1 | 5.82× |",
        "| 8 | 4G | 456 / 844 | 943 / 1,569 | 8.14 / 4.89 | 0.76 / 0.60 | 2.07×, 1.86×, 1.66× |",
        "No reuse (`none`), none, rate 16, 4G: TTFT p50 / p99 3,051 / 5,591 ms, 2.42 req/s",
    ]:
        assert line in out, f"missing {line!r} in\n{out}"
    # The K = 4 log's own vanilla row is not a second vanilla row.
    assert out.count("| vanilla | 6,") == 1, out


def test_archive_reads_as_the_folder(tmp_path):
    tgz = tmp_path / "results.tgz"
    with tarfile.open(tgz, "w:gz") as t:  # gpu-run.sh packs "./NAME" entries
        for name in sorted(os.listdir(A)):
            t.add(os.path.join(A, name), arcname="./" + name)
    folder, archive = report(A), report(tgz)
    assert folder.returncode == 0 and archive.returncode == 0, folder.stderr + archive.stderr
    assert archive.stdout == folder.stdout
    assert "### LLaDA-8B" not in folder.stdout  # b's tables are absent without b


def test_first_input_wins():
    # Both folders hold gpu.txt: the first one named gives the run line.
    assert "Tue Dec  1 03:28:04 AM UTC 2026" in report(B, A).stdout
    assert "Mon Nov 30 11:36:48 PM UTC 2026" in report(A, B).stdout


def test_bad_inputs(tmp_path):
    p = report(tmp_path / "absent.tgz")
    assert p.returncode == 2 and "absent.tgz: no such file or folder" in p.stderr
    p = report(tmp_path)
    assert p.returncode == 1 and "no log of bench/gpu-run.sh" in p.stderr
    p = report()
    assert p.returncode == 2 and "Usage" in p.stderr


def test_gsm8k_fp8_rows_and_prompt_check(tmp_path):
    # b's K = 4 log made as a newer run prints it (an "all combined (no FP8)" row, FP8 on in
    # "all combined"), as K = 8, and a PyTorch run on another prompt length: the K = 8 rows are
    # named with their K, and the report says the PyTorch prompt differs from the engine's.
    with open(os.path.join(B, "bench-dllm-k4.log")) as f:
        log = f.read()
    row = next(l for l in log.splitlines() if l.startswith("| all combined |"))
    log = log.replace("Commit exactly 4", "Commit exactly 8").replace(
        row, row + "\n" + row.replace("all combined", "all combined (no FP8)").replace(
            "1417.3", "1500.0"))
    (tmp_path / "bench-dllm-k8.log").write_text(log)
    with open(os.path.join(B, "torch-llada.jsonl")) as f:
        rec = json.loads(f.readline())
    rec["e2e"]["prompt_tokens"] = 1000
    (tmp_path / "torch-llada.jsonl").write_text(json.dumps(rec) + "\n")
    p = report(tmp_path, B)
    assert p.returncode == 0, p.stderr
    assert "| all combined (no FP8, K = 8) | 1,500 |" in p.stdout, p.stdout
    assert "| all combined (K = 8) | 1,417 |" in p.stdout, p.stdout
    assert "(prompt 1000 tokens, random ids; the engine's: 575) — NOT the engine's" in p.stdout
    assert "NOT the engine's" not in report(A, B).stdout
