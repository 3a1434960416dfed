// test-kv.c — the KV page pool and sequence page tables: slots, page words, refcounts, the
// KV-full error that leaves a sequence untouched, and the pool returning to full.
#include <stdio.h>
#include <string.h>

#include "kv/kv-pool.h"
#include "test.h"

// kv_copy_rotate (the copy baseline's page copy + re-rotation): the fast op equals the oracle,
// and K copied with rotation Δ equals K rotated at position p + Δ from the start (the group law
// of every RoPE variant; the YaRN magnitude is in the stored K and must not be applied again).
static void test_copy_rotate(li_rng *rng) {
    li_rope_config cfgs[] = {
        {.layout = LI_ROPE_NEOX, .theta = 10000.0f, .n_dims = 16},
        {.layout = LI_ROPE_GPTJ, .scaling = LI_ROPE_SCALING_YARN, .theta = 10000.0f, .n_dims = 16,
         .factor = 4.0f, .original_max_pos = 64, .max_pos = 4096},
        {.layout = LI_ROPE_NEOX, .scaling = LI_ROPE_SCALING_LLAMA3, .theta = 500000.0f,
         .n_dims = 16, .factor = 8.0f, .low_freq_factor = 1.0f, .high_freq_factor = 4.0f,
         .original_max_pos = 64, .max_pos = 4096},
    };
    li_backend *ref, *fast;
    if (li_backend_cpu_ref_init(&ref) != LI_OK || li_backend_cpu_init(&fast, 2) != LI_OK) return;
    for (int ci = 0; ci < 6; ci++) {
        const li_dtype dt = ci < 3 ? LI_DTYPE_F32 : LI_DTYPE_BF16;
        char name[128];
        snprintf(name, sizeof name,
                 "kv_copy_rotate: oracle == fast == rotation at p+Δ (rope %d, %s pool)", ci % 3,
                 li_dtype_name(dt));
        TEST_BEGIN(name);
        li_rope_table tab;
        CHECK(li_rope_table_init(&tab, &cfgs[ci % 3]) == LI_OK, "%s", li_last_error());
        li_hparams hp = {.n_layer = 2, .n_head_kv = 3, .head_dim = 16};
        const int P = 7, count = 5;
        li_kv_pool pool;
        CHECK(li_kv_pool_init(&pool, NULL, &hp, P, 4, dt) == LI_OK, "pool");
        li_kv_storage *kv = &pool.storage;
        int64_t delta = 1 + (int64_t)(li_rng_u64(rng) % 5000);
        // an f32 image of the pool: page 0 = K rotated at positions 0..P-1 (with mscale, as a
        // prefill stores it), page 3 = the same K rotated directly at p + Δ (the expectation)
        int n = hp.n_layer * 2 * hp.n_head_kv * P * hp.head_dim;
        float *raw = malloc((size_t)n * sizeof(float)), *img = calloc((size_t)4 * n, sizeof(float));
        for (int i = 0; i < n; i++) raw[i] = li_rng_normal(rng);
        memcpy(img, raw, (size_t)n * sizeof(float));
        int32_t pos[7], pos_shift[7];
        for (int s = 0; s < P; s++) pos[s] = s, pos_shift[s] = s + (int)delta;
        for (int il = 0; il < hp.n_layer; il++)
            for (int h = 0; h < hp.n_head_kv; h++) {
                float *kh = img + li_kv_offset(kv, 0, il, 0, h, 0);
                ref->ops->rope(ref, kh, LI_DTYPE_F32, kh, pos, P, 1, 16, &tab);
                float *k3 = img + li_kv_offset(kv, 3, il, 0, h, 0);
                memcpy(k3, raw + (li_kv_offset(kv, 0, il, 0, h, 0)), (size_t)P * 16 * sizeof(float));
                ref->ops->rope(ref, k3, LI_DTYPE_F32, k3, pos_shift, P, 1, 16, &tab);
            }
        for (int i = 0; i < 4 * n; i++) {  // the image into the pool (bf16: rounded)
            if (dt == LI_DTYPE_BF16) ((uint16_t *)kv->data)[i] = li_f32_to_bf16(img[i]);
            else ((float *)kv->data)[i] = img[i];
        }
        ref->ops->kv_copy_rotate(ref, kv, 0, 1, count, delta, &tab);
        fast->ops->kv_copy_rotate(fast, kv, 0, 2, count, delta, &tab);
        for (int i = n; i < 3 * n; i++)  // pages 1 and 2 back into the image
            img[i] = dt == LI_DTYPE_BF16 ? li_bf16_to_f32(((uint16_t *)kv->data)[i])
                                         : ((float *)kv->data)[i];
        double worst_fast = 0, worst_law = 0;
        for (int il = 0; il < hp.n_layer; il++)
            for (int h = 0; h < hp.n_head_kv; h++)
                for (int is_v = 0; is_v < 2; is_v++) {
                    const float *a = img + li_kv_offset(kv, 1, il, is_v, h, 0);
                    const float *b = img + li_kv_offset(kv, 2, il, is_v, h, 0);
                    const float *e = img + li_kv_offset(kv, is_v ? 0 : 3, il, is_v, h, 0);
                    double n1 = test_nmse(b, a, count * 16), n2 = test_nmse(a, e, count * 16);
                    worst_fast = n1 > worst_fast ? n1 : worst_fast;
                    worst_law = n2 > worst_law ? n2 : worst_law;
                }
        // f32: fp32 cos/sin vs fp64 in the oracle: ~1e-14; the group law in fp32 after two
        // rotations with positions up to 5000: angles are exact in fp64, the stored values are
        // fp32: ~1e-13. bf16: page 0 and the copy are each rounded to 8 significant bits (relative
        // error <= 2^-9, nmse ~ 2^-18 / 3 per rounding): the two rotations of the oracle and the
        // fast op may round a tie apart (~1e-6), and against the exact rotation two roundings add.
        double tol_fast = dt == LI_DTYPE_BF16 ? 4e-6 : 1e-12, tol_law = dt == LI_DTYPE_BF16 ? 2e-5 : 1e-12;
        CHECK(worst_fast < tol_fast, "fast vs oracle nmse %g", worst_fast);
        CHECK(worst_law < tol_law, "copy-rotated vs rotated at p+Δ nmse %g (Δ=%lld)", worst_law,
              (long long)delta);
        free(raw);
        free(img);
        li_kv_pool_free(&pool);
        TEST_END();
    }
    li_backend_free(ref);
    li_backend_free(fast);
}

int main(void) {
    li_hparams hp = {.n_layer = 3, .n_head_kv = 2, .head_dim = 8};
    li_rng rng;
    test_rng_init(&rng, "test-kv");

    test_copy_rotate(&rng);

    TEST_BEGIN("page word packs and unpacks every field at its limits");
    int64_t ids[] = {0, 1, 12345, LI_PAGE_MAX_ID};
    int counts[] = {0, 1, 16, LI_PAGE_MAX_SIZE};
    int64_t deltas[] = {0, 7, 131072, LI_PAGE_MAX_DELTA};
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++)
            for (int c = 0; c < 4; c++) {
                uint64_t w = li_page_word(ids[a], counts[b], deltas[c]);
                CHECK(li_page_id(w) == ids[a] && li_page_count(w) == counts[b] &&
                          li_page_delta(w) == deltas[c],
                      "%lld %d %lld", (long long)ids[a], counts[b], (long long)deltas[c]);
            }
    TEST_END();

    TEST_BEGIN("pool limits are checked");
    li_kv_pool pool;
    CHECK(li_kv_pool_init(&pool, NULL, &hp, 0, 4, LI_DTYPE_F32) == LI_ERR_LIMIT, "page size 0");
    CHECK(li_kv_pool_init(&pool, NULL, &hp, LI_PAGE_MAX_SIZE + 1, 4, LI_DTYPE_F32) == LI_ERR_LIMIT, "page too big");
    CHECK(li_kv_pool_init(&pool, NULL, &hp, 16, LI_PAGE_MAX_ID + 2, LI_DTYPE_F32) == LI_ERR_LIMIT,
          "too many pages");
    CHECK(li_kv_pool_init(&pool, NULL, &hp, 16, 4, LI_DTYPE_Q8_0) == LI_ERR_INVALID_ARG,
          "a KV dtype other than f32 / bf16");
    TEST_END();

    int sizes[] = {1, 16, 64};
    for (int si = 0; si < 3; si++) {
        int P = sizes[si];
        char name[96];
        snprintf(name, sizeof name, "sequences append, share and release pages (P=%d)", P);
        TEST_BEGIN(name);
        int64_t n_pages = 40;
        CHECK(li_kv_pool_init(&pool, NULL, &hp, P, n_pages, si == 1 ? LI_DTYPE_BF16 : LI_DTYPE_F32) ==
                  LI_OK,
              "init");
        CHECK(pool.page_bytes == (size_t)3 * 2 * 2 * P * 8 * (si == 1 ? 2 : 4), "page bytes");
        li_kv_seq_pages a = {0}, b = {0};
        int64_t slots[4096];
        int total_a = 0;
        // random appends until near full, checking slot continuity within pages
        for (int step = 0; step < 30; step++) {
            int n = 1 + (int)(li_rng_u64(&rng) % (uint64_t)(2 * P + 3));
            li_kv_seq_pages *s = step % 3 ? &a : &b;
            int before_pages = s->n_pages, before_tokens = s->n_tokens;
            li_status rc = li_kv_seq_append(&pool, s, n, slots);
            if (rc == LI_ERR_KV_FULL) {
                CHECK(s->n_pages == before_pages && s->n_tokens == before_tokens,
                      "KV_FULL must leave the sequence as it was");
                break;
            }
            CHECK(rc == LI_OK, "append: %s", li_last_error());
            if (s == &a) total_a += n;
            // slots of the appended tokens: logical index k lives in page k / P at offset k % P
            for (int i = 0; i < n; i++) {
                int k = before_tokens + i;
                uint64_t w = s->pages[k / P];
                CHECK(slots[i] == li_page_id(w) * P + k % P, "slot of token %d", k);
            }
            int sum = 0;
            for (int p = 0; p < s->n_pages; p++) sum += li_page_count(s->pages[p]);
            CHECK(sum == s->n_tokens, "page counts add up to the token count");
        }
        CHECK(a.n_tokens == total_a, "token count");
        // a page shared by reference survives the first owner
        int64_t shared = li_page_id(a.pages[0]);
        li_kv_page_ref(&pool, shared);
        li_kv_seq_free(&pool, &a);
        CHECK(pool.refcount[shared] == 1, "shared page still referenced");
        li_kv_page_unref(&pool, shared);
        li_kv_seq_free(&pool, &b);
        CHECK(li_kv_pool_n_free(&pool) == n_pages, "pool back to full: %lld of %lld",
              (long long)li_kv_pool_n_free(&pool), (long long)n_pages);
        // exhaust it: the error says what happened
        li_kv_seq_pages c = {0};
        li_status rc = li_kv_seq_append(&pool, &c, (int)(n_pages * P + 1), slots);
        CHECK(rc == LI_ERR_KV_FULL && strstr(li_last_error(), "KV cache full"), "full: %s",
              li_last_error());
        li_kv_seq_free(&pool, &c);
        li_kv_pool_free(&pool);
        TEST_END();
    }
    return test_summary();
}
