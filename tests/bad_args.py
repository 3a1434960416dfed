"""bad_args.py — bad-argument cases shared by the command-line tests (test_sim.py,
test_bench_kernels.py)."""


def named_by_flag(bad_values):
    """(args, msg) cases from {flag: [values it refuses]}: each value given to its flag, the error
    message expected to name the flag."""
    return [([flag, v], flag) for flag, values in bad_values.items() for v in values]
