"""seeding.py — the seed of a Python test module's random inputs, as tests/test.h's test_seed().

LI_TEST_SEED unset or empty: the fixed DEFAULT (make test draws the same inputs every run); a
decimal number: that seed; "random": a fresh one. The seed is recorded for the "# name:
LI_TEST_SEED=N" lines that tests/conftest.py prints at the end of the run (replay with that value).
"""
import os
import random

DEFAULT = 20261202  # = TEST_SEED_DEFAULT in tests/test.h
USED = {}  # module name -> seed, printed by conftest.py


def li_seed(name):
    env = os.environ.get("LI_TEST_SEED", "")
    if env == "random":
        seed = random.SystemRandom().randrange(1 << 31)
    elif env:
        if not env.isdigit():
            raise ValueError(f"LI_TEST_SEED={env}: want a decimal number or 'random'")
        seed = int(env)
    else:
        seed = DEFAULT
    USED[name] = seed
    return seed
