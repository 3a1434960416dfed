"""tests/test_fresh_clone.py — the repository is self-contained: a fresh clone runs the README.

A module fixture `git clone`s the committed HEAD of this repository into an empty temporary
folder (TMP/repo, nothing else in TMP: no sibling folder to lean on), copies the already-built
binary (env BIN, default ./lazyinfer) to TMP/repo/lazyinfer (a copy, not a link: the binary looks
for data/ next to itself, and a link would find this checkout's), links models/ to this
checkout's models/ (the default model scripts/setup.sh fetched), runs `scripts/setup.sh data`
(unpacks the tokenizer) and then:
  - runs the README's CPU examples there (README_COMMANDS, small sizes): each exits 0 and prints
    what it should; the data defaults resolve inside the clone;
  - `git grep` finds no path leaving the repository in src tools tests scripts bench Makefile,
    and no tracked file reaches 4 MiB;
  - the data defaults also resolve next to the binary from another working directory, and name
    the path and the fix when absent;
  - scripts/setup.sh never runs sudo: not root with packages missing, it prints the
    `sudo apt-get install` line and exits non-zero; as root it runs apt-get itself.
Nothing here is random. No rebuild: the binary under test is the one `make test` built.
"""
import os
import re
import shlex
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.abspath(os.environ.get("BIN", "./lazyinfer"))
MODEL_REL = os.path.join("models", "SmolLM2-135M-Instruct.Q4_1.gguf")
# The sanitizer build (make test DEBUG=1) is ~10x slower: the RAG example takes ~100 s there.
TIMEOUT = 600 if "debug" in os.path.basename(BIN) else 120

# The README's command-line examples that run on the CPU, with small sizes so that the whole file
# takes a few seconds. They mirror README.md's examples: change both together.
# (command, regex the output must match, "out" = stdout or "err" = stderr)
README_COMMANDS = [
    ('./lazyinfer generate -p "The capital of France is" -n 8 --temp 0', r"Paris", "out"),
    ('./lazyinfer tokenize -m data/llama3-tokenizer/tokenizer.json "Hello world"',
     r"^9906 1917$", "out"),
    ("./lazyinfer info -m synth:llama-3.1-8b", r"parameters:\s+8030261248 ", "out"),
    ("./lazyinfer bench generate -t 2 -p 16 -n 4 -r 1", r"\| pp16 \|[\s\S]*\| tg4 \|", "out"),
    ("./lazyinfer rag --sample data/rag-samples/1.json -n 8",
     r"request 0: TTFT [\d.]+ ms.*8 generated", "err"),
    ("./lazyinfer rag --workload data/rag-requests.jsonl --output jsonl --max-batch 4",
     r'\A\{"id":"code","answer":"[^"]*4821[^\n]*\n\{"id":"cheese",.*\n\{"id":"both",.*\n\Z',
     "out"),
    ("./lazyinfer bench rag -m synth:tiny-llama --requests 4 --rate 0 --doc-len 64 "
     "--query-len 16 --out-len 4",
     r"samples: data/rag-samples \([\s\S]*\| lazy \| 4/4 \|", "out"),
    ("./lazyinfer sim --docs 1000 --alpha 0.8526 --k 1 --positions 20 --budget 12800 "
     "--doc-len 128", r"paper ratio .* 2\.860x", "out"),
    ('./lazyinfer dllm -m synth:tiny-llada -p "hello" --gen-length 32 --block-length 8 '
     "--steps 8 --lacache all --trace", r"gen_length 32, block 8, 8 steps taken", "err"),
    ("./lazyinfer bench dllm -m synth:tiny-llada -n 1 --gen-length 8 --block-length 8 --steps 4",
     r"GSM8K question\(s\) from data/gsm8k/test\.jsonl[\s\S]*\| all combined \|", "out"),
]


def run(cmd, cwd, env=None, timeout=TIMEOUT):
    args = shlex.split(cmd) if isinstance(cmd, str) else cmd
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, timeout=timeout,
                          text=True, errors="replace")


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    head = run(["git", "rev-parse", "HEAD"], ROOT)
    if head.returncode != 0:
        pytest.skip(f"{ROOT} is not a git checkout")
    assert os.access(BIN, os.X_OK), f"no built binary at {BIN} (make, or set BIN)"
    assert os.path.exists(os.path.join(ROOT, MODEL_REL)), \
        f"no default model at {ROOT}/{MODEL_REL}: run scripts/setup.sh"
    repo = tmp_path_factory.mktemp("fresh") / "repo"
    p = run(["git", "clone", "-q", ROOT, str(repo)], ROOT)
    assert p.returncode == 0, p.stderr
    p = run(["git", "checkout", "-q", "--detach", head.stdout.strip()], repo)  # HEAD even if detached
    assert p.returncode == 0, p.stderr
    assert sorted(os.listdir(repo.parent)) == ["repo"]
    shutil.copy2(BIN, repo / "lazyinfer")
    os.symlink(os.path.realpath(os.path.join(ROOT, "models")), repo / "models")
    p = run(["scripts/setup.sh", "data"], repo)
    assert p.returncode == 0, f"scripts/setup.sh data: {p.stderr}"
    return repo


@pytest.mark.parametrize("cmd,expect,stream", README_COMMANDS, ids=[c[0][12:40] for c in
                                                                    README_COMMANDS])
def test_readme_command(clone, cmd, expect, stream):
    p = run(cmd, clone)
    assert p.returncode == 0, f"{cmd}: exit {p.returncode}\n{p.stderr[-2000:]}"
    text = p.stdout if stream == "out" else p.stderr
    assert re.search(expect, text, re.M), f"{cmd}: no /{expect}/ in\n{text[-2000:]}"


def test_no_path_leaves_the_repository(clone):
    p = run(["git", "grep", "-n", r"\.\./shared", "--", "src", "tools", "tests", "scripts",
             "bench", "Makefile"], clone)
    assert p.returncode == 1 and p.stdout == "", f"paths outside the repository:\n{p.stdout}"


def test_tracked_files_under_4_mib(clone):
    big = []
    for name in run(["git", "ls-files", "-z"], clone).stdout.split("\0"):
        path = clone / name
        if name and path.is_file() and not path.is_symlink() and path.stat().st_size >= 4 << 20:
            big.append((name, path.stat().st_size))
    assert not big, f"tracked files of 4 MiB or more: {big}"


def test_data_next_to_the_binary(clone, tmp_path):
    # From another working directory the defaults are found next to the binary.
    p = run([str(clone / "lazyinfer"), "bench", "dllm", "-m", "synth:tiny-llada", "-n", "1",
             "--gen-length", "8", "--block-length", "8", "--steps", "4", "--methods", "+FACache"],
            tmp_path)
    assert p.returncode == 0, p.stderr
    assert f"from {clone}/data/gsm8k/test.jsonl" in p.stdout, p.stdout
    p = run([str(clone / "lazyinfer"), "bench", "rag", "-m", "synth:tiny-llama", "--requests", "2",
             "--rate", "0", "--doc-len", "32", "--query-len", "8", "--out-len", "2", "--mode",
             "lazy"], tmp_path)
    assert p.returncode == 0, p.stderr
    assert f"samples: {clone}/data/rag-samples (" in p.stdout, p.stdout


def test_missing_data_named_with_the_fix(tmp_path):
    # A binary with no data/ next to it, run where there is none: exit 2, the path and the fix.
    alone = tmp_path / "bin"
    alone.mkdir()
    shutil.copy2(BIN, alone / "lazyinfer")
    p = run([str(alone / "lazyinfer"), "bench", "dllm", "-m", "synth:tiny-llada", "-n", "1"],
            tmp_path)
    assert p.returncode == 2, p.stderr
    assert "data/gsm8k/test.jsonl" in p.stderr and f"{alone}/data/gsm8k/test.jsonl" in p.stderr
    assert "--prompts FILE" in p.stderr
    p = run([str(alone / "lazyinfer"), "bench", "rag", "-m", "synth:tiny-llama"], tmp_path)
    assert p.returncode == 2, p.stderr
    assert "data/rag-samples" in p.stderr and "--samples DIR" in p.stderr


def fake_tools(path, uid, apt_rc):
    """PATH entries standing in for id, dpkg-query (every package missing), sudo and apt-get
    (each call logged to path/calls)."""
    path.mkdir()
    log = path / "calls"
    tools = {
        "id": f"echo {uid}",
        "dpkg-query": "exit 1",
        "sudo": f'echo "sudo $*" >> {log}; exit 1',
        "apt-get": f'echo "apt-get $*" >> {log}; [ "$1" = update ] && exit 0; exit {apt_rc}',
    }
    for name, body in tools.items():
        (path / name).write_text("#!/bin/sh\n" + body + "\n")
        (path / name).chmod(0o755)
    return log


def test_setup_never_runs_sudo(clone, tmp_path):
    log = fake_tools(tmp_path / "user", 1000, 1)
    env = dict(os.environ, PATH=f"{tmp_path / 'user'}:{os.environ['PATH']}")
    p = run(["bash", "scripts/setup.sh"], clone, env=env)
    assert p.returncode != 0
    assert re.search(r"^  sudo apt-get update && sudo apt-get install -y build-essential .*"
                     r"libmicrohttpd-dev libhiredis-dev libxxhash-dev redis-server$", p.stderr,
                     re.M), p.stderr
    assert not log.exists(), log.read_text()  # neither sudo nor apt-get ran


def test_setup_as_root_installs(clone, tmp_path):
    log = fake_tools(tmp_path / "root", 0, 1)  # apt-get install fails: setup stops there
    env = dict(os.environ, PATH=f"{tmp_path / 'root'}:{os.environ['PATH']}")
    p = run(["bash", "scripts/setup.sh"], clone, env=env)
    assert p.returncode != 0
    calls = log.read_text().splitlines()
    assert len(calls) == 2 and calls[0] == "apt-get update -qq", calls  # no sudo
    assert re.match(r"apt-get install -y -qq build-essential .*libmicrohttpd-dev libhiredis-dev "
                    r"libxxhash-dev redis-server$", calls[1]), calls


# ---- the first make on a machine without our packages --------------------------------------
# On a fresh machine pkg-config knows none of the -dev packages until `setup` has installed them.
# Stand-ins: a pkg-config that fails until a stamp file exists, and a scripts/setup.sh (in a
# clone of HEAD) that only creates the stamp. `make demo` and `make test` must each pass on
# their first run there: their build must read pkg-config after setup. (scripts/
# test-fresh-machine.sh does the same on a real Debian 12 root; this is its fast stand-in.)
# `make test` runs with a tests/run.sh stand-in: the build is what is checked, not the suite.
def fresh_machine_clone(tmp_path, name):
    repo = tmp_path / name
    p = run(["git", "clone", "-q", "--no-hardlinks", ROOT, str(repo)], ROOT)
    assert p.returncode == 0, p.stderr
    head = run(["git", "rev-parse", "HEAD"], ROOT).stdout.strip()
    assert run(["git", "checkout", "-q", "--detach", head], repo).returncode == 0
    stamp = tmp_path / f"{name}.packages-installed"
    tools = tmp_path / f"{name}-bin"
    tools.mkdir()
    real = shutil.which("pkg-config")
    assert real, "pkg-config is not installed (scripts/setup.sh installs it)"
    (tools / "pkg-config").write_text(f'#!/bin/sh\n[ -e "{stamp}" ] || exit 1\nexec {real} "$@"\n')
    (repo / "scripts" / "setup.sh").write_text(f'#!/bin/sh\necho "setup: stand-in"\n'
                                               f'touch "{stamp}"\n')
    (repo / "tests" / "run.sh").write_text('#!/bin/sh\necho "1 passed, 0 failed"\n')
    for f in (tools / "pkg-config", repo / "scripts" / "setup.sh", repo / "tests" / "run.sh"):
        f.chmod(0o755)
    os.symlink(os.path.realpath(os.path.join(ROOT, "models")), repo / "models")
    assert run(["bash", "-c", "gzip -dc data/llama3-tokenizer/tokenizer.json.gz > "
                "data/llama3-tokenizer/tokenizer.json"], repo).returncode == 0
    env = dict(os.environ, PATH=f"{tools}:{os.environ['PATH']}", MAKEFLAGS="-j2")
    env.pop("MAKELEVEL", None)
    assert run(["pkg-config", "--exists", "hiredis"], repo, env=env).returncode == 1
    return repo, env, stamp


@pytest.mark.parametrize("target,expect", [("demo", r"Paris"), ("test", r"^1 passed, 0 failed$")])
def test_first_make_without_packages(tmp_path, target, expect):
    repo, env, stamp = fresh_machine_clone(tmp_path, target)
    p = run(["make", target], repo, env=env, timeout=900)
    assert stamp.exists(), p.stdout[-2000:] + p.stderr[-2000:]
    assert p.returncode == 0, f"make {target}: exit {p.returncode}\n{p.stderr[-3000:]}"
    assert re.search(expect, p.stdout, re.M), p.stdout[-2000:]


def test_make_without_packages_says_what_to_run(tmp_path):
    # A plain `make` does not run setup: it must stop before compiling, naming the fix.
    repo, env, stamp = fresh_machine_clone(tmp_path, "plain")
    p = run(["make"], repo, env=env)
    assert p.returncode != 0 and not stamp.exists()
    assert "run 'make setup'" in p.stderr, p.stderr[-2000:]
    assert not (repo / "build").exists() or not list((repo / "build").rglob("*.o"))
