// ops-ref.c — the scalar oracle: every op of the backend table as plain loops with fp64
// accumulation, written to be obviously correct and to mirror the reference (HF transformers) line
// by line. It is slow on purpose and is not where any optimisation belongs; the fast path
// (ops-cpu.c) and the CUDA backend are checked against it by tests/test-ops.c, which also checks
// the oracle's own properties (deferred-RoPE identity, RoPE group law, sampling distribution).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../backend.h"
#include "cpu-internal.h"

// W[r, c] as f32 for the compute dtypes a CPU weight may hold.
static double weight_at(const li_weight *W, int64_t r, int64_t c) {
    size_t i = (size_t)r * (size_t)W->n_cols + (size_t)c;
    switch (W->dtype) {
    case LI_DTYPE_F32: return ((const float *)W->data)[i];
    case LI_DTYPE_BF16: return li_bf16_to_f32(((const uint16_t *)W->data)[i]);
    default: LI_ASSERT(!"weight dtype must be f32 or bf16 on the CPU backend"); return 0;
    }
}

// out (T, D) = W[tokens[t]], W (V, D)
static void ref_embed(li_backend *be, float *out, const li_weight *W, const int32_t *tokens,
                      int T) {
    int64_t D = W->n_cols;
    for (int t = 0; t < T; t++) {
        LI_ASSERT(tokens[t] >= 0 && tokens[t] < W->n_rows);
        for (int64_t d = 0; d < D; d++) out[t * D + d] = (float)weight_at(W, tokens[t], d);
    }
}

// HF LlamaRMSNorm: x * rsqrt(mean(x^2) + eps) * w
static void ref_rmsnorm(li_backend *be, float *out, const float *x, const float *w, int T, int D,
                        float eps) {
    for (int t = 0; t < T; t++) {
        const float *xr = x + (size_t)t * D;
        double ss = 0;
        for (int d = 0; d < D; d++) ss += (double)xr[d] * xr[d];
        double r = 1.0 / sqrt(ss / D + eps);
        for (int d = 0; d < D; d++) out[(size_t)t * D + d] = (float)(xr[d] * r * w[d]);
    }
}

// y (T, N) = x (T, K) @ W^T, W (N, K)
static void ref_matmul(li_backend *be, float *y, const float *x, const li_weight *W, int T) {
    int64_t N = W->n_rows, K = W->n_cols;
    for (int t = 0; t < T; t++)
        for (int64_t n = 0; n < N; n++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++) s += (double)x[t * K + k] * weight_at(W, n, k);
            y[t * N + n] = (float)s;
        }
}

static void ref_add(li_backend *be, float *x, const float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = (float)((double)x[i] + y[i]);
}

static void ref_add_bias(li_backend *be, float *x, const float *b, int T, int N) {
    for (int t = 0; t < T; t++) ref_add(be, x + (size_t)t * N, b, N);
}

// Index of the two elements of pair i within one head, for both layouts.
static void pair_index(li_rope_layout layout, int n_dims, int i, int *ia, int *ib) {
    if (layout == LI_ROPE_NEOX) {  // HF rotate_half: x1 = x[:half], x2 = x[half:]
        *ia = i;
        *ib = i + n_dims / 2;
    } else {  // interleaved (GPT-J / ggml "normal"): (x[2i], x[2i+1])
        *ia = 2 * i;
        *ib = 2 * i + 1;
    }
}

// Rotates one head vector v (n_dims used) by angle ang_i = pos * w_i, magnitude m, in fp64.
static void rotate_head(float *v, const li_rope_table *tab, double pos, double m) {
    for (int i = 0; i < tab->n_dims / 2; i++) {
        int ia, ib;
        pair_index(tab->layout, tab->n_dims, i, &ia, &ib);
        double ang = pos * (double)tab->inv_freq[i];
        double c = cos(ang) * m, s = sin(ang) * m;
        double a = v[ia], b = v[ib];
        // HF: q*cos + rotate_half(q)*sin, rotate_half(q) = (-q2, q1)
        v[ia] = (float)(a * c - b * s);
        v[ib] = (float)(b * c + a * s);
    }
}

// x (T, nh, Dh) in place, rotated at pos (T), first n_dims of each head
static void ref_rope(li_backend *be, float *x, const int32_t *pos, int T, int nh, int Dh,
                     const li_rope_table *table) {
    LI_ASSERT(table->n_dims <= Dh);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < nh; h++)
            rotate_head(x + ((size_t)t * nh + h) * Dh, table, (double)pos[t], table->mscale);
}

// Element i of the pool as f32, and its store (bf16 pools round to nearest even).
static float kv_get(const li_kv_storage *kv, size_t i) {
    return kv->dtype == LI_DTYPE_BF16 ? li_bf16_to_f32(((const uint16_t *)kv->data)[i])
                                      : ((const float *)kv->data)[i];
}
static void kv_set(const li_kv_storage *kv, size_t i, float x) {
    if (kv->dtype == LI_DTYPE_BF16) ((uint16_t *)kv->data)[i] = li_f32_to_bf16(x);
    else ((float *)kv->data)[i] = x;
}

// k, v (T, Hkv, Dh) -> layer il at slot[t] = page * P + offset
static void ref_kv_store(li_backend *be, const li_kv_storage *kv, int il, const float *k,
                         const float *v, const int64_t *slot, int T) {
    int Hkv = kv->n_head_kv, Dh = kv->head_dim, P = kv->page_size;
    for (int t = 0; t < T; t++) {
        int64_t page = slot[t] / P;
        int off = (int)(slot[t] % P);
        LI_ASSERT(slot[t] >= 0 && page < kv->n_pages);
        for (int h = 0; h < Hkv; h++)
            for (int d = 0; d < Dh; d++) {
                size_t src = ((size_t)t * Hkv + h) * Dh + d;
                kv_set(kv, li_kv_offset(kv, page, il, 0, h, off) + d, k[src]);
                kv_set(kv, li_kv_offset(kv, page, il, 1, h, off) + d, v[src]);
            }
    }
}

// K rows re-rotated one by one in fp64 (rotate_head), V copied (a bf16 pool: K rounded again).
static void ref_kv_copy_rotate(li_backend *be, const li_kv_storage *kv, int64_t src, int64_t dst,
                               int count, int64_t delta, const li_rope_table *rope) {
    LI_ASSERT(src != dst && count >= 0 && count <= kv->page_size);
    const int Dh = kv->head_dim;
    float *k = malloc((size_t)Dh * sizeof *k);
    LI_ASSERT(k != NULL);
    for (int il = 0; il < kv->n_layer; il++)
        for (int h = 0; h < kv->n_head_kv; h++)
            for (int s = 0; s < count; s++) {
                size_t ks = li_kv_offset(kv, src, il, 0, h, s), kd = li_kv_offset(kv, dst, il, 0, h, s);
                size_t vs = li_kv_offset(kv, src, il, 1, h, s), vd = li_kv_offset(kv, dst, il, 1, h, s);
                for (int e = 0; e < Dh; e++) k[e] = kv_get(kv, ks + e);
                if (delta != 0) rotate_head(k, rope, (double)delta, 1.0);  // R_Δ, no mscale
                for (int e = 0; e < Dh; e++) {
                    kv_set(kv, kd + e, k[e]);
                    kv_set(kv, vd + e, kv_get(kv, vs + e));
                }
            }
    free(k);
}

// Paged attention, one query row and one query head at a time. Every visible key is copied,
// rotated by its page's Δ (pure rotation: magnitude 1, the mscale is already inside the stored K),
// dotted with q in fp64; softmax and the weighted sum of V in fp64.
static void ref_attention(li_backend *be, float *out, const float *q, int T, int H,
                          const li_kv_storage *kv, int il, const li_kv_seq *seq,
                          const int32_t *kv_first, const int32_t *n_visible, float scale,
                          const li_rope_table *rope) {
    int Hkv = kv->n_head_kv, Dh = kv->head_dim;
    LI_ASSERT(H % Hkv == 0);
    int group = H / Hkv;
    int n_keys = 0;
    for (int p = 0; p < seq->n_pages; p++) n_keys += li_page_count(seq->pages[p]);
    double *score = malloc(((size_t)n_keys + 1) * sizeof *score);
    float *krot = malloc((size_t)Dh * sizeof *krot);
    LI_ASSERT(score && krot);  // test-only oracle: an allocation failure here is not recoverable
    for (int t = 0; t < T; t++) {
        int first = kv_first ? kv_first[t] : 0;
        LI_ASSERT(first >= 0 && first < n_visible[t] && n_visible[t] <= n_keys);
        for (int h = 0; h < H; h++) {
            int hk = h / group;  // GQA: query head h reads kv head h / (H / Hkv)
            const float *qr = q + ((size_t)t * H + h) * Dh;
            // scores over logical keys 0..n_visible-1, walking the page table
            int j = 0;
            double mx = -INFINITY;
            for (int p = 0; p < seq->n_pages && j < n_visible[t]; p++) {
                uint64_t w = seq->pages[p];
                int64_t id = li_page_id(w), delta = li_page_delta(w);
                int cnt = li_page_count(w);
                LI_ASSERT(id < kv->n_pages && cnt >= 1 && cnt <= kv->page_size);
                for (int s = 0; s < cnt && j < n_visible[t]; s++, j++) {
                    size_t ko = li_kv_offset(kv, id, il, 0, hk, s);
                    for (int e = 0; e < Dh; e++) krot[e] = kv_get(kv, ko + e);
                    if (delta != 0) {
                        LI_ASSERT(rope != NULL);
                        rotate_head(krot, rope, (double)delta, 1.0);  // R_Δ, no mscale
                    }
                    double d = 0;
                    for (int e = 0; e < Dh; e++) d += (double)qr[e] * krot[e];
                    score[j] = j < first ? -INFINITY : d * scale;  // keys before `first`: masked
                    if (score[j] > mx) mx = score[j];
                }
            }
            double z = 0;
            for (int i = 0; i < j; i++) {
                score[i] = exp(score[i] - mx);
                z += score[i];
            }
            float *o = out + ((size_t)t * H + h) * Dh;
            for (int e = 0; e < Dh; e++) {
                double acc = 0;
                int i = 0;
                for (int p = 0; p < seq->n_pages && i < j; p++) {
                    uint64_t w = seq->pages[p];
                    int cnt = li_page_count(w);
                    for (int s = 0; s < cnt && i < j; s++, i++)
                        acc += score[i] * kv_get(kv, li_kv_offset(kv, li_page_id(w), il, 1, hk, s) + e);
                }
                o[e] = (float)(acc / z);
            }
        }
    }
    free(krot);
    free(score);
}

// HF: silu(gate) * up
static void ref_swiglu(li_backend *be, float *out, const float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        double g = gate[i];
        out[i] = (float)(g / (1.0 + exp(-g)) * up[i]);
    }
}

static void ref_softmax(li_backend *be, float *x, int rows, int n) {
    for (int r = 0; r < rows; r++) {
        float *xr = x + (size_t)r * n;
        double mx = -INFINITY, z = 0;
        for (int i = 0; i < n; i++)
            if (xr[i] > mx) mx = xr[i];
        for (int i = 0; i < n; i++) z += exp(xr[i] - mx);
        for (int i = 0; i < n; i++) xr[i] = (float)(exp(xr[i] - mx) / z);
    }
}

// ---- sampling --------------------------------------------------------------------------------
//
// The arithmetic both CPU tables share (ops-cpu.c repeats it on its survivors so that the same u
// picks the same token):
//   p_i  = exp(((double)l_i - l_max) / temperature)           unnormalised, p_max = 1
//   order: p descending, ties by lower id
//   top-k: the first k of that order (exactly k; HF keeps every token tied with the k-th logit,
//          which only differs on exact ties and would break "top_k = 1 is greedy")
//   top-p: Z = Σ p over survivors in id order; keep the shortest prefix whose running sum (in
//          sorted order) reaches top_p * Z, i.e. token i stays while the sum before it < top_p * Z
//          (HF: drop where the ascending cumsum <= 1 - top_p; the same set in exact arithmetic)
//   min-p: keep p >= min_p * p_first (HF: probs < min_p * max(probs) removed)
//   draw:  Z = Σ p over survivors in id order, target = u * Z, the first survivor in sorted order
//          whose running sum exceeds target; if rounding leaves none, the last survivor with p > 0.

typedef struct {
    double p;
    int32_t id;
} ref_cand;

static int cand_cmp(const void *a, const void *b) {
    const ref_cand *x = a, *y = b;
    if (x->p != y->p) return x->p > y->p ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

// Σ p over the survivors c[0..n) in token-id order (pid: V scratch doubles).
static double survivor_sum(const ref_cand *c, int n, int V, double *pid) {
    for (int i = 0; i < V; i++) pid[i] = 0;
    for (int i = 0; i < n; i++) pid[c[i].id] = c[i].p;
    double z = 0;
    for (int i = 0; i < V; i++)
        if (pid[i] != 0) z += pid[i];
    return z;
}

static int32_t ref_sample(li_backend *be, const float *logits, int V, const li_sampler_config *cfg,
                          double u) {
    LI_ASSERT(V >= 1);
    int32_t best = li_cpu_argmax(logits, V);
    if (cfg->temperature <= 0) return best;  // greedy: argmax, lowest id on ties

    double lmax = logits[best], temp = cfg->temperature;
    ref_cand *c = malloc((size_t)V * sizeof *c);
    double *pid = malloc((size_t)V * sizeof *pid);
    LI_ASSERT(c && pid);  // test-only oracle
    for (int i = 0; i < V; i++) {
        c[i].p = exp(((double)logits[i] - lmax) / temp);  // HF: softmax(logits / temperature)
        c[i].id = i;
    }
    qsort(c, (size_t)V, sizeof *c, cand_cmp);
    int n = V;  // survivors: c[0..n)
    if (cfg->top_k > 0 && cfg->top_k < n) n = cfg->top_k;
    if (cfg->top_p < 1) {
        double lim = (double)cfg->top_p * survivor_sum(c, n, V, pid), cum = 0;
        int m = 0;
        while (m < n && cum < lim) cum += c[m++].p;
        n = m > 0 ? m : 1;
    }
    if (cfg->min_p > 0) {
        double thr = (double)cfg->min_p * c[0].p;
        int m = 1;
        while (m < n && c[m].p >= thr) m++;
        n = m;
    }
    // inverse CDF over the survivors in sorted order
    double target = u * survivor_sum(c, n, V, pid), cum = 0;
    int32_t tok = -1, last_pos = c[0].id;
    for (int i = 0; i < n; i++) {
        if (c[i].p > 0) last_pos = c[i].id;
        cum += c[i].p;
        if (cum > target) {
            tok = c[i].id;
            break;
        }
    }
    if (tok < 0) tok = last_pos;
    free(pid);
    free(c);
    return tok;
}

// ---- diffusion / FP8 ops ----------------------------------------------------------------------

// One (row, head) at a time; scores, maxima, exponentials and sums in fp64, the state stored back
// in fp32 after each tile (as the fast path and a GPU kernel keep it between tiles).
static void ref_flash_attn_tiles(li_backend *be, float *o, float *m, float *l, const float *q,
                                 int nq, int H, const float *k, const float *v, int nk, int Hkv,
                                 int Dh, int tile, float scale) {
    LI_ASSERT(H % Hkv == 0 && tile >= 1 && tile <= LI_FA_MAX_TILE);
    int group = H / Hkv;
    double *s = malloc((size_t)tile * sizeof *s);
    double *acc = malloc((size_t)Dh * sizeof *acc);
    LI_ASSERT(s && acc);
    for (int i = 0; i < nq; i++)
        for (int h = 0; h < H; h++) {
            const float *qr = q + ((size_t)i * H + h) * Dh;
            float *orow = o + ((size_t)i * H + h) * Dh;
            float *mr = m + (size_t)i * H + h, *lr = l + (size_t)i * H + h;
            int hk = h / group;
            for (int t0 = 0; t0 < nk; t0 += tile) {
                int t1 = t0 + tile < nk ? t0 + tile : nk;
                double mt = -INFINITY;
                for (int j = t0; j < t1; j++) {
                    const float *kr = k + ((size_t)j * Hkv + hk) * Dh;
                    double d = 0;
                    for (int x = 0; x < Dh; x++) d += (double)qr[x] * kr[x];
                    s[j - t0] = d * scale;
                    if (s[j - t0] > mt) mt = s[j - t0];
                }
                double m_old = *mr, m_new = m_old > mt ? m_old : mt;
                double a = m_old == -INFINITY ? 0.0 : exp(m_old - m_new);
                double sum = 0;
                for (int x = 0; x < Dh; x++) acc[x] = a * orow[x];
                for (int j = t0; j < t1; j++) {
                    double p = exp(s[j - t0] - m_new);
                    sum += p;
                    const float *vr = v + ((size_t)j * Hkv + hk) * Dh;
                    for (int x = 0; x < Dh; x++) acc[x] += p * vr[x];
                }
                *lr = (float)(a * *lr + sum);
                *mr = (float)m_new;
                for (int x = 0; x < Dh; x++) orow[x] = (float)acc[x];
            }
        }
    free(s);
    free(acc);
}

static void ref_flash_attn_finalize(li_backend *be, float *out, const float *o, const float *l,
                                    int64_t n, int Dh) {
    for (int64_t r = 0; r < n; r++)
        for (int x = 0; x < Dh; x++)
            out[r * Dh + x] = (float)((double)o[r * Dh + x] / (double)l[r]);
}

static void ref_fp8_quant_rows(li_backend *be, const li_fp8_rows *out, const float *x, int T,
                               int K) {
    uint8_t *q = out->q;
    float *scale = out->scale;
    int G = (K + LI_FP8_GROUP - 1) / LI_FP8_GROUP;
    for (int t = 0; t < T; t++)
        for (int g = 0; g < G; g++) {
            int k0 = g * LI_FP8_GROUP, k1 = k0 + LI_FP8_GROUP < K ? k0 + LI_FP8_GROUP : K;
            float amax = 0;
            for (int k = k0; k < k1; k++) amax = fmaxf(amax, fabsf(x[(size_t)t * K + k]));
            float sc = li_fp8_scale(amax);
            scale[(size_t)t * G + g] = sc;
            for (int k = k0; k < k1; k++)
                q[(size_t)t * K + k] = li_f32_to_e4m3(x[(size_t)t * K + k] / sc);
        }
}

// The group sums are exact in fp64 (see backend.h), so a plain loop is the specification (exact
// or not: the oracle has no other order).
static void ref_matmul_fp8(li_backend *be, float *y, const li_fp8_rows *x, int T,
                           const li_fp8_weight *W, bool exact, bool accumulate) {
    const uint8_t *qa = x->q;
    const float *sa = x->scale;
    int64_t N = W->n_rows, K = W->n_cols, G = (K + LI_FP8_GROUP - 1) / LI_FP8_GROUP;
    for (int t = 0; t < T; t++)
        for (int64_t n = 0; n < N; n++) {
            float acc = 0;
            for (int64_t g = 0; g < G; g++) {
                int64_t k0 = g * LI_FP8_GROUP, k1 = k0 + LI_FP8_GROUP < K ? k0 + LI_FP8_GROUP : K;
                double S = 0;
                for (int64_t k = k0; k < k1; k++)
                    S += (double)li_e4m3_to_f32(qa[t * K + k]) * li_e4m3_to_f32(W->q[n * K + k]);
                float part = (float)S * sa[t * G + g];
                part = part * W->scale[(n / LI_FP8_GROUP) * G + g];
                acc = acc + part;
            }
            y[t * N + n] = accumulate ? y[t * N + n] + acc : acc;
        }
}

// LLaDA's denoising step at any temperature (backend.h dllm->x0): engine-dllm.c step_decide steps
// 1-5 as the decoder runs them, with low-confidence remasking (conf always computed), on a local
// copy of *rng: uniform i = b V + v is drawn for every row, masked or not, and the caller advances
// its own stream by B V draws when temperature > 0. Rows not masked: x0 = 0, conf = -inf.
// Also the fast table's.
void li_cpu_dllm_x0(li_backend *be, int32_t *x0, double *conf, float *logits,
                    const float *ulogits, const uint8_t *masked, int B, int V, float w,
                    int32_t eos, int32_t ban0, int32_t ban1, double temperature,
                    bool conf_f32, const li_rng *rng) {
    (void)be;
    li_rng r = *rng;
    // 1. CFG: un + w (cond - un), fp32 like the reference's tensors.
    if (ulogits)
        for (size_t i = 0; i < (size_t)B * V; i++)
            logits[i] = ulogits[i] + w * (logits[i] - ulogits[i]);
    // 2. Ban EOS.
    if (eos >= 0)
        for (int b = 0; b < B; b++) logits[(size_t)b * V + eos] = -INFINITY;
    // 3. x0. Gumbel draws cover every window row and every vocab id, masked or not.
    for (int b = 0; b < B; b++) {
        const float *l = logits + (size_t)b * V;
        x0[b] = 0;
        if (temperature > 0) {
            double best = -INFINITY;
            int32_t arg = 0;
            for (int v = 0; v < V; v++) {
                double u = li_rng_uniform(&r);
                if (!masked[b]) continue;
                // LLaDA add_gumbel_noise: exp(l) / (-log u)^T in float64 (u == 0 gives 0).
                double g = exp((double)l[v]) / pow(-log(u), temperature);
                if (g > best) {
                    best = g;
                    arg = v;
                }
            }
            x0[b] = arg;
        } else if (masked[b]) {
            float best = l[0];
            int32_t arg = 0;
            for (int v = 1; v < V; v++)
                if (l[v] > best) {
                    best = l[v];
                    arg = v;
                }
            x0[b] = arg;
        }
    }
    // 4. The banned ids leave the softmax: their confidence is 0.
    for (int b = 0; b < B; b++) {
        if (ban0 >= 0) logits[(size_t)b * V + ban0] = -INFINITY;
        if (ban1 >= 0) logits[(size_t)b * V + ban1] = -INFINITY;
    }
    // 5. Confidence of the masked window rows: float64 softmax (Fast-dLLM's
    //    softmax(logits.to(float64))), max-subtracted, summed in index order; or generate.py's
    //    float32 one (li_dllm_conf_f32).
    for (int b = 0; b < B; b++) {
        if (!masked[b]) {
            conf[b] = -INFINITY;
            continue;
        }
        const float *l = logits + (size_t)b * V;
        if (conf_f32) {
            conf[b] = li_dllm_conf_f32(l, V, x0[b]);
            continue;
        }
        float mx = -INFINITY;
        for (int v = 0; v < V; v++)
            if (l[v] > mx) mx = l[v];
        double sum = 0;
        for (int v = 0; v < V; v++) sum += exp((double)l[v] - mx);
        conf[b] = exp((double)l[x0[b]] - mx) / sum;
    }
}

// ---- bf16 activations: the f32 ops above, then the rounding (backend.h) ------------------------

static void round_bf16(uint16_t *out, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = li_f32_to_bf16(x[i]);
}

static void widen_bf16(float *out, const uint16_t *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = li_bf16_to_f32(x[i]);
}

static float *ref_scratch(int64_t n) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    LI_ASSERT(p);
    return p;
}

static void ref_rmsnorm_bf16(li_backend *be, uint16_t *out, const float *x, const float *w, int T,
                             int D, float eps) {
    float *y = ref_scratch((int64_t)T * D);
    ref_rmsnorm(be, y, x, w, T, D, eps);
    round_bf16(out, y, (int64_t)T * D);
    free(y);
}

static void ref_matmul_bf16(li_backend *be, float *y, const uint16_t *x, const li_weight *W, int T,
                            bool accumulate) {
    const int64_t N = W->n_rows, K = W->n_cols;
    float *xf = ref_scratch((int64_t)T * K), *yt = ref_scratch((int64_t)T * N);
    widen_bf16(xf, x, (int64_t)T * K);
    ref_matmul(be, accumulate ? yt : y, xf, W, T);
    if (accumulate) ref_add(be, y, yt, (int64_t)T * N);
    free(xf);
    free(yt);
}

static void ref_rope_bf16(li_backend *be, uint16_t *out, const float *x, const int32_t *pos, int T,
                          int nh, int Dh, const li_rope_table *table) {
    const int64_t n = (int64_t)T * nh * Dh;
    float *y = ref_scratch(n);
    memcpy(y, x, (size_t)n * sizeof(float));
    if (pos) ref_rope(be, y, pos, T, nh, Dh, table);
    round_bf16(out, y, n);
    free(y);
}

static void ref_swiglu_bf16(li_backend *be, uint16_t *out, const float *gate, const float *up,
                            int T, int F, int64_t ld) {
    float *y = ref_scratch(F);
    for (int t = 0; t < T; t++) {
        ref_swiglu(be, y, gate + t * ld, up + t * ld, F);
        round_bf16(out + (size_t)t * F, y, F);
    }
    free(y);
}

// q (T, HD), k and v (T, KD) = the parts of the fused projection's rows qkv (T, HD + 2 KD).
static void split_qkv(float *q, float *k, float *v, const float *qkv, int T, int64_t HD,
                      int64_t KD) {
    const int64_t row = HD + 2 * KD;
    for (int t = 0; t < T; t++) {
        memcpy(q + t * HD, qkv + t * row, (size_t)HD * sizeof(float));
        memcpy(k + t * KD, qkv + t * row + HD, (size_t)KD * sizeof(float));
        memcpy(v + t * KD, qkv + t * row + HD + KD, (size_t)KD * sizeof(float));
    }
}

static void ref_qkv_rope(li_backend *be, float *q, void *k_out, void *v_out, li_dtype dt,
                         const float *qkv, const int32_t *pos, int T, int H, int Hkv, int Dh,
                         const li_rope_table *table) {
    LI_ASSERT(dt == LI_DTYPE_BF16);
    const int64_t KD = (int64_t)Hkv * Dh;
    float *kt = ref_scratch((int64_t)T * KD), *vt = ref_scratch((int64_t)T * KD);
    split_qkv(q, kt, vt, qkv, T, (int64_t)H * Dh, KD);
    ref_rope(be, q, pos, T, H, Dh, table);
    ref_rope(be, kt, pos, T, Hkv, Dh, table);
    round_bf16(k_out, kt, (int64_t)T * KD);
    round_bf16(v_out, vt, (int64_t)T * KD);
    free(kt);
    free(vt);
}

// The composition itself (backend.h qkv_rope_store): the parts split out, add_bias on each, rope
// on q and k, kv_store.
static void ref_qkv_rope_store(li_backend *be, float *q, const li_kv_storage *kv, int il,
                               const float *qkv, const float *bias, const int32_t *pos,
                               const int64_t *slot, int T, int H, const li_rope_table *table) {
    const int Hkv = kv->n_head_kv, Dh = kv->head_dim, HD = H * Dh, KD = Hkv * Dh;
    float *k = ref_scratch((int64_t)T * KD), *v = ref_scratch((int64_t)T * KD);
    split_qkv(q, k, v, qkv, T, HD, KD);
    if (bias) {
        ref_add_bias(be, q, bias, T, HD);
        ref_add_bias(be, k, bias + HD, T, KD);
        ref_add_bias(be, v, bias + HD + KD, T, KD);
    }
    ref_rope(be, q, pos, T, H, Dh, table);
    ref_rope(be, k, pos, T, Hkv, Dh, table);
    ref_kv_store(be, kv, il, k, v, slot, T);
    free(k);
    free(v);
}

// Every row over every key: flash_attn_tiles from a fresh state, then finalize (fp64 inside).
static void ref_attention_dense_bf16(li_backend *be, uint16_t *out, const float *q, int T, int H,
                                     const uint16_t *k, const uint16_t *v, int nk, int Hkv, int Dh,
                                     float scale) {
    const int64_t nkv = (int64_t)nk * Hkv * Dh, nq = (int64_t)T * H;
    float *kf = ref_scratch(nkv), *vf = ref_scratch(nkv), *o = ref_scratch(nq * Dh);
    float *m = ref_scratch(nq), *l = ref_scratch(nq);
    widen_bf16(kf, k, nkv);
    widen_bf16(vf, v, nkv);
    for (int64_t i = 0; i < nq; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
    }
    memset(o, 0, (size_t)(nq * Dh) * sizeof(float));
    ref_flash_attn_tiles(be, o, m, l, q, T, H, kf, vf, nk, Hkv, Dh,
                         nk < LI_FA_MAX_TILE ? nk : LI_FA_MAX_TILE, scale);
    ref_flash_attn_finalize(be, o, o, l, nq, Dh);
    round_bf16(out, o, nq * Dh);
    free(kf);
    free(vf);
    free(o);
    free(m);
    free(l);
}

// ---- the [dt] entries (backend.h): each op's F32 and BF16 forms above behind one entry ---------

LI_DT_FORMS(ref)

static void ref_attention_dense_dt(li_backend *be, void *out, li_dtype dt, const float *q, int T,
                                   int H, const void *k, const void *v, int nk, int Hkv, int Dh,
                                   float scale) {
    LI_ASSERT(dt == LI_DTYPE_BF16);  // (the f32 form: flash_attn_tiles, act_dtypes says so)
    ref_attention_dense_bf16(be, out, q, T, H, k, v, nk, Hkv, Dh, scale);
}

// Both CPU tables' diffusion steps: x0 here, selection and DPad on the host (NULL).
const li_dllm_ops li_cpu_dllm_ops = {.x0 = li_cpu_dllm_x0};

const li_backend_ops li_cpu_ref_ops = {
    .name = "cpu-ref",
    .embed = ref_embed,
    .rmsnorm = ref_rmsnorm_dt,
    .matmul = ref_matmul_dt,
    .add = ref_add,
    .add_bias = ref_add_bias,
    .rope = ref_rope_dt,
    .kv_store = ref_kv_store,
    .qkv_rope_store = ref_qkv_rope_store,
    .kv_copy_rotate = ref_kv_copy_rotate,
    .attention = ref_attention,
    .swiglu = ref_swiglu_dt,
    .softmax = ref_softmax,
    .sample = ref_sample,
    .flash_attn_tiles = ref_flash_attn_tiles,
    .flash_attn_finalize = ref_flash_attn_finalize,
    .fp8_quant_rows = ref_fp8_quant_rows,
    .matmul_fp8 = ref_matmul_fp8,
    .dllm = &li_cpu_dllm_ops,
    .qkv_rope = ref_qkv_rope,
    .attention_dense = ref_attention_dense_dt,
    .act_dtypes = LI_ACT_BF16_FORMS(1u << LI_DTYPE_BF16, 0),
};
