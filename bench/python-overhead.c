// python-overhead.c — the C side of bench/python_overhead.py: BATCHES batches of 10 li_generate
// calls (greedy, N tokens, EOS ignored, every token's piece copied out in the callback as the
// Python package does) after 20 warm-up calls; prints the fastest batch's and the median batch's
// µs per call. Built by the script against build/release/liblazyinfer.so.
//   python-overhead MODEL BATCHES N
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lazyinfer.h"

typedef struct {
    li_model *m;
    char buf[1 << 16];  // the text so far
    size_t len;
} text_ctx;

static bool on_token(void *user, int32_t tok) {
    text_ctx *c = user;
    size_t n;
    if (li_token_to_piece(c->m, tok, c->buf + c->len, sizeof c->buf - c->len, &n) != LI_OK)
        return false;
    c->len += n < sizeof c->buf - c->len ? n : 0;
    return true;
}

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: python-overhead MODEL BATCHES N\n");
        return 2;
    }
    int n_batches = atoi(argv[2]), n_predict = atoi(argv[3]);
    if (n_batches < 1 || n_predict < 1) return 2;
    li_model_params mp = li_model_default_params();
    mp.path = argv[1];
    mp.n_threads = 1;
    li_model *m;
    if (li_model_load(&m, &mp) != LI_OK) {
        fprintf(stderr, "python-overhead: %s\n", li_last_error());
        return 1;
    }
    int32_t *ids = NULL;
    int n_ids = 0;
    double *batch = malloc((size_t)n_batches * sizeof *batch);
    static text_ctx c;
    c.m = m;
    li_generate_params gp = li_generate_default_params();
    gp.n_predict = n_predict;
    gp.sampling.temperature = 0;
    gp.stop_at_eos = false;
    gp.on_token = on_token;
    gp.user = &c;
    int status = 1;
    if (!batch || li_tokenize(m, "hello", 5, true, false, &ids, &n_ids) != LI_OK) goto out;
    for (int k = -2; k < n_batches; k++) {  // two batches of warm-up
        double t0 = now_us();
        for (int i = 0; i < 10; i++) {
            c.len = 0;
            if (li_generate(m, ids, n_ids, &gp, NULL) != LI_OK) goto out;
        }
        if (k >= 0) batch[k] = (now_us() - t0) / 10;
    }
    qsort(batch, (size_t)n_batches, sizeof *batch, cmp_double);
    printf("%.1f %.1f\n", batch[0], batch[n_batches / 2]);
    status = 0;
out:
    if (status) fprintf(stderr, "python-overhead: %s\n", li_last_error());
    li_free_tokens(ids);
    free(batch);
    li_model_free(m);
    return status;
}
