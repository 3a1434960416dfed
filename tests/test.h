// test.h — the tiny harness of the C tests. A test program calls TEST_CASE blocks, each printing
// "PASS: name" or "FAIL: name" (tests/run.sh counts those lines), and returns test_summary().
//
//   TEST_BEGIN("rmsnorm T=7 D=33");
//   CHECK(nmse < 1e-6, "nmse %g", nmse);
//   TEST_END();
#ifndef LI_TEST_H
#define LI_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int test_n_pass, test_n_fail, test_cur_failed;
static const char *test_cur_name;

#define TEST_BEGIN(name) (test_cur_name = (name), test_cur_failed = 0)
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "  %s:%d: %s: check failed: %s: ", __FILE__, __LINE__,               \
                    test_cur_name, #cond);                                                         \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            test_cur_failed = 1;                                                                   \
        }                                                                                          \
    } while (0)
#define TEST_END()                                                                                 \
    do {                                                                                           \
        if (test_cur_failed) {                                                                     \
            printf("FAIL: %s\n", test_cur_name);                                                   \
            test_n_fail++;                                                                         \
        } else {                                                                                   \
            printf("PASS: %s\n", test_cur_name);                                                   \
            test_n_pass++;                                                                         \
        }                                                                                          \
        fflush(stdout);                                                                            \
    } while (0)
// A test that cannot run here (no GPU, no model file): printed with its reason, counted nowhere.
#define TEST_SKIP(name, ...)                                                                       \
    do {                                                                                           \
        printf("SKIP: %s: ", (name));                                                              \
        printf(__VA_ARGS__);                                                                       \
        printf("\n");                                                                              \
    } while (0)

#ifdef LAZYINFER_H
// 1 when `backend` (LI_TEST_BACKEND; NULL: the CPU) opens here, probed by loading the small model
// `path`; otherwise the suite's model tests print one SKIP with the reason (no GPU on this machine)
// instead of failing one by one.
static inline int test_backend_usable(const char *suite, const char *backend, const char *path) {
    li_model_params p = li_model_default_params();
    p.path = path;
    p.backend = backend;
    li_model *m = NULL;
    if (li_model_load(&m, &p) != LI_OK) {
        printf("SKIP: %s: no usable '%s' backend here: %s\n", suite, backend ? backend : "cpu",
               li_last_error());
        return 0;
    }
    li_model_free(m);
    return 1;
}
#endif

static inline int test_summary(void) {
    fprintf(stderr, "%d passed, %d failed\n", test_n_pass, test_n_fail);
    return test_n_fail ? 1 : 0;
}

// Normalised mean squared error: sum (a-b)^2 / sum b^2 (b is the reference).
static inline double test_nmse(const float *a, const float *ref, long n) {
    double num = 0, den = 0;
    for (long i = 0; i < n; i++) {
        double d = (double)a[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? num / den : num;
}

// Index of the largest of x[0..n) (the first on ties) and its lead over the second largest.
static inline int test_argmax_gap(const float *x, int n, float *gap) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    float second = -INFINITY;
    for (int i = 0; i < n; i++)
        if (i != best && x[i] > second) second = x[i];
    *gap = x[best] - second;
    return best;
}

static inline int test_has_nan(const float *a, long n) {
    for (long i = 0; i < n; i++)
        if (isnan(a[i])) return 1;
    return 0;
}

#endif
