"""conftest.py — prints the seed of every test module that drew random inputs (tests/seeding.py),
one "# name: LI_TEST_SEED=N" line each at the end of the run, so a failing draw can be replayed."""
from seeding import USED


def pytest_terminal_summary(terminalreporter):
    for name, seed in sorted(USED.items()):
        terminalreporter.write_line(f"# {name}: LI_TEST_SEED={seed}")
