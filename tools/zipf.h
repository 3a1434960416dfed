// zipf.h — Zipf(α) rank sampler over 1..N for the RAG workloads of the tools (bench rag).
//
// P(r) ∝ r^-α for r = 1..N, i.e. "draw Zipf(α), reject r > N" as the LazyAttention paper's
// scripts do (ARCHITECTURE.md §3.6). α <= 1.001: inverse CDF over an (N) table; else Devroye's
// rejection method (numpy's random_zipf) with U restricted so that X <= N, which is the same
// conditional law without the wasted draws. Shared by `lazyinfer sim` and `bench rag`; tested
// through tests/test_sim.py and tests/test_bench_rag.py (chi-square against the exact pmf).
#ifndef LI_TOOLS_ZIPF_H
#define LI_TOOLS_ZIPF_H

#include <stdint.h>

#include "../src/core/core.h"

typedef struct {
    int64_t n;           // N: ranks 1..N
    double alpha;        // α >= 0
    double *cdf;         // (N) P(rank <= i + 1) for α <= 1.001, else NULL
    double am1, b, umin; // rejection constants for α > 1.001
} li_zipf;

// LI_ERR_INVALID_ARG for N < 1 or α outside [0, 100]; LI_ERR_OOM if the table cannot be made.
li_status li_zipf_init(li_zipf *z, int64_t n, double alpha);
void li_zipf_free(li_zipf *z);
// One rank in 1..N.
int64_t li_zipf_draw(const li_zipf *z, li_rng *rng);

#endif
