"""tests/test_rag_cli.py — `lazyinfer rag` as a RAG user's tool (tools/cmd-rag.c,
tools/rag-requests.c, tools/replay.c; issue 22, docs/RAG.md).

Runs the built binary (env BIN, default ./lazyinfer) on synth:tiny-llama (random weights, a
byte-level tokenizer: milliseconds a run) and, where an answer must read as text, on the default
SmolLM2 model. Inputs (documents of random words) come from li_seed("test_rag_cli"). Checks:
  - input: documents are UTF-8 text: UTF-16/32 (BOM or not), binary and Latin-1 files are refused
    with the reason, as a bad option (exit 2) or as the request's error record; empty documents
    and questions are refused with the request's id; CRLF reads as LF (same tokens, one cache
    entry); a UTF-8 BOM is dropped; every bad option value and conflicting options exit 2 with one
    line naming them; the workload's fields are checked (max_tokens <= 0, temperature < 0, ...); a
    repeated request id and a document id naming two texts warn; --help documents the workload
    format and the output;
  - output: one record per request: a multi-line answer is one escaped text line; --output jsonl
    writes one object per request, in input order, with its figures; stop strings cut answers;
    an answer cut by max_tokens ends before a character it cut;
  - a context (-c) beyond the model's trained positions warns, once;
  - failures are per request: bad lines and requests the engine refuses become error records,
    the others are answered exactly as alone, the exit status is 1;
  - requests are continuously batched (a request starts when another leaves, not when a whole
    chunk of --max-batch has finished) and arrival_ms delays a request's submission;
  - the default budget keeps every document of the run (no re-prefill on repeats) but none of a
    request over the context, and a budget too small for that warns; each cache mode prints only
    its own figures;
  - repeated --sample: each sample's passages go with its own question;
  - --repair (and a line's "repair"): the records count the repaired tokens as computed, and a
    repair of every document token answers as --cache full does.
"""
import json
import os
import random
import re
import subprocess

import pytest

from seeding import li_seed

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.abspath(os.environ.get("BIN", os.path.join(ROOT, "lazyinfer")))
SMOL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
SYNTH = "synth:tiny-llama"
# the sanitizer build is ~10x slower
TIMEOUT = 600 if "debug" in os.path.basename(BIN) else 120
WORDS = ("river city song album band record label tour single debut group chart year north "
         "south king queen live radio version cover guitar").split()
RNG = random.Random(li_seed("test_rag_cli"))
# "request ID: TTFT …, prompt P tokens (C from cache), docs H hit / M miss, G generated"
REQ = re.compile(r"^request (\S+): TTFT [\d.]+ ms, total [\d.]+ ms, prompt (\d+) tokens "
                 r"\((\d+) from cache\), docs (\d+) hit / (\d+) miss, (\d+) generated", re.M)


def rag(*args, model=SYNTH, timeout=TIMEOUT):
    return subprocess.run([BIN, "rag", "-m", model, "-t", "2", *map(str, args)],
                          capture_output=True, text=True, errors="replace", timeout=timeout)


def text(n_words):
    return " ".join(RNG.choice(WORDS) for _ in range(n_words))


def requests_of(stderr):
    """Per-request figures of the text output: {id: (prompt, cached, hits, misses, generated)}."""
    return {m[0]: tuple(map(int, m[1:])) for m in REQ.findall(stderr)}


def records(p):
    out = [json.loads(line) for line in p.stdout.splitlines()]
    assert len(out) == len(p.stdout.splitlines())
    return out


def write_jsonl(path, lines):
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


@pytest.fixture(scope="module")
def smol():
    assert os.path.exists(SMOL), f"no default model at {SMOL}: run scripts/setup.sh"
    return SMOL


# ---- input -----------------------------------------------------------------------------------

ENCODINGS = {  # name: (bytes of the file, a word the error must contain)
    "utf16le-no-bom": (lambda s: s.encode("utf-16-le"), "UTF-16"),
    "utf16-bom": (lambda s: s.encode("utf-16"), "UTF-16"),
    "utf16be-no-bom": (lambda s: s.encode("utf-16-be"), "UTF-16"),
    "utf32-bom": (lambda s: s.encode("utf-32"), "UTF-32"),
    "binary": (lambda s: bytes(RNG.randrange(256) for _ in range(300)) + b"\0\x01\x02", "NUL"),
    "latin1": (lambda s: (s + " caf\u00e9 na\u00efve").encode("latin-1"), "not UTF-8"),
}


@pytest.mark.parametrize("kind", sorted(ENCODINGS))
def test_documents_must_be_utf8_text(tmp_path, kind):
    enc, word = ENCODINGS[kind]
    f = tmp_path / f"{kind}.txt"
    f.write_bytes(enc("The secret code is 4821. " + text(20)))
    # as an option: a bad value, exit 2, one line naming the file and what it is
    p = rag("--doc", f, "--query", "What is the code?", "-n", 4)
    assert p.returncode == 2 and p.stdout == "", (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and str(f) in lines[0] and word in lines[0], p.stderr
    # in a workload: that request's error record, the next one answered
    w = write_jsonl(tmp_path / "w.jsonl", [
        {"id": "bad", "documents": [{"file": str(f)}], "query": "q", "max_tokens": 2},
        {"id": "good", "documents": [text(10)], "query": "q", "max_tokens": 2}])
    p = rag("--workload", w, "--output", "jsonl")
    assert p.returncode == 1, p.stderr
    bad, good = records(p)
    assert bad["id"] == "bad" and bad["finish_reason"] == "error" and word in bad["error"]
    assert str(f) in bad["error"] and bad["answer"] is None
    assert good["id"] == "good" and good["finish_reason"] != "error"


def test_utf8_bom_crlf_and_empty_documents(tmp_path):
    body = "\n".join(text(8) for _ in range(4))
    lf, crlf, bom = tmp_path / "lf.txt", tmp_path / "crlf.txt", tmp_path / "bom.txt"
    lf.write_bytes(body.encode())
    crlf.write_bytes(body.replace("\n", "\r\n").encode())
    bom.write_bytes(b"\xef\xbb\xbf" + body.encode())
    runs = {f: rag("--doc", f, "--query", "Which city?", "-n", 6) for f in (lf, crlf, bom)}
    for f, p in runs.items():
        assert p.returncode == 0, (f, p.stderr)
    assert runs[lf].stdout == runs[crlf].stdout == runs[bom].stdout
    assert requests_of(runs[lf].stderr) and \
        [v[0] for v in requests_of(runs[crlf].stderr).values()] == \
        [v[0] for v in requests_of(runs[lf].stderr).values()]
    # the CRLF copy is the LF document: one cache entry, so the second lookup hits
    p = rag("--doc", lf, "--doc", crlf, "--query", "Which city?", "-n", 2)
    (prompt, cached, hits, misses, gen), = requests_of(p.stderr).values()
    assert (hits, misses) == (1, 2), p.stderr  # misses: the chat's system block and one document
    # --queries in CRLF: the same questions, the same answers
    qs = [f"What about the {RNG.choice(WORDS)}?" for _ in range(3)]
    (tmp_path / "q.txt").write_bytes("\n".join(qs).encode() + b"\n")
    (tmp_path / "q-crlf.txt").write_bytes("\r\n".join(qs).encode() + b"\r\n")
    a = rag("--doc", lf, "--queries", tmp_path / "q.txt", "-n", 6)
    b = rag("--doc", lf, "--queries", tmp_path / "q-crlf.txt", "-n", 6)
    assert a.returncode == b.returncode == 0 and a.stdout == b.stdout
    assert len(requests_of(a.stderr)) == 3 and requests_of(a.stderr) == requests_of(b.stderr)
    # empty (or blank) documents: a bad --doc, or the request's error record with its id
    blank = tmp_path / "blank.txt"
    blank.write_text(" \n\t\r\n")
    p = rag("--doc", blank, "--query", "q")
    assert p.returncode == 2 and "empty" in p.stderr and str(blank) in p.stderr, p.stderr
    w = write_jsonl(tmp_path / "w.jsonl", [
        {"id": "q7", "documents": [text(5), "  \n"], "query": "q", "max_tokens": 2},
        {"id": "q8", "documents": [{"id": "e", "text": ""}], "query": "q", "max_tokens": 2}])
    p = rag("--workload", w, "--output", "jsonl")
    r7, r8 = records(p)
    assert p.returncode == 1
    assert r7["id"] == "q7" and "document 1 is empty" in r7["error"], r7
    assert r8["id"] == "q8" and "document 0 is empty" in r8["error"], r8


def test_empty_questions_are_refused(tmp_path):
    # as empty documents are: a bad option (exit 2, one line naming it), or the line's error
    # record; an empty question used to run a whole generation from the template alone
    doc = tmp_path / "d.txt"
    doc.write_text(text(12))
    for q in ("", " \t "):
        p = rag("--doc", doc, "--query", q, "-n", 2)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and p.stdout == "", (q, p.returncode, p.stdout, p.stderr)
        assert len(lines) == 1 and "--query" in lines[0] and "empty" in lines[0], p.stderr
        sample = tmp_path / "s.json"
        sample.write_text(json.dumps({"0": text(6), "query": q}))
        p = rag("--sample", sample, "-n", 2)
        assert p.returncode == 2 and "empty" in p.stderr and str(sample) in p.stderr, p.stderr
    w = write_jsonl(tmp_path / "w.jsonl", [
        {"id": "e", "documents": [text(5)], "query": "", "max_tokens": 2},
        {"id": "b", "documents": [text(5)], "query": " \n\t", "max_tokens": 2},
        {"id": "ok", "documents": [text(5)], "query": "q", "max_tokens": 2}])
    p = rag("--workload", w, "--output", "jsonl")
    e, b, ok = records(p)
    assert p.returncode == 1, p.stderr
    for r, line in ((e, 1), (b, 2)):
        assert r["finish_reason"] == "error" and r["answer"] is None, r
        assert r["error"].startswith(f"{w}:{line}:") and '"query" is empty' in r["error"], r
    assert ok["finish_reason"] != "error", ok


def test_bad_options_exit_2_with_one_line(tmp_path):
    doc = tmp_path / "d.txt"
    doc.write_text(text(12))
    sample = tmp_path / "s.json"
    sample.write_text(json.dumps({"0": text(6), "query": "q"}))
    w = write_jsonl(tmp_path / "w.jsonl", [{"documents": [text(4)], "query": "q"}])
    ok = ["--doc", doc, "--query", "q", "-n", 2]
    cases = [  # (arguments, what the one line must name)
        (ok + ["--cache", "bogus"], "--cache"), (ok + ["--budget", "12Q"], "--budget"),
        (ok + ["--budget", "0"], "--budget"), (ok + ["-n", "0"], "-n"),
        (ok + ["--max-batch", "0"], "--max-batch"), (ok + ["--page-size", "0"], "--page-size"),
        (ok + ["--temp", "-0.5"], "--temp"), (ok + ["--output", "xml"], "--output"),
        (ok + ["--kv-dtype", "f8"], "f8"), (ok + ["--chat-template", "bogus"], "bogus"),
        (ok + ["--ctx-size", "-1"], "--ctx-size"), (ok + ["--threads", "-1"], "--threads"),
        (ok + ["--page-size", "100000"], "100000"), (ok + ["--attn-impl", "x"], "'x'"),
        (ok + ["--evict", "mru"], "--evict"), (ok + ["--host-cache", "100000G"], "available"),
        (ok + ["--repair", "blend:2"], "(0, 1]"), (ok + ["--repair", "head:0"], ">= 1"),
        (ok + ["--repair", "cacheblend"], "unknown repair"),
        (ok + ["--repair", "head", "--cache", "prefix"], "lazy or copy"),
        (["--doc", tmp_path / "missing.txt", "--query", "q"], "missing.txt"),
        (["--doc", doc, "--queries", tmp_path / "missing.txt"], "missing.txt"),
        (["--workload", tmp_path / "missing.jsonl"], "missing.jsonl"),
        (["--sample", tmp_path / "missing.json"], "missing.json"),
        # conflicting options: --doc used to be ignored beside --workload
        (["--doc", doc, "--workload", w], "--workload"),
        (["--workload", w, "--query", "q"], "--workload"),
        (["--sample", sample, "--query", "q"], "--sample"),
        (["--sample", sample, "--doc", doc], "--sample"),
        (["--doc", doc], "--query"), ([], "nothing to answer"),
    ]
    for args, name in cases:
        p = rag(*args)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(lines) == 1 and name in lines[0], (args, p.returncode,
                                                                            p.stderr)
        assert p.stdout == "", args
    p = rag(*ok, model="/nonexistent/model.gguf")
    assert p.returncode == 2 and "/nonexistent/model.gguf" in p.stderr.strip().splitlines()[0]
    # the cost-aware policy is taken (serve shares the option: tools/cli.h CLI_TIER_OPTS)
    p = rag(*ok, "--evict", "gdsf")
    assert p.returncode == 0 and p.stdout.strip(), p.stderr


def test_workload_fields_are_checked(tmp_path):
    good = {"documents": [text(6)], "query": "q", "max_tokens": 3}
    lines = [
        ("max_tokens", {**good, "max_tokens": 0}), ("max_tokens", {**good, "max_tokens": -3}),
        ("temperature", {**good, "temperature": -1}), ("top_p", {**good, "top_p": 0}),
        ("top_k", {**good, "top_k": -2}), ("stop", {**good, "stop": 5}),
        ("arrival_ms", {**good, "arrival_ms": -1}), ("id", {**good, "id": [1]}),
        ("documents", {**good, "documents": "not a list"}), ("query", {"documents": []}),
        ("seed", {**good, "seed": "x"}), ("docs", {**good, "docs": [text(3)]}),
        ("document 0", {**good, "documents": [{"text": "a", "file": "b"}]}),
        ("JSON", "{not json"), ("object", "[1, 2]"),
        ("repair", {**good, "repair": "blend:1.5"}), ("repair", {**good, "repair": 3}),
    ]
    w = write_jsonl(tmp_path / "w.jsonl",
                    [good] + [x for _, x in lines] + [{**good, "temprature": 0.5}])
    p = rag("--workload", w, "--output", "jsonl")
    assert p.returncode == 1, p.stderr
    recs = records(p)
    assert len(recs) == len(lines) + 2
    assert recs[0]["finish_reason"] in ("stop", "length") and recs[-1]["finish_reason"] != "error"
    for (field, _), r in zip(lines, recs[1:]):
        assert r["finish_reason"] == "error" and field in r["error"], (field, r)
        assert r["error"].startswith(f"{w}:"), r  # FILE:LINE first
    # the misspelt field is named in a warning; the request still runs
    assert re.search(r'field "temprature" ignored', p.stderr), p.stderr


def test_a_context_beyond_the_trained_one_warns_once(tmp_path):
    # synth:tiny-llama was trained on 4096 positions; -c 8192 runs, with one warning although
    # rag loads the model twice (metadata first). The warning is the engine's, at the load:
    # every command that takes -c gives it (generate here).
    doc = tmp_path / "d.txt"
    doc.write_text(text(12))
    trained = re.compile(r"^lazyinfer: warning: a context of (\d+) tokens is beyond the (\d+) "
                         r"positions synth:tiny-llama was trained on", re.M)
    p = rag("--doc", doc, "--query", "q", "-n", 2, "-c", 8192)
    assert p.returncode == 0, p.stderr
    assert trained.findall(p.stderr) == [("8192", "4096")], p.stderr
    p = rag("--doc", doc, "--query", "q", "-n", 2, "-c", 4096)
    assert p.returncode == 0 and "warning" not in p.stderr, p.stderr
    g = subprocess.run([BIN, "generate", "-m", SYNTH, "-t", "2", "-c", "5000", "-n", "2", "-p",
                        "hi"], capture_output=True, text=True, errors="replace", timeout=TIMEOUT)
    assert g.returncode == 0 and trained.findall(g.stderr) == [("5000", "4096")], g.stderr


def test_help_documents_the_workload_and_the_output():
    p = subprocess.run([BIN, "rag", "--help"], capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode == 0
    for word in ('"documents"', '"query"', '"id"', '"file"', '"max_tokens"', '"temperature"',
                 '"stop"', '"arrival_ms"', "--output", "jsonl", "finish_reason", "ttft_ms",
                 "cached_tokens", "doc_misses", "Exit status"):
        assert word in p.stdout, word


def test_repeated_ids_warn(tmp_path):
    # a repeated request id (also a line's default id, its index), and a document id naming two
    # texts: data errors of a workload, named once each; the run goes on unchanged
    a, b = text(8), text(9)
    lines = [{"id": "q1", "documents": [{"id": "d", "text": a}], "query": "q", "max_tokens": 2},
             {"id": "q1", "documents": [{"id": "d", "text": a}], "query": "q", "max_tokens": 2},
             {"id": 3, "documents": [{"id": "d", "text": b}], "query": "q", "max_tokens": 2},
             {"documents": [{"id": "d", "text": text(7)}], "query": "q", "max_tokens": 2},
             {"id": "3", "documents": [{"id": "e", "text": a}], "query": "q", "max_tokens": 2}]
    w = write_jsonl(tmp_path / "w.jsonl", lines)
    p = rag("--workload", w, "--output", "jsonl")
    assert p.returncode == 0 and len(records(p)) == 5, p.stderr
    warnings = re.findall(r"^lazyinfer rag: warning: (.*)$", p.stderr, re.M)
    assert len(warnings) == 3, p.stderr
    assert f'{w}:2: request id "q1" repeats that of {w}:1' in warnings[0], warnings
    assert f"{w}:4: request id 3 repeats that of {w}:3" in warnings[1], warnings  # its index
    assert f'{w}:3: document id "d" names another text than at {w}:1' in warnings[2], warnings
    # many: the first 32 named, then a count
    w = write_jsonl(tmp_path / "many.jsonl", [
        {"id": f"r{i // 2}", "query": "q", "max_tokens": 1} for i in range(2 * 40)])
    p = rag("--workload", w)
    warnings = re.findall(r"^lazyinfer rag: warning: (.*)$", p.stderr, re.M)
    assert len(warnings) == 33 and warnings[-1] == "8 more request ids repeat", p.stderr
    # distinct ids, and one document id for one text (a file read twice): no warning
    f = tmp_path / "doc.txt"
    f.write_text(a)
    w = write_jsonl(tmp_path / "ok.jsonl", [
        {"id": k, "documents": [{"file": str(f)}, {"id": "d", "text": b}], "query": "q",
         "max_tokens": 2} for k in ("x", "y", 2)])
    p = rag("--workload", w)
    assert p.returncode == 0 and "warning" not in p.stderr, p.stderr


# ---- output ----------------------------------------------------------------------------------

def test_one_record_per_request(tmp_path, smol):
    qs = ["List three fruits, one per line.", "What is 2+2?"]
    (tmp_path / "q.txt").write_text("\n".join(qs) + "\n")
    (tmp_path / "d.txt").write_text("Fruit sellers in the market sell apples, pears and plums.")
    args = ["--doc", tmp_path / "d.txt", "--queries", tmp_path / "q.txt", "-n", 24]
    t = rag(*args, model=smol)
    assert t.returncode == 0, t.stderr
    lines = t.stdout.split("\n")
    assert lines[-1] == "" and len(lines) == 3, t.stdout  # one line a request
    assert "\\n" in lines[0], "the list answer should span lines (escaped here)"
    j = rag(*args, "--output", "jsonl", model=smol)
    assert j.returncode == 0, j.stderr
    recs = records(j)
    assert [r["id"] for r in recs] == [0, 1]
    unescape = lambda s: re.sub(r"\\(.)", lambda m: {"n": "\n", "r": "\r"}.get(m[1], m[1]), s)
    assert [r["answer"] for r in recs] == [unescape(x) for x in lines[:2]]
    assert "\n" in recs[0]["answer"]
    # a stop string ends the answer before it
    w = write_jsonl(tmp_path / "w.jsonl", [
        {"id": "s", "documents": [{"file": str(tmp_path / "d.txt")}], "query": qs[0],
         "max_tokens": 24, "stop": ["\n"]}])
    s, = records(rag("--workload", w, "--output", "jsonl", model=smol))
    assert s["answer"] == recs[0]["answer"].split("\n")[0] and s["finish_reason"] == "stop", s


def test_length_drops_an_incomplete_character(tmp_path, smol):
    # SmolLM2 writes this answer in Japanese, a character in two tokens: the 24th token is the
    # first bytes of one. A length-finished answer ends before them (they printed as a U+FFFD
    # a byte); 23 tokens end after a whole character, so both answers are the same text.
    q = "Write the Japanese word for thank you."
    w = write_jsonl(tmp_path / "w.jsonl",
                    [{"id": k, "query": q, "max_tokens": k} for k in (23, 24)])
    j = rag("--workload", w, "--output", "jsonl", "--max-batch", 2, model=smol)
    t = rag("--workload", w, "--max-batch", 2, model=smol)
    assert j.returncode == 0 and t.returncode == 0, (j.stderr, t.stderr)
    a23, a24 = records(j)
    assert a23["finish_reason"] == a24["finish_reason"] == "length", (a23, a24)
    assert a24["generated_tokens"] == 24 and a23["answer"] == a24["answer"], (a23, a24)
    assert any(ord(c) > 0x3000 for c in a24["answer"]) and "\ufffd" not in a24["answer"], a24
    assert t.stdout == a23["answer"] + "\n" + a24["answer"] + "\n", t.stdout  # valid UTF-8 too


def test_jsonl_records(tmp_path):
    reqs = [{"id": "first", "documents": [text(8), {"id": "x", "text": text(12)}],
             "query": "q one", "max_tokens": 5, "ignore_eos": True},
            {"id": 42, "documents": [text(5)], "query": "q two", "max_tokens": 7,
             "ignore_eos": True, "system": "Be brief."},
            {"query": "q three, no documents", "max_tokens": 1}]
    p = rag("--workload", write_jsonl(tmp_path / "w.jsonl", reqs), "--output", "jsonl")
    assert p.returncode == 0, p.stderr
    recs = records(p)
    assert [r["id"] for r in recs] == ["first", 42, 2]  # echoed, else the index
    for q, r in zip(reqs, recs):
        assert isinstance(r["answer"], str) and "error" not in r
        assert r["prompt_tokens"] == r["cached_tokens"] + r["computed_tokens"] > 0
        assert r["doc_hits"] + r["doc_misses"] == len(q.get("documents", [])) + 1  # + system
        assert 0 <= r["ttft_ms"] <= r["total_ms"] and r["start_ms"] <= r["end_ms"]
        assert r["generated_tokens"] <= q["max_tokens"]
    assert recs[0]["generated_tokens"] == 5 and recs[0]["finish_reason"] == "length"
    assert recs[1]["generated_tokens"] == 7


# ---- failures are per request ------------------------------------------------------------------

@pytest.mark.parametrize("bad", ["parse", "engine"])
def test_a_failing_request_does_not_end_the_run(tmp_path, bad):
    good = [{"id": f"g{i}", "documents": [text(6), text(4 + i)], "query": f"q {i}",
             "max_tokens": 4} for i in range(5)]
    if bad == "parse":  # refused while reading
        bads = ["{not json", {"id": "neg", "query": "q", "max_tokens": -1}]
    else:  # refused by the engine: over the context (li_submit), over the KV budget (admission);
        # "docs", the old name of "documents", so that the test runs the same on older builds
        good = [{("docs" if k == "documents" else k): v for k, v in g.items()} for g in good]
        bads = [{"id": "ctx", "docs": [text(140)], "query": "q", "max_tokens": 4},
                {"id": "kv", "docs": [text(60)], "query": "q", "max_tokens": 4}]
    lines = good[:2] + bads[:1] + good[2:4] + bads[1:] + good[4:]
    opts = ["-c", 512, "--budget", "128K"]  # 16 pages of 16 tokens: ~400 tokens fit
    p = rag("--workload", write_jsonl(tmp_path / "w.jsonl", lines), "--max-batch", 4, *opts)
    assert p.returncode == 1, p.stderr
    out = p.stdout.split("\n")[:-1]
    assert len(out) == len(lines), p.stdout
    failed = [i for i, x in enumerate(lines) if x in bads]
    assert all(out[i] == "" for i in failed)
    assert len(re.findall(r"^request \S+: error: ", p.stderr, re.M)) == 2, p.stderr
    if bad == "engine":
        assert re.search(r"request ctx: error: .*context", p.stderr), p.stderr
        assert re.search(r"request kv: error: .*KV budget", p.stderr), p.stderr
    # the good requests: answered, as alone and one at a time
    alone = rag("--workload", write_jsonl(tmp_path / "g.jsonl", good), "--max-batch", 1, *opts)
    assert alone.returncode == 0, alone.stderr
    assert [x for i, x in enumerate(out) if i not in failed] == alone.stdout.split("\n")[:-1]
    assert "5 answered, 2 failed" in p.stderr


# ---- continuous batching and arrivals ------------------------------------------------------------

def test_requests_are_continuously_batched(tmp_path):
    # A decodes 120 tokens; B, C, D 2 each. Two at a time: C and D must start while A runs
    # (in fixed chunks of --max-batch they would wait for A).
    reqs = [{"id": "A", "documents": [text(10)], "query": "long", "max_tokens": 120,
             "ignore_eos": True}] + \
           [{"id": k, "documents": [text(10)], "query": "short", "max_tokens": 2,
             "ignore_eos": True} for k in "BCD"]
    w = write_jsonl(tmp_path / "w.jsonl", reqs)
    p = rag("--workload", w, "--output", "jsonl", "--max-batch", 2)
    assert p.returncode == 0, p.stderr
    a, b, c, d = records(p)
    assert c["start_ms"] < a["end_ms"] and d["start_ms"] < a["end_ms"], (a, c, d)
    assert b["end_ms"] <= c["start_ms"]  # C took B's slot
    one = records(rag("--workload", w, "--output", "jsonl", "--max-batch", 1))
    assert [r["answer"] for r in one] == [r["answer"] for r in (a, b, c, d)]
    # arrival_ms: submitted no earlier; output stays in input order
    w = write_jsonl(tmp_path / "a.jsonl", [
        {"id": "late", "documents": [text(6)], "query": "q", "max_tokens": 2, "arrival_ms": 300},
        {"id": "now", "documents": [text(6)], "query": "q", "max_tokens": 2, "arrival_ms": 0}])
    late, now = records(rag("--workload", w, "--output", "jsonl", "--max-batch", 2))
    assert (late["id"], now["id"]) == ("late", "now")
    assert late["start_ms"] >= 300 and now["start_ms"] < late["start_ms"], (late, now)


# ---- the budget and the cache figures -------------------------------------------------------------

def test_default_budget_keeps_the_documents(tmp_path):
    # Two questions over two documents each, asked twice. With -c 256 the engine's own default
    # pool (one context: 16 pages) cannot hold the four documents (~5 pages each), so LRU evicts
    # every one before it is asked again: the default budget must add room for them.
    docs = [f"Document {k}: " + text(12) for k in range(4)]
    lines = [{"docs": docs[0:2], "query": "q one", "max_tokens": 4},  # "docs": the old name
             {"docs": docs[2:4], "query": "q two", "max_tokens": 4}] * 2
    w = write_jsonl(tmp_path / "w.jsonl", lines)
    p = rag("--workload", w, "-c", 256)
    assert p.returncode == 0, p.stderr
    r = requests_of(p.stderr)
    assert [r[k][3] for k in "01"] == [3, 2], p.stderr  # system + 2 docs, then 2 new docs
    assert [r[k][3] for k in "23"] == [0, 0], p.stderr  # repeats: every document a hit
    assert "warning" not in p.stderr
    # the engine's old default, given explicitly: re-prefills, and the run says so
    small = rag("--workload", w, "-c", 256, "--budget", "128K")
    assert small.returncode == 0, small.stderr
    assert sum(v[3] for v in requests_of(small.stderr).values()) > 5
    assert re.search(r"warning: .*evicted.*--budget \d+M keeps them all", small.stderr), small.stderr
    assert small.stdout == p.stdout  # the cache modes are exact: same answers


def test_default_budget_leaves_out_requests_over_the_context(tmp_path):
    # A document of ~17k tokens under -c 256: li_submit refuses its request, so the default
    # budget must not hold it (it used to plan KV for it: 4.5 GB for one 102k-token document).
    small = {"id": "small", "documents": [text(8)], "query": "q", "max_tokens": 4}
    big = {"id": "big", "documents": [text(3000)], "query": "q", "max_tokens": 4}
    budget = re.compile(r"^KV budget ([\d.]+) MiB: .* the run's documents \(([\d.]+) MiB\)", re.M)
    alone = rag("--workload", write_jsonl(tmp_path / "a.jsonl", [small]), "-c", 256)
    for mode in ("lazy", "copy", "prefix"):
        p = rag("--workload", write_jsonl(tmp_path / "w.jsonl", [big, small]), "-c", 256,
                "--output", "jsonl", "--cache", mode)
        assert p.returncode == 1, p.stderr
        b, s = records(p)
        assert "exceeds the context" in b["error"] and s["finish_reason"] == "length", (b, s)
        m = budget.search(p.stderr)
        want = budget.search(rag("--workload", tmp_path / "a.jsonl", "-c", 256, "--cache",
                                 mode).stderr)
        assert m and want and m.groups() == want.groups(), (mode, p.stderr)
        assert "not those of 1 request over the context" in p.stderr, p.stderr
    # the plan counts as li_submit does: prompt + max_tokens == -c is kept, one more is not
    (prompt, *_), = requests_of(alone.stderr).values()
    fit = rag("--workload", write_jsonl(tmp_path / "f.jsonl", [
        {**small, "max_tokens": 256 - prompt}]), "-c", 256)
    assert fit.returncode == 0 and "over the context" not in fit.stderr, fit.stderr
    assert budget.search(fit.stderr).groups() == budget.search(alone.stderr).groups()
    over = rag("--workload", write_jsonl(tmp_path / "o.jsonl", [
        {**small, "max_tokens": 257 - prompt}]), "-c", 256)
    assert over.returncode == 1 and "not those of 1 request over the context" in over.stderr


def test_each_mode_prints_its_own_figures(tmp_path):
    d1, d2 = tmp_path / "a.txt", tmp_path / "b.txt"
    d1.write_text(text(20))
    d2.write_text(text(25))
    (tmp_path / "q.txt").write_text("first question\nsecond question\n")
    args = ["--doc", d1, "--doc", d2, "--queries", tmp_path / "q.txt", "-n", 5]
    outs = {}
    for mode in ("lazy", "copy", "prefix", "none", "full"):
        p = rag(*args, "--cache", mode)
        assert p.returncode == 0, (mode, p.stderr)
        outs[mode] = p.stdout
        assert ("position-aware" in p.stderr) == (mode == "lazy"), (mode, p.stderr)
        assert ("document hits" in p.stderr) == (mode in ("lazy", "copy")), (mode, p.stderr)
        assert ("copies made" in p.stderr) == (mode == "copy"), (mode, p.stderr)
        if mode == "none":  # every block computed in every request: 2 × (system + 2 documents)
            m = re.search(r"cache none: nothing cached; (\d+) document blocks", p.stderr)
            assert m and int(m[1]) == 6, p.stderr
            assert not REQ.search(p.stderr)  # no per-request hit / miss figures
    assert outs["lazy"] == outs["copy"] == outs["prefix"] == outs["none"]  # exact modes


# ---- samples -------------------------------------------------------------------------------------

def test_each_sample_keeps_its_passages(tmp_path):
    paths = []
    for k in range(2):
        s = {str(i): text(RNG.randint(8, 16)) for i in range(3)}
        s["query"] = f"Question {k}: " + text(4)
        paths.append(tmp_path / f"{k}.json")
        paths[-1].write_text(json.dumps(s))
    both = rag("--sample", paths[0], "--sample", paths[1], "-n", 6)
    alone = [rag("--sample", f, "-n", 6) for f in paths]
    assert both.returncode == 0 and all(a.returncode == 0 for a in alone), both.stderr
    assert both.stdout == alone[0].stdout + alone[1].stdout
    prompts = [v[0] for v in requests_of(both.stderr).values()]
    assert prompts == [v[0] for a in alone for v in requests_of(a.stderr).values()], both.stderr


def test_repair_recomputes_in_context(tmp_path):
    # blend:1 and head:K over whole documents recompute every document token in context: the
    # answers of --cache full, token for token (tests/test-repair.c checks the logits)
    reqs = [{"id": i, "documents": [text(20), text(30)], "query": f"q {i}", "max_tokens": 6,
             "ignore_eos": True} for i in range(3)]
    w = write_jsonl(tmp_path / "w.jsonl", reqs)
    full = records(rag("--workload", w, "--output", "jsonl", "--cache", "full"))
    none = records(rag("--workload", w, "--output", "jsonl"))
    for rp in ("blend:1", "head:100000"):
        p = rag("--workload", w, "--output", "jsonl", "--repair", rp)
        assert p.returncode == 0, p.stderr
        recs = records(p)
        assert [r["answer"] for r in recs] == [r["answer"] for r in full], rp
        for r in recs:
            # both documents sit after the chat's system block: repaired whole, so computed
            assert r["repair_tokens"] > 0 and r["computed_tokens"] >= r["repair_tokens"], r
            assert r["prompt_tokens"] == r["cached_tokens"] + r["computed_tokens"], r
    assert all(r["repair_tokens"] == 0 for r in none)
    # a line's own repair wins over --repair
    w2 = write_jsonl(tmp_path / "w2.jsonl", [{**reqs[0], "repair": "none"}])
    recs = records(rag("--workload", w2, "--output", "jsonl", "--repair", "head:4"))
    assert recs[0]["repair_tokens"] == 0 and recs[0]["answer"] == none[0]["answer"]
