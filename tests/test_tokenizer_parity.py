"""Tokenizer parity: lazyinfer's tokenizer against HF `tokenizers` (and chat rendering against
jinja2) on the same deterministic set of strings.

Oracles
- Llama-3: data/llama3-tokenizer/tokenizer.json loaded by tokenizers.Tokenizer.from_file.
- SmolLM2: built in Python from the GGUF metadata of the default model (tokens, merges,
  token_type 3 → special AddedToken) as tokenizers.Tokenizer(BPE(vocab, merges)) with
  pre-tokenizer Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False,
  use_regex=True)] and a ByteLevel decoder: the pipeline of SmolLM2's HF tokenizer.json
  (transformers' GGUF conversion is not used: transformers is not installed). lazyinfer is run on
  the GGUF itself and on the tokenizer.json that this HF tokenizer saves (pair-style merges).

lazyinfer is called through tests/tokenize-batch.c (compiled here with the Makefile's flags), one
process per tokenizer for all strings. Checked: identical ids (with parse_special on and off,
with BOS), decode(encode(s)) == s and == HF's decode, invalid UTF-8 rejected, load time < 1 s,
encode speed >= 1 MB/s, chat renderings == jinja2 renderings of the real templates.
Run: .venv/bin/python -m pytest -q tests/test_tokenizer_parity.py
"""
import os
import random
import struct
import subprocess
import sys
import unicodedata

import pytest
from seeding import li_seed

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LLAMA3_DIR = os.path.join(ROOT, "data", "llama3-tokenizer")
SMOL_GGUF = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
LLAMA31_TEMPLATE = os.path.join(ROOT, "tests", "data", "tokenizer", "llama31-chat-template.jinja")
SEED = li_seed("test_tokenizer_parity.py")

tokenizers = pytest.importorskip("tokenizers")


# ---- the C driver ---------------------------------------------------------------------------

CFLAGS = ["-std=c11", "-O2", "-g", "-Wall", "-Wextra", "-Wno-unused-parameter", "-pthread",
          "-D_DEFAULT_SOURCE", "-D_POSIX_C_SOURCE=200809L", "-Iinclude", "-Isrc"]
LIBS = ["-lpcre2-8", "-ljansson", "-lpthread", "-lm"]


def _srcs(d):
    p = os.path.join(ROOT, "src", d)
    return sorted(os.path.join("src", d, f) for f in os.listdir(p) if f.endswith(".c"))


@pytest.fixture(scope="session")
def driver(tmp_path_factory):
    """Compiles tests/tokenize-batch.c with the tokenizer, core and format sources."""
    exe = str(tmp_path_factory.mktemp("tok") / "tokenize-batch")
    cc = os.environ.get("CC", "cc")
    srcs = ["tests/tokenize-batch.c"] + _srcs("tokenizer") + _srcs("core") + _srcs("format")
    r = subprocess.run([cc] + CFLAGS + ["-o", exe] + srcs + LIBS, cwd=ROOT,
                       capture_output=True, text=True)
    if r.returncode != 0:
        lib = os.path.join(ROOT, "build", "release", "liblazyinfer.a")
        r2 = subprocess.run([cc] + CFLAGS + ["-o", exe, "tests/tokenize-batch.c", lib] + LIBS,
                            cwd=ROOT, capture_output=True, text=True)
        assert r2.returncode == 0, "cannot build tokenize-batch:\n" + r.stderr + r2.stderr
    return exe


def run_batch(driver, args, records):
    """records: list of (bytes, add_bos, parse_special) → list of (ids | error str, decoded),
    plus the driver's timing dict."""
    inp = bytearray()
    for b, bos, sp in records:
        inp += struct.pack("<II", (1 if bos else 0) | (2 if sp else 0), len(b)) + b
    r = subprocess.run([driver] + args, input=bytes(inp), capture_output=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    d, p, out = r.stdout, 0, []
    while p < len(d):
        (n,) = struct.unpack_from("<i", d, p)
        p += 4
        if n < 0:
            (ln,) = struct.unpack_from("<I", d, p)
            out.append((d[p + 4:p + 4 + ln].decode(errors="replace"), None))
            p += 4 + ln
            continue
        ids = list(struct.unpack_from("<%di" % n, d, p))
        p += 4 * n
        (ln,) = struct.unpack_from("<I", d, p)
        out.append((ids, d[p + 4:p + 4 + ln]))
        p += 4 + ln
    assert len(out) == len(records)
    timing = dict(zip(*[iter(r.stderr.decode().split()[-6:])] * 2))
    return out, {k: float(v) for k, v in timing.items()}


def run_chat(driver, args, convs):
    inp = bytearray()
    for msgs, gen in convs:
        inp += struct.pack("<II", 1 if gen else 0, len(msgs))
        for role, content in msgs:
            for s in (role, content):
                b = s.encode()
                inp += struct.pack("<I", len(b)) + b
    r = subprocess.run([driver, "chat"] + args, input=bytes(inp), capture_output=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    d, p, out = r.stdout, 0, []
    while p < len(d):
        st, ln = struct.unpack_from("<iI", d, p)
        out.append((st, d[p + 8:p + 8 + ln].decode()))
        p += 8 + ln
    return out


# ---- the strings ----------------------------------------------------------------------------

SAMPLES = [
    "Hello world", "The quick brown fox jumps over the lazy dog.", "naïve café résumé",
    "Привет, как дела?", "Γειά σου Κόσμε", "你好，世界！今天天气很好。", "日本語のテキストとカタカナ、ひらがな。",
    "한국어 문장입니다.", "مرحبا بالعالم، كيف حالك؟", "שלום עולם", "नमस्ते दुनिया, यह हिंदी है।",
    "สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่าง", "ሰላም ዓለም", "Xin chào thế giới", "İstanbul'da ŞEHİR",
    "👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇫🇷🇯🇵🇺🇸 ❤️‍🔥 🧑🏿‍💻", "e\u0301 a\u0308 n\u0303 Z\u0351\u0364\u0307a\u0336l\u0328g\u0353o",
    "ﬁ ﬀ ℌ ① ² ½ Ⅻ ٣ ۴ ९ ๓ 𝟘𝟙", "\u200b\u200c\u200d\u2060\ufeff", "tab\tsep\tvalues\t\t",
    "line1\r\nline2\r\n\r\nline3\n\n\n", "   leading and trailing   ", "\u00a0nbsp\u00a0\u00a0x",
    "\u3000全角\u3000スペース", "\u2009thin\u2002en\u2003em\u205f", "\x0bvt\x0cff\x1cfs\x85nel",
    "I'M YOU'LL we'LL They'RE it'S don'T she'D I'Ve", "'s 's 'S 'll 'LL 're 'Re",
    "def f(x):\n    return x**2  # square\n", "int main(void) { printf(\"%d\\n\", 42); }",
    "<html><body class=\"x\">&amp;</body></html>", "SELECT * FROM t WHERE a >= 10;",
    "https://example.com/path?q=1&r=two#frag", "user@example.org", "$1,234.56 vs €7.890,12",
    "3.14159265358979 2.71828 1e-10 0x1F 0b1011", "...!!!???---___***", "«quotes» „low“ ‘single’",
    "<|begin_of_text|>", "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
    "<|im_start|>system\nYou are helpful<|im_end|>\n<|im_start|>user\nhi<|im_end|>",
    "text<|endoftext|>more<|im_end|>", "<|reserved_special_token_5|> x", "<|not_a_token|>",
    "<|eot_id", "eot_id|>", "<<|eot_id|>>", "", " ", "  ", "\n", "a", "\t\n \r",
    # Unicode 15 letters and emoji. Not Unicode 15 digits such as U+1E4F0: PCRE2 10.42 (Unicode 14)
    # does not know them as \p{N} while HF's Digits/regex do, so "1\U0001E4F02" splits
    # differently (a documented limitation of the PCRE2 tables).
    "nul\x00byte\x00", "x\U0001E030\U0001E031y a\U00011F04b \U0001FAE8",
]

WORDS = ["the", "The", "THE", "of", "and", "tokenizer", "Tokenizer", "BPE", "merges", "über",
         "straße", "ça", "日本", "中文", "한국", "ภาษา", "हिंदी", "عربى", "🙂", "🚀", "x", "I'm",
         "can't", "O'Neil", "rock'n'roll", "e-mail", "C++", "foo_bar", "fooBar", "__init__",
         "12", "007", "3.5", "1,000", "-42", "+7", "v1.2.3", "\\n", "{}", "[]", "()", "=>",
         "<|eot_id|>", "<|im_start|>", "<|begin_of_text|>", "<|endoftext|>"]
SEPS = [" ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "", ",", ". ", " \n ", "   \n\n"]

# Code points drawn for random strings: many scripts and symbol blocks. Characters whose
# properties changed after Unicode 14 (PCRE2 10.42's tables) are avoided by drawing only
# characters unicodedata knows as assigned.
RANGES = [(0x20, 0x7E), (0xA0, 0x24F), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x4FF),
          (0x590, 0x5FF), (0x600, 0x6FF), (0x900, 0x97F), (0xE00, 0xE7F), (0x1100, 0x11FF),
          (0x2000, 0x206F), (0x2070, 0x209F), (0x20A0, 0x20BF), (0x2100, 0x214F),
          (0x2190, 0x21FF), (0x2200, 0x22FF), (0x2460, 0x24FF), (0x2500, 0x257F),
          (0x3000, 0x303F), (0x3040, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3),
          (0xFF00, 0xFFEF), (0x1F300, 0x1F5FF), (0x1F600, 0x1F64F), (0x1F680, 0x1F6FF),
          (0x1F900, 0x1F9FF), (0x1D400, 0x1D7FF), (0x10000, 0x1007F)]


def gen_strings(seed=SEED):
    rng = random.Random(seed)
    out = list(SAMPLES)
    for n in range(1, 41):  # digits of every length, alone and in text
        out.append("".join(rng.choice("0123456789") for _ in range(n)))
        out.append("x" + "".join(rng.choice("0123456789") for _ in range(n)) + " y")
    for _ in range(900):  # word salads with separators
        k = rng.randint(1, 25)
        out.append("".join(rng.choice(WORDS) + rng.choice(SEPS) for _ in range(k)))
    for _ in range(700):  # random code points
        k = rng.randint(1, 40)
        s = []
        while len(s) < k:
            lo, hi = rng.choice(RANGES)
            c = chr(rng.randint(lo, hi))
            if unicodedata.category(c) not in ("Cn", "Cs", "Co"):
                s.append(c)
        out.append("".join(s))
    for _ in range(200):  # whitespace-heavy strings
        out.append("".join(rng.choice([" ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "a", "1",
                                       "!", "é"]) * rng.randint(1, 5) for _ in range(rng.randint(1, 12))))
    for _ in range(100):  # mixed-case contractions
        w = rng.choice(["I", "you", "we", "they", "it", "she"])
        c = "".join(ch.upper() if rng.random() < 0.5 else ch
                    for ch in rng.choice(["'s", "'t", "'re", "'ve", "'m", "'ll", "'d"]))
        out.append(w + c + rng.choice(["", " ok", "!", "s"]))
    base = " ".join(SAMPLES)
    for n in (1000, 5000, 20000, 60000):  # long strings
        out.append((base * (n // len(base) + 1))[:n])
    out.append("a" * 30000)
    out.append(" " * 5000 + "x")
    out.append("\n" * 3000)
    out.append("9" * 4000)
    return out


STRINGS = gen_strings()


# ---- oracles --------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def hf_llama3():
    return tokenizers.Tokenizer.from_file(os.path.join(LLAMA3_DIR, "tokenizer.json"))


@pytest.fixture(scope="session")
def smol_reader():
    if not os.path.exists(SMOL_GGUF):
        pytest.skip("default model not downloaded (make setup)")
    import gguf
    return gguf.GGUFReader(SMOL_GGUF)


@pytest.fixture(scope="session")
def hf_smol(tmp_path_factory, smol_reader):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    r = smol_reader

    def strs(key):
        f = r.fields[key]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    toks = strs("tokenizer.ggml.tokens")
    f = r.fields["tokenizer.ggml.token_type"]
    types = [int(f.parts[i][0]) for i in f.data]
    merges = [tuple(m.split(" ")) for m in strs("tokenizer.ggml.merges")]
    tk = Tokenizer(models.BPE({t: i for i, t in enumerate(toks)}, merges, ignore_merges=False))
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken(t, special=True, normalized=False)
                           for t, ty in zip(toks, types) if ty == 3])
    path = str(tmp_path_factory.mktemp("smol") / "tokenizer.json")
    tk.save(path)
    return tk, path


def hf_encode_all(tk, records):
    """HF ids for every (bytes, add_bos, parse_special) record, batched per flag combination."""
    out = [None] * len(records)
    for bos in (False, True):
        for sp in (False, True):
            idx = [i for i, r in enumerate(records) if r[1] == bos and r[2] == sp]
            if not idx:
                continue
            tk.encode_special_tokens = not sp
            try:
                encs = tk.encode_batch([records[i][0].decode() for i in idx],
                                       add_special_tokens=bos)
            finally:
                tk.encode_special_tokens = False
            for i, e in zip(idx, encs):
                out[i] = e.ids
    return out


def check_parity(tk, results, records, label):
    bad = []
    wants = hf_encode_all(tk, records)
    want_decs = tk.decode_batch(wants, skip_special_tokens=False)
    for (b, bos, sp), (ids, dec), want, want_dec in zip(records, results, wants, want_decs):
        s = b.decode()
        if ids != want:
            bad.append("ids differ for %r:\n  lazyinfer %s\n  HF        %s" % (s[:200], ids[:60], want[:60]))
            continue
        if dec.decode(errors="replace") != want_dec:
            bad.append("decode differs from HF for %r: %r vs %r" % (s[:100], dec[:100], want_dec[:100]))
        if not bos and dec != b:
            bad.append("decode(encode(s)) != s for %r: %r" % (s[:100], dec[:100]))
    assert not bad, "%s: %d of %d strings differ (seed %d):\n%s" % (
        label, len(bad), len(records), SEED, "\n".join(bad[:10]))
    print("%s: %d strings, 0 mismatches" % (label, len(records)))


def records_for(strings):
    recs = [(s.encode(), False, True) for s in strings]
    recs += [(s.encode(), False, False) for s in strings if "<|" in s]   # specials as text
    recs += [(s.encode(), True, True) for s in strings[:200]]            # with BOS
    return recs


# ---- tests ----------------------------------------------------------------------------------

def test_llama3_parity(driver, hf_llama3):
    recs = records_for(STRINGS)
    res, tm = run_batch(driver, ["json", os.path.join(LLAMA3_DIR, "tokenizer.json"),
                                 os.path.join(LLAMA3_DIR, "tokenizer_config.json")], recs)
    check_parity(hf_llama3, res, recs, "llama3")
    assert len(STRINGS) >= 2000
    # Napkin: the vocabulary is 9 MB of JSON (128k tokens, 280k merges); jansson parses it in
    # ~0.3 s here, the tables take ~0.05 s. 1 s is the bound the engine's start-up can afford.
    assert tm["load_ms"] < 1000, tm
    mbps = tm["encode_bytes"] / 1e6 / (tm["encode_ms"] / 1e3)
    print("llama3: load %.0f ms, encode %.2f MB/s over %.2f MB" % (
        tm["load_ms"], mbps, tm["encode_bytes"] / 1e6))
    assert mbps >= 1.0, tm


def test_smollm2_gguf_parity(driver, hf_smol):
    tk, _ = hf_smol
    recs = records_for(STRINGS)
    res, tm = run_batch(driver, ["gguf", SMOL_GGUF], recs)
    check_parity(tk, res, recs, "smollm2 (gguf)")
    mbps = tm["encode_bytes"] / 1e6 / (tm["encode_ms"] / 1e3)
    print("smollm2: load %.0f ms, encode %.2f MB/s" % (tm["load_ms"], mbps))
    assert tm["load_ms"] < 1000, tm
    assert mbps >= 1.0, tm


def test_smollm2_json_parity(driver, hf_smol):
    tk, path = hf_smol
    recs = records_for(STRINGS[::3])
    res, _ = run_batch(driver, ["json", path, "-"], recs)
    check_parity(tk, res, recs, "smollm2 (tokenizer.json)")


def test_added_token_flags_parity(driver, hf_smol, tmp_path):
    """lstrip / rstrip / single_word / non-special added tokens, on SmolLM2's vocabulary."""
    from tokenizers import AddedToken, Tokenizer
    _, path = hf_smol
    tk = Tokenizer.from_file(path)
    tk.add_tokens([AddedToken("<L>", lstrip=True, normalized=False),
                   AddedToken("<R>", rstrip=True, normalized=False),
                   AddedToken("<LR>", lstrip=True, rstrip=True, normalized=False),
                   AddedToken("zq", single_word=True, normalized=False),
                   AddedToken("plain added", normalized=False)])
    tk.add_special_tokens([AddedToken("<S>", lstrip=True, rstrip=True, normalized=False)])
    p = str(tmp_path / "tokenizer.json")
    tk.save(p)
    rng = random.Random(SEED + 3)
    atoms = ["<L>", "<R>", "<LR>", "zq", "plain added", "<S>", " ", "  ", "\t", "\n", "a", "zq",
             "x", "1", "é", "\u00a0", "\u3000", "_", "-", "<", "plain"]
    strs = ["".join(rng.choice(atoms) for _ in range(rng.randint(1, 12))) for _ in range(600)]
    recs = [(s.encode(), False, True) for s in strs] + [(s.encode(), False, False) for s in strs]
    res, _ = run_batch(driver, ["json", p, "-"], recs)
    bad = []
    for (b, _, sp), (ids, dec), want in zip(recs, res, hf_encode_all(tk, recs)):
        if ids != want:
            bad.append("%r special=%s: lazyinfer %s, HF %s" % (b.decode(), sp, ids, want))
    assert not bad, "%d of %d differ (seed %d):\n%s" % (len(bad), len(recs), SEED, "\n".join(bad[:10]))


@pytest.mark.parametrize("behavior", ["removed", "merged_with_previous", "merged_with_next",
                                      "contiguous", "isolated"])
def test_pre_tokenizer_variants_parity(driver, hf_smol, tmp_path, behavior):
    """Split behaviours, String patterns, Digits(individual_digits=False) and ByteLevel with
    add_prefix_space, on SmolLM2's vocabulary (paths the two real tokenizers do not take)."""
    from tokenizers import Regex, Tokenizer, pre_tokenizers
    _, path = hf_smol
    tk = Tokenizer.from_file(path)
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\s*[,;]\s*"), behavior=behavior),
        pre_tokenizers.Split("--", behavior="isolated"),
        pre_tokenizers.Digits(individual_digits=False),
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)])
    p = str(tmp_path / "tokenizer.json")
    tk.save(p)
    strs = [s for s in STRINGS[::4]] + ["a, b;c ,, d;;e", "x--y---z", "12,345;678 90", ", lead",
                                        "trail ;", "--", ",", "a1b22c333"]
    recs = [(s.encode(), False, True) for s in strs]
    res, _ = run_batch(driver, ["json", p, "-"], recs)
    bad = []
    for (b, _, _), (ids, dec), want in zip(recs, res, hf_encode_all(tk, recs)):
        if ids != want:
            bad.append("%r: lazyinfer %s, HF %s" % (b.decode()[:80], ids[:30], want[:30]))
    assert not bad, "%s: %d of %d differ (seed %d):\n%s" % (
        behavior, len(bad), len(recs), SEED, "\n".join(bad[:10]))


def test_invalid_utf8_rejected(driver):
    rng = random.Random(SEED + 1)
    bads = [b"\xff", b"abc\xc3", b"\xed\xa0\x80", b"\xc0\xaf", b"ok \xf4\x90\x80\x80", b"\x80x"]
    for _ in range(50):
        s = bytearray("héllo wörld 你好".encode())
        s[rng.randrange(len(s))] = rng.choice([0x80, 0xBF, 0xC0, 0xFE, 0xFF])
        try:
            bytes(s).decode()
        except UnicodeDecodeError:
            bads.append(bytes(s))
    res, _ = run_batch(driver, ["json", os.path.join(LLAMA3_DIR, "tokenizer.json"), "-"],
                       [(b, False, True) for b in bads])
    for b, (ids, _) in zip(bads, res):
        assert isinstance(ids, str) and "UTF-8" in ids, (b, ids)


# ---- chat templates -------------------------------------------------------------------------

CONVS = [
    ([("user", "Hello!")], True),
    ([("user", "  What is 2+2?\n ")], True),
    ([("system", "You are terse."), ("user", "Hi"), ("assistant", "Hello."), ("user", "Bye")], True),
    ([("system", "\tBe nice.\u3000"), ("user", "x")], False),
    ([("user", "a"), ("assistant", " b "), ("user", "ü\n")], True),
    ([("user", "")], True),
]


def render_jinja(template, msgs, gen, bos, **kw):
    import jinja2
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)  # as transformers renders
    return env.from_string(template).render(
        messages=[{"role": r, "content": c} for r, c in msgs], add_generation_prompt=gen,
        bos_token=bos, **kw)


def test_chat_llama3_matches_jinja(driver):
    import json
    cfg = json.load(open(os.path.join(LLAMA3_DIR, "tokenizer_config.json")))
    got = run_chat(driver, ["json", os.path.join(LLAMA3_DIR, "tokenizer.json"),
                            os.path.join(LLAMA3_DIR, "tokenizer_config.json")], CONVS)
    for (msgs, gen), (st, text) in zip(CONVS, got):
        assert st == 0, text
        assert text == render_jinja(cfg["chat_template"], msgs, gen, cfg["bos_token"])


def test_chat_llama31_matches_jinja(driver, tmp_path):
    import json
    tmpl = open(LLAMA31_TEMPLATE).read()
    cfg = json.load(open(os.path.join(LLAMA3_DIR, "tokenizer_config.json")))
    cfg["chat_template"] = tmpl
    p = tmp_path / "tokenizer_config.json"
    p.write_text(json.dumps(cfg))
    got = run_chat(driver, ["json", os.path.join(LLAMA3_DIR, "tokenizer.json"), str(p)], CONVS)
    for (msgs, gen), (st, text) in zip(CONVS, got):
        assert st == 0, text
        want = render_jinja(tmpl, msgs, gen, "<|begin_of_text|>",
                            raise_exception=lambda m: (_ for _ in ()).throw(Exception(m)))
        assert text == want
        assert "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n" in text


def test_chat_smollm2_matches_jinja(driver, smol_reader):
    f = smol_reader.fields["tokenizer.chat_template"]
    tmpl = bytes(f.parts[f.data[0]]).decode()
    got = run_chat(driver, ["gguf", SMOL_GGUF], CONVS)
    for (msgs, gen), (st, text) in zip(CONVS, got):
        assert st == 0, text
        assert text == render_jinja(tmpl, msgs, gen, "<|im_start|>")
    assert "You are a helpful AI assistant named SmolLM, trained by Hugging Face" in got[0][1]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-s"]))
