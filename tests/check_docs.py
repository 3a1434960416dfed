#!/usr/bin/env python3
"""check_docs.py — README.md and docs/*.md read as reference, not as a work log.

A reference page names a run by its date, its machine, its command and the baseline measured in
the same run (docs/BENCHMARKS.md's header), a target as a target, a baseline binary by its commit.
Work-log vocabulary says instead when and how the text was written, which a reader cannot use:

  issue      an issue number ("issue #20", "(issue 20)", "Issue 20 asks", "#20" outside a
             Markdown anchor; not the verb: "may issue 4 requests") or "the issue's" goal
  session    "session" (the author's work session), except a technical one: HTTP, TLS, SSH,
             Redis, TCP, client, user, chat, login, browser session
  call       a device call as the unit of a run: "same call" (not "same call to/of/as ..."),
             "one call" (not "in/with/by one call", "one call per/to/of/for each/into ...",
             "one call (`symbol`)"), "device call", "GPU/H100/H200 call", "<date> call",
             "earlier call", "later call"
  time       "today", "yesterday", "tonight", "this morning/afternoon/evening/week",
             "work period", "work session", "work log", "this stop", "earlier run", "rework",
             "we tried"

Fenced code blocks are scanned too (their comments are prose). Usage:
  tests/check_docs.py [--root DIR] [FILE ...]
prints each hit as `path:line: text  [rule: "match"]` and a FAIL line, exit 1; else one PASS
line, exit 0. Without FILE it scans DIR/README.md and DIR/docs/*.md. Tested by
tests/test_check_docs.py (work-log sentences must be flagged, technical ones must pass, this
repository must pass).
"""
import argparse
import glob
import os
import re
import sys

IC = re.IGNORECASE
TECH_SESSION = r"(?<!http )(?<!https )(?<!tls )(?<!ssh )(?<!redis )(?<!tcp )(?<!client )" \
               r"(?<!user )(?<!chat )(?<!login )(?<!browser )"

# (rule, pattern); a match anywhere on a line is a hit
RULES = [
    ("issue", re.compile(r"\bissues?\s*#\d+\b", IC)),
    ("issue", re.compile(r"\bissue\s+\d+\b(?=\s*[.,;:)]|\s*$|\s+(?:asks|says|wants))", IC)),
    ("issue", re.compile(r"\bthe issue's\b", IC)),
    ("issue", re.compile(r"(?:^|[\s,;:]|(?<!\])\()#\d+\b(?![\w-])")),
    ("session", re.compile(TECH_SESSION + r"\bsessions?\b", IC)),
    ("call", re.compile(r"\bsame call\b(?!\s+(?:to|of|as)\b)", IC)),
    ("call", re.compile(r"(?<!\bin )(?<!\bwith )(?<!\bby )\bone call\b"
                        r"(?!\s+(?:per|to|of|for each|into)\b)(?!\s*\(`)", IC)),
    ("call", re.compile(r"\b(?:device|gpu|h100|h200) calls?\b", IC)),
    ("call", re.compile(r"\b\d{4}-\d\d-\d\d\**\s+calls?\b", IC)),
    ("call", re.compile(r"\b(?:earlier|later) calls?\b", IC)),
    ("time", re.compile(r"\b(?:today|yesterday|tonight)(?:'s)?\b", IC)),
    ("time", re.compile(r"\bthis (?:morning|afternoon|evening|week)\b", IC)),
    ("time", re.compile(r"\bwork (?:periods?|sessions?|logs?)\b", IC)),
    ("time", re.compile(r"\bthis stop\b", IC)),
    ("time", re.compile(r"\bearlier runs? of the same day\b|\ban earlier run\b", IC)),
    ("time", re.compile(r"\brework(?:ed|s)?\b", IC)),
    ("time", re.compile(r"\bwe tried\b", IC)),
]


def default_files(root):
    files = [os.path.join(root, "README.md")]
    files += sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    return [f for f in files if os.path.isfile(f)]


def hits(text):
    """Yields (rule, matched text) for each work-log phrase of one line."""
    for rule, pat in RULES:
        for m in pat.finditer(text):
            yield rule, m.group(0).strip()


def check_file(path):
    """Yields (line number, line text, rule, match) for each hit in one file."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        for ln, text in enumerate(fh, 1):
            for rule, match in hits(text):
                yield ln, text.rstrip("\n"), rule, match


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("files", nargs="*", help="files to scan instead of README.md and docs/*.md")
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    files = args.files or default_files(root)
    if not files:
        print(f"FAIL: docs: no README.md or docs/*.md under {root}")
        return 1
    n_bad = 0
    for path in files:
        full = os.path.abspath(path)
        rel = os.path.relpath(full, root).replace(os.sep, "/") if full.startswith(root + os.sep) \
            else path
        for ln, text, rule, match in check_file(path):
            print(f'{rel}:{ln}: {text.strip()}  [{rule}: "{match}"]')
            n_bad += 1
    if n_bad:
        print(f"FAIL: docs: {n_bad} work-log phrase(s) in {len(files)} files: name the run by its "
              "date, machine, command and same-run baseline, a baseline binary by its commit")
        return 1
    print(f"PASS: docs: {len(files)} files free of work-log vocabulary (issue numbers, sessions, "
          "device calls, work periods)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
