// test.h — the tiny harness of the C tests. A test program calls TEST_CASE blocks, each printing
// "PASS: name" or "FAIL: name" (tests/run.sh counts those lines), and returns test_summary().
//
//   TEST_BEGIN("rmsnorm T=7 D=33");
//   CHECK(nmse < 1e-6, "nmse %g", nmse);
//   TEST_END();
//
// Random inputs come from one seed per program, test_seed("test-ops"): fixed unless
// LI_TEST_SEED says otherwise, and printed as "# test-ops: LI_TEST_SEED=N" so any run replays.
#ifndef LI_TEST_H
#define LI_TEST_H

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"

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
// Tokens a generation streams (on_token = test_on_token, user = a test_tokens): the first cap go
// to toks; n counts every one, so a run past n_predict shows.
typedef struct {
    int32_t *toks;  // (cap)
    int cap, n;
} test_tokens;

static inline bool test_on_token(void *user, int32_t tok) {
    test_tokens *c = user;
    if (c->n < c->cap) c->toks[c->n] = tok;
    c->n++;
    return true;
}

// Greedy decoding of n_predict tokens, past any EOS, streamed into *out (emptied here).
static inline li_generate_params test_greedy_params(int n_predict, test_tokens *out) {
    li_generate_params g = li_generate_default_params();
    g.n_predict = n_predict;
    g.sampling.temperature = 0;
    g.stop_at_eos = false;
    g.on_token = test_on_token;
    g.user = out;
    out->n = 0;
    return g;
}

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

// The seed `make test` draws every program's inputs from: the same on every run and machine, so
// the suite's pass/fail set is a function of the code alone. Other draws: LI_TEST_SEED below.
#define TEST_SEED_DEFAULT 20261202ull

// The seed of program `prog`'s random inputs, from LI_TEST_SEED: unset or empty, the fixed
// TEST_SEED_DEFAULT; a decimal number, that seed; "random", a fresh one from /dev/urandom (the
// clock where it cannot be read), as `make test-random` asks. Anything else exits with status 2
// rather than quietly testing another seed. The seed is printed first, on stdout as a "#" line
// (tests/run.sh shows it; not a PASS/FAIL line), flushed before any test can crash, so a failing
// draw replays with LI_TEST_SEED=N.
static inline uint64_t test_seed(const char *prog) {
    const char *env = getenv("LI_TEST_SEED");
    uint64_t seed = TEST_SEED_DEFAULT;
    if (env && !strcmp(env, "random")) {
        FILE *f = fopen("/dev/urandom", "rb");
        if (!f || fread(&seed, sizeof seed, 1, f) != 1) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            seed = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
        }
        if (f) fclose(f);
    } else if (env && *env) {
        char *end;
        errno = 0;
        seed = strtoull(env, &end, 10);
        if (*env < '0' || *env > '9' || *end || errno) {
            fprintf(stderr, "%s: LI_TEST_SEED=%s: want a decimal number or 'random'\n", prog, env);
            exit(2);
        }
    }
    printf("# %s: LI_TEST_SEED=%llu\n", prog, (unsigned long long)seed);
    fflush(stdout);
    return seed;
}

// A program's random stream: test_seed(prog) (printed) seeds *rng; the seed is returned for
// the tests that derive further seeds from it.
static inline uint64_t test_rng_init(li_rng *rng, const char *prog) {
    uint64_t seed = test_seed(prog);
    li_rng_seed(rng, seed);
    return seed;
}

// ---- random inputs from one program-wide stream (the op and model tests) -------------------
// main() seeds it: test_rng_init(&rng, "test-ops"). Programs that keep their own streams pass
// those explicitly and leave this one unused.
static li_rng rng __attribute__((unused));

static inline float randn(void) { return li_rng_normal(&rng); }
static inline int randint(int lo, int hi) {  // [lo, hi]
    return lo + (int)(li_rng_u64(&rng) % (uint64_t)(hi - lo + 1));
}
// x (n) = normal draws * scale.
static inline void fill(float *x, long n, float scale) {
    for (long i = 0; i < n; i++) x[i] = randn() * scale;
}
// Zeroed memory, or the program exits with status 2 (a test machine out of memory is no result).
static inline void *xmalloc(size_t n) {
    void *p = calloc(1, n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory (%zu bytes)\n", n);
        exit(2);
    }
    return p;
}

// The backend a suite runs on: LI_TEST_BACKEND (tests/run.sh sets cpu-devsim, gpu-check cuda),
// else dflt (NULL: the CPU).
static inline const char *test_backend(const char *dflt) {
    const char *b = getenv("LI_TEST_BACKEND");
    return b ? b : dflt;
}

#ifdef LAZYINFER_H
// The model at `path` on the test's backend (LI_TEST_BACKEND) with one thread; NULL (the error
// printed) when it does not load.
static inline li_model *test_model_load(const char *path) {
    li_model_params mp = li_model_default_params();
    mp.path = path;
    mp.n_threads = 1;
    mp.backend = test_backend(NULL);
    li_model *m = NULL;
    if (li_model_load(&m, &mp) != LI_OK) {
        fprintf(stderr, "  %s: %s\n", path, li_last_error());
        return NULL;
    }
    return m;
}
#endif

#ifdef JANSSON_H  // (programs that include jansson.h before this file)
// The integers of JSON array a into out (at most cap); their count, or -1 when more.
static inline int test_json_ints(json_t *a, int32_t *out, int cap) {
    int n = (int)json_array_size(a);
    if (n > cap) return -1;
    for (int i = 0; i < n; i++) out[i] = (int32_t)json_integer_value(json_array_get(a, i));
    return n;
}
#endif

#ifdef LI_BACKEND_H  // (programs that include backend/backend.h before this file)
// The two CPU tables the op tests compare: the fp64 oracle (*ref) and the fast table with
// n_threads workers (*fast; 0: all cores). 0 with the reason on stderr when either fails.
static inline int test_cpu_backends(li_backend **ref, li_backend **fast, int n_threads) {
    if (li_backend_cpu_ref_init(ref) != LI_OK || li_backend_cpu_init(fast, n_threads) != LI_OK) {
        fprintf(stderr, "cannot create backends: %s\n", li_error_msg());
        return 0;
    }
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

// out (nq, H, Dh) = softmax(q k^T * scale) v over all nk keys, no mask, in fp64: q (nq, H, Dh),
// k and v (nk, Hkv, Dh), head h reading KV head h / (H / Hkv).
static inline void test_attention_full(float *out, const float *q, const float *k, const float *v,
                                       int nq, int H, int nk, int Hkv, int Dh, double scale) {
    double *s = xmalloc((size_t)(nk ? nk : 1) * sizeof *s);
    for (int i = 0; i < nq; i++)
        for (int h = 0; h < H; h++) {
            int hk = h / (H / Hkv);
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j < nk; j++) {
                double d = 0;
                for (int x = 0; x < Dh; x++)
                    d += (double)q[((size_t)i * H + h) * Dh + x] *
                         k[((size_t)j * Hkv + hk) * Dh + x];
                s[j] = d * scale;
                if (s[j] > mx) mx = s[j];
            }
            for (int j = 0; j < nk; j++) sum += (s[j] = exp(s[j] - mx));
            for (int x = 0; x < Dh; x++) {
                double a = 0;
                for (int j = 0; j < nk; j++) a += s[j] * v[((size_t)j * Hkv + hk) * Dh + x];
                out[((size_t)i * H + h) * Dh + x] = (float)(a / sum);
            }
        }
    free(s);
}

static inline int test_has_nan(const float *a, long n) {
    for (long i = 0; i < n; i++)
        if (isnan(a[i])) return 1;
    return 0;
}

#endif
