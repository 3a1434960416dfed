// zipf.c — Zipf(α) rank sampler (see zipf.h). Not a distribution library: one law, ranks only.
// Tested by tests/test_bench_rag.py (chi-square against the exact pmf).
#include "zipf.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

li_status li_zipf_init(li_zipf *z, int64_t n, double alpha) {
    memset(z, 0, sizeof *z);
    if (n < 1)
        return li_error_set(LI_ERR_INVALID_ARG, "Zipf: need at least one rank (N = %lld)",
                            (long long)n);
    if (!(alpha >= 0 && alpha <= 100))
        return li_error_set(LI_ERR_INVALID_ARG, "Zipf: alpha must be in [0, 100] (got %g)", alpha);
    z->n = n;
    z->alpha = alpha;
    // Near α = 1 the rejection constants (2^(α-1) - 1 → 0) lose precision: use the table there.
    if (alpha <= 1.001) {
        z->cdf = malloc((size_t)n * sizeof *z->cdf);
        if (!z->cdf)
            return li_error_set(LI_ERR_OOM, "Zipf: out of memory for %lld ranks", (long long)n);
        double s = 0;
        for (int64_t i = 0; i < n; i++)
            z->cdf[i] = (s += pow((double)(i + 1), -alpha));
        for (int64_t i = 0; i < n; i++)
            z->cdf[i] /= s;
        z->cdf[n - 1] = 1.0;
    } else {
        z->am1 = alpha - 1.0;
        z->b = pow(2.0, z->am1);
        z->umin = pow((double)n + 1.0, -z->am1); // U in (umin, 1] ⇔ X <= N
    }
    return LI_OK;
}

void li_zipf_free(li_zipf *z) {
    if (!z) return;
    free(z->cdf);
    z->cdf = NULL;
}

int64_t li_zipf_draw(const li_zipf *z, li_rng *rng) {
    if (z->cdf) {
        double u = li_rng_uniform(rng);
        int64_t lo = 0, hi = z->n - 1; // first i with cdf[i] > u
        while (lo < hi) {
            int64_t mid = lo + (hi - lo) / 2;
            if (z->cdf[mid] > u)
                hi = mid;
            else
                lo = mid + 1;
        }
        return lo + 1;
    }
    // Devroye, Non-Uniform Random Variate Generation (1986), p. 551, as numpy's random_zipf.
    for (;;) {
        double u01 = li_rng_uniform(rng);
        double U = u01 * z->umin + (1.0 - u01); // (umin, 1]
        double V = li_rng_uniform(rng);
        double X = floor(pow(U, -1.0 / z->am1));
        if (X < 1.0 || X > (double)z->n) continue; // rounding at the ends of the range
        double T = pow(1.0 + 1.0 / X, z->am1);
        if (V * X * (T - 1.0) / (z->b - 1.0) <= T / z->b) return (int64_t)X;
    }
}
