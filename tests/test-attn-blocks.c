// test-attn-blocks.c — src/backend/attn-blocks.c: a paged attention call cut into library blocks
// (query rotated back by each run's Δ, plain softmax attention per block, blocks merged by their
// log-sum-exp) gives the oracle's attention (ops-ref.c, which rotates K instead). The plans are
// executed here in fp64 on the CPU: what the CUDA backend's cuDNN path does on the GPU, with the
// arithmetic made exact enough that any planning error shows. Also: the patterns that have no
// such split are refused.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/attn-blocks.h"
#include "backend/backend.h"
#include "test.h"

typedef struct {
    int P, Hkv, H, Dh;
    uint64_t words[256];
    int n_pages;
    int64_t next_page;
    int32_t kv_first[512], n_visible[512];
    int T;
} scenario;

// Appends a block of n keys whose pages carry Δ (fresh pages, the last one partly filled).
static int64_t add_block(scenario *s, int n, int64_t delta) {
    int64_t k0 = 0;
    for (int p = 0; p < s->n_pages; p++) k0 += li_page_count(s->words[p]);
    for (int i = 0; i < n; i += s->P) {
        int cnt = n - i < s->P ? n - i : s->P;
        s->words[s->n_pages++] = li_page_word(s->next_page++, cnt, delta);
    }
    return k0;
}

// Rows of a causal block: T rows whose last sees `end` keys, all seeing from `first`.
static void add_rows(scenario *s, int T, int64_t first, int64_t end) {
    for (int t = 0; t < T; t++) {
        s->kv_first[s->T + t] = (int32_t)first;
        s->n_visible[s->T + t] = (int32_t)(end - T + 1 + t);
    }
    s->T += T;
}

// Rotation of a head by pos with magnitude 1 (rope op with a pure-rotation table).
static void rotate_rows(li_backend *ref, float *x, int rows, int H, int Dh, int64_t pos,
                        const li_rope_table *tab) {
    li_rope_table pure = *tab;
    pure.mscale = 1.0f;
    int32_t *p = malloc((size_t)rows * sizeof *p);
    for (int i = 0; i < rows; i++) p[i] = (int32_t)pos;
    ref->ops->rope(ref, x, LI_DTYPE_F32, x, p, rows, H, Dh, &pure);
    free(p);
}

// Logical key j of the table: (page id, slot).
static void key_at(const scenario *s, int64_t j, int64_t *page, int *slot) {
    for (int p = 0; p < s->n_pages; p++) {
        int cnt = li_page_count(s->words[p]);
        if (j < cnt) {
            *page = li_page_id(s->words[p]);
            *slot = (int)j;
            return;
        }
        j -= cnt;
    }
    LI_ASSERT(0);
}

// Runs the plan in fp64: every entry's rows against its keys, then the LSE merge.
static void run_plan(li_backend *ref, const scenario *s, const li_attn_blocks *b,
                     const li_kv_storage *kv, const float *q, float *out, float scale,
                     const li_rope_table *tab) {
    const int H = s->H, Dh = s->Dh, G = s->H / s->Hkv;
    const float *kvf = kv->data;
    double *lse = calloc((size_t)b->n_entries * b->max_rows * H, sizeof *lse);
    double *o = calloc((size_t)b->n_entries * b->max_rows * H * Dh, sizeof *o);
    double *sc = malloc((size_t)(b->max_keys + 1) * sizeof *sc);
    float *qe = malloc((size_t)b->max_rows * H * Dh * sizeof *qe);
    for (int e = 0; e < b->n_entries; e++) {
        const li_attn_entry *en = &b->entries[e];
        const li_attn_group *g = &b->groups[en->group];
        memcpy(qe, q + (size_t)g->t0 * H * Dh, (size_t)g->n * H * Dh * sizeof *qe);
        int64_t delta = b->segs[en->seg].delta;
        if (delta) rotate_rows(ref, qe, g->n, H, Dh, -delta, tab);
        for (int r = 0; r < g->n; r++)
            for (int h = 0; h < H; h++) {
                int nk = en->causal ? en->n_keys - (g->n - 1 - r) : en->n_keys;
                double mx = -INFINITY, z = 0;
                for (int j = 0; j < nk; j++) {
                    int64_t page;
                    int slot;
                    key_at(s, en->key0 + j, &page, &slot);
                    const float *k = kvf + li_kv_offset(kv, page, 0, 0, h / G, slot);
                    double d = 0;
                    for (int i = 0; i < Dh; i++) d += (double)qe[((size_t)r * H + h) * Dh + i] * k[i];
                    sc[j] = d * scale;
                    if (sc[j] > mx) mx = sc[j];
                }
                double *oe = o + (((size_t)e * b->max_rows + r) * H + h) * Dh;
                for (int j = 0; j < nk; j++) {
                    int64_t page;
                    int slot;
                    key_at(s, en->key0 + j, &page, &slot);
                    const float *v = kvf + li_kv_offset(kv, page, 0, 1, h / G, slot);
                    double p = exp(sc[j] - mx);
                    z += p;
                    for (int i = 0; i < Dh; i++) oe[i] += p * v[i];
                }
                for (int i = 0; i < Dh; i++) oe[i] /= z;
                lse[((size_t)e * b->max_rows + r) * H + h] = mx + log(z);
            }
    }
    for (int g = 0; g < b->n_groups; g++)
        for (int r = 0; r < b->groups[g].n; r++)
            for (int h = 0; h < H; h++) {
                double M = -INFINITY, w = 0;
                for (int k = b->group_first[g]; k < b->group_first[g + 1]; k++) {
                    double l = lse[((size_t)b->group_entries[k] * b->max_rows + r) * H + h];
                    if (l > M) M = l;
                }
                double acc[512] = {0};
                for (int k = b->group_first[g]; k < b->group_first[g + 1]; k++) {
                    int e = b->group_entries[k];
                    double c = exp(lse[((size_t)e * b->max_rows + r) * H + h] - M);
                    w += c;
                    for (int i = 0; i < Dh; i++)
                        acc[i] += c * o[(((size_t)e * b->max_rows + r) * H + h) * Dh + i];
                }
                float *dst = out + (((size_t)b->groups[g].t0 + r) * H + h) * Dh;
                for (int i = 0; i < Dh; i++) dst[i] = (float)(acc[i] / w);
            }
    free(qe);
    free(sc);
    free(o);
    free(lse);
}

// Plans and runs scenario s against the oracle; returns the plan's verdict.
static bool check_scenario(const char *name, scenario *s, li_rng *rng, bool want_plan) {
    TEST_BEGIN(name);
    li_backend *ref = NULL;
    CHECK(li_backend_cpu_ref_init(&ref) == LI_OK, "%s", li_last_error());
    li_rope_config rc = {.layout = li_rng_u64(rng) & 1 ? LI_ROPE_NEOX : LI_ROPE_GPTJ,
                         .scaling = LI_ROPE_SCALING_YARN, .theta = 10000.0f, .n_dims = s->Dh,
                         .factor = 4.0f, .original_max_pos = 64, .max_pos = 4096};
    li_rope_table tab;
    CHECK(li_rope_table_init(&tab, &rc) == LI_OK, "%s", li_last_error());
    li_kv_storage kv = {.n_layer = 1, .n_head_kv = s->Hkv, .head_dim = s->Dh,
                        .page_size = s->P, .n_pages = s->next_page, .dtype = LI_DTYPE_F32};
    size_t n_kv = (size_t)kv.n_pages * 2 * s->Hkv * s->P * s->Dh;
    float *kvd = malloc(n_kv * sizeof *kvd);
    for (size_t i = 0; i < n_kv; i++) kvd[i] = li_rng_normal(rng);
    kv.data = kvd;
    size_t n_q = (size_t)s->T * s->H * s->Dh;
    float *q = malloc(n_q * sizeof *q), *want = malloc(n_q * sizeof *want),
          *got = malloc(n_q * sizeof *got);
    for (size_t i = 0; i < n_q; i++) q[i] = 0.5f * li_rng_normal(rng);
    const float scale = 1.0f / sqrtf((float)s->Dh);
    li_kv_seq seq = {.pages = s->words, .n_pages = s->n_pages};
    ref->ops->attention(ref, want, q, s->T, s->H, &kv, 0, &seq, s->kv_first, s->n_visible, scale,
                        &tab);
    li_attn_blocks b = {0};
    bool ok = li_attn_blocks_plan(&b, s->words, s->n_pages, s->P, s->kv_first, s->n_visible, s->T);
    CHECK(ok == want_plan, "plan %s, expected %s", ok ? "made" : "refused",
          want_plan ? "made" : "refused");
    if (ok && want_plan) {
        run_plan(ref, s, &b, &kv, q, got, scale, &tab);
        double max_err = 0;
        for (size_t i = 0; i < n_q; i++) {
            double d = fabs((double)got[i] - want[i]);
            if (d > max_err || d != d) max_err = d != d ? INFINITY : d;
        }
        // both sides in fp64 from the same f32 inputs; the oracle rounds each rotated K to f32
        // (relative 6e-8 per element), so outputs of size ~1 agree to ~1e-6
        CHECK(max_err < 1e-5, "max |blocks - oracle| = %g (groups %d, segments %d, entries %d)",
              max_err, b.n_groups, b.n_segs, b.n_entries);
    }
    li_attn_blocks_free(&b);
    free(q);
    free(want);
    free(got);
    free(kvd);
    li_backend_free(ref);
    TEST_END();
    return ok;
}

static scenario fresh(li_rng *rng) {
    scenario s;
    memset(&s, 0, sizeof s);
    const int Ps[] = {4, 7, 16};
    s.P = Ps[li_rng_u64(rng) % 3];
    s.Hkv = 1 + (int)(li_rng_u64(rng) % 2);
    s.H = s.Hkv * (1 + (int)(li_rng_u64(rng) % 3));
    s.Dh = 16;
    return s;
}

int main(void) {
    li_rng rng;
    test_rng_init(&rng, "test-attn-blocks");
    char name[160];
    for (int rep = 0; rep < 3; rep++) {
        // lazy: system (Δ 0), documents at their offsets, then the query chunk over all of them
        scenario s = fresh(&rng);
        int64_t pos = 0;
        int n_sys = 3 + (int)(li_rng_u64(&rng) % 9);
        add_block(&s, n_sys, 0);
        pos += n_sys;
        int n_docs = 1 + (int)(li_rng_u64(&rng) % 4);
        for (int d = 0; d < n_docs; d++) {
            int n = 5 + (int)(li_rng_u64(&rng) % 40);
            add_block(&s, n, pos);
            pos += n;
        }
        int n_query = 2 + (int)(li_rng_u64(&rng) % 30);
        int64_t q0 = add_block(&s, n_query, 0);
        add_rows(&s, n_query, 0, q0 + n_query);
        snprintf(name, sizeof name, "lazy query over %d documents, P %d, H %d/%d: blocks = oracle",
                 n_docs, s.P, s.H, s.Hkv);
        check_scenario(name, &s, &rng, true);

        // a query chunk after an earlier chunk of the same block (chunked prefill)
        s = fresh(&rng);
        add_block(&s, 9, 0);
        add_block(&s, 21, 9);
        q0 = add_block(&s, 40, 0);
        add_rows(&s, 13, 0, q0 + 40);
        snprintf(name, sizeof name, "second chunk of a query block, P %d: blocks = oracle", s.P);
        check_scenario(name, &s, &rng, true);

        // a plain prompt: one Δ 0 run, causal from key 0 (one causal block)
        s = fresh(&rng);
        add_block(&s, 50 + (int)(li_rng_u64(&rng) % 50), 0);
        int64_t n = 0;
        for (int p = 0; p < s.n_pages; p++) n += li_page_count(s.words[p]);
        add_rows(&s, (int)n, 0, n);
        snprintf(name, sizeof name, "plain causal prompt of %lld tokens, P %d: blocks = oracle",
                 (long long)n, s.P);
        check_scenario(name, &s, &rng, true);

        // none / prefix: one Δ 0 run holding the whole prompt; each document's rows see from
        // the document's first key (often mid-page), the query rows see all
        s = fresh(&rng);
        int lens[4] = {6 + (int)(li_rng_u64(&rng) % 20), 5 + (int)(li_rng_u64(&rng) % 20),
                       7 + (int)(li_rng_u64(&rng) % 20), 4 + (int)(li_rng_u64(&rng) % 9)};
        int total = lens[0] + lens[1] + lens[2] + lens[3];
        add_block(&s, total, 0);
        int64_t start = 0;
        for (int d = 0; d < 3; d++) {
            add_rows(&s, lens[d], d == 0 ? 0 : start, start + lens[d]);
            start += lens[d];
        }
        add_rows(&s, lens[3], 0, total);
        snprintf(name, sizeof name, "prefix-style documents mid-page, P %d: blocks = oracle", s.P);
        check_scenario(name, &s, &rng, true);
    }
    // refused: the rows' diagonal runs into pages of another Δ (a block cannot be causal across)
    scenario s = fresh(&rng);
    add_block(&s, 10, 0);
    add_block(&s, 10, 30);
    add_rows(&s, 15, 0, 20);
    check_scenario("a diagonal across a change of Δ is refused", &s, &rng, false);
    // refused: a diagonal that crosses a partly filled page
    s = fresh(&rng);
    add_block(&s, s.P + 1, 0);
    add_block(&s, 5, 0);
    add_rows(&s, 8, 0, s.P + 1 + 5);  // the diagonal starts in the first block
    check_scenario("a diagonal across a partly filled page is refused", &s, &rng, false);
    return test_summary();
}
