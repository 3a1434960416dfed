// backend-cuda-attention.c — the CUDA backend's attention, host side: paged attention (prefill
// chunks through cuDNN's SDPA when it applies, else our decode and tensor-core prefill kernels;
// attention_decode's batched decode rows), LLaDA's dense attention (cuDNN or our flash kernel) and
// its layer-0 flash_attn_tiles with the carried state.
//
// Not here: the kernels (attention.cu, attention-prefill.cu, attention-blocks.cu, dllm.cu), the
// cuDNN frontend graphs (attention-cudnn.cpp), how a call is cut into blocks (../attn-blocks.c).
// Tested by tests/gpu/gpu-check.c (every path against the CPU oracle, cudnn = native) and by
// test-rag on the GPU (`make CUDA=1 gpu-check`).
#include "backend-cuda-internal.h"

// The decode attention's split-K tickets: zeroed when allocated, left zero by every launch.
unsigned *li_cu_attn_tickets(li_cuda_impl *im, size_t n) {
    size_t cap = im->tickets.cap;
    unsigned *p =
        li_cu_scratch_get(im, &im->tickets, n * sizeof(unsigned), "attention (split-K tickets)");
    if (p && im->tickets.cap != cap &&
        cu_fail(im, "attention (split-K tickets)",
                cudaMemsetAsync(p, 0, im->tickets.cap, im->stream)))
        return NULL;
    return p;
}

// The kernel arguments every attention launch shares; false (error recorded) for a bad shape.
static bool attn_args(li_cuda_impl *im, li_cuda_attn_args *a, float *out, const float *q, int T,
                      int H, const li_kv_storage *kv, int il, const uint64_t *pages, int n_pages,
                      const int32_t *kv_first, const int32_t *n_visible, float scale,
                      const li_rope_table *rope) {
    memset(a, 0, sizeof *a);
    a->out = out;
    a->q = q;
    a->T = T;
    a->H = H;
    a->Hkv = kv->n_head_kv;
    a->Dh = kv->head_dim;
    a->P = kv->page_size;
    a->L = kv->n_layer;
    a->il = il;
    a->kv = kv->data;
    a->kv_bf16 = kv->dtype == LI_DTYPE_BF16;
    a->pages = pages;
    a->n_pages = n_pages;
    a->kv_first = kv_first;
    a->n_visible = n_visible;
    a->scale = scale;
    a->rotate = rope != NULL;
    if (a->Hkv <= 0 || H % a->Hkv) {
        record(im, LI_ERR_INVALID_ARG, "cuda attention: H %d is not a multiple of Hkv %d", H,
               a->Hkv);
        return false;
    }
    return true;
}

// Split-K for the decode kernels: the plan, then partials and tickets from scratch.
static bool attn_split(li_cuda_impl *im, li_cuda_attn_args *a) {
    li_cuda_attention_plan(a->T, a->Hkv, a->H / a->Hkv, a->Dh, a->kv_bf16, a->n_pages, im->n_sm,
                           &a->n_split, &a->pages_per_split);
    if (a->n_split == 1) return true;
    size_t n_o = (size_t)a->T * a->H * a->n_split * a->Dh,
           n_ml = (size_t)a->T * a->H * a->n_split * 2;
    float *part = li_cu_scratch_get(im, &im->attn, (n_o + n_ml) * sizeof(float),
                                    "attention (split-K partials)");
    if (!part) return false;
    a->part_o = part;
    a->part_ml = part + n_o;
    a->tickets = li_cu_attn_tickets(im, (size_t)a->T * a->Hkv);
    return a->tickets != NULL;
}

// ---- attention through cuDNN -------------------------------------------------------------------
//
// Prefill chunks (T >= LI_CUDNN_MIN_ROWS rows) over the paged pool run as cuDNN SDPA calls: the
// call is cut into blocks by attn-blocks.c (each block: a group of rows over a run of keys with
// one Δ, non-causal or ending on the rows' diagonal), every block's rows rotated back by its Δ
// into bf16 (li_cuda_blocks_q), its keys gathered from the pool's pages into a dense bf16 block
// (li_cuda_blocks_gather), the non-causal blocks in one cuDNN call and the causal ones in another
// (the batch slots of a call are the blocks), and the blocks merged by their log-sum-exp
// (li_cuda_blocks_merge). One physical copy of each document serves every position, as in the
// native kernels. Napkin maths: attention of T rows over n keys is 4 T n H Dh FLOP (half that
// causal); cuDNN reaches 450-530 TFLOP/s on causal T 4096; the extra passes move ~6 bytes per
// query element and 8 per K / V element — ~10 % of a 2048-row chunk's time at 20 K keys.
// Measured on the H200 (docs/BENCHMARKS.md): reading the pages through cuDNN's page tables was
// slower than gathering them first (0.48 vs 0.43 ms at causal T 4096, 1.42 vs 1.21 ms for a
// 2048-row chunk over 20 K keys), so only the gathered layout is kept; and 64 query rows over
// five cached documents run faster on our split-K kernel (0.09 vs 0.13 ms), hence the row bound.
#define LI_CUDNN_MIN_ROWS 256

static unsigned pow2_at_least(unsigned n, unsigned floor) {
    unsigned p = floor;
    while (p < n) p <<= 1;
    return p;
}

// Lengths a padded dense call can name (lib_iota's entries).
#define LI_CUDNN_IOTA 65536

// The table 0, 1, ..., LI_CUDNN_IOTA - 1 in device memory, made when cuDNN is opened (never
// while a graph is recorded: the first call of a step runs eagerly). NULL after a failure, which
// leaves the dense calls on exact plans.
static int32_t *iota_make(li_cuda_impl *im) {
    int32_t *h = li_alloc(sizeof(int32_t) * LI_CUDNN_IOTA, "cuDNN length table");
    int32_t *d = NULL;
    if (h && cudaMalloc((void **)&d, sizeof(int32_t) * LI_CUDNN_IOTA) == cudaSuccess) {
        for (int i = 0; i < LI_CUDNN_IOTA; i++) h[i] = i;
        if (cudaMemcpy(d, h, sizeof(int32_t) * LI_CUDNN_IOTA, cudaMemcpyHostToDevice) != cudaSuccess) {
            cudaFree(d);
            d = NULL;
        }
    }
    li_free(h);
    return d;
}

// Loads cuDNN on first use; false (with the reason in cudnn_note, recorded as an error under
// LI_ATTN_LIBRARY) when it cannot be used.
static bool cudnn_ready(li_backend *be) {
    li_cuda_impl *im = be->impl;
    if (!im->cudnn_tried) {
        im->cudnn_tried = true;
        im->cudnn = li_cudnn_open(im->stream, im->env.cudnn_lib, im->cudnn_note,
                                  sizeof im->cudnn_note);
        if (im->cudnn && !im->capturing && im->env.dense_pad) im->lib_iota = iota_make(im);
    }
    if (!im->cudnn && be->attn_impl == LI_ATTN_LIBRARY)
        record(im, LI_ERR_UNSUPPORTED, "--attn-impl cudnn: %s", im->cudnn_note);
    return im->cudnn != NULL;
}

// Runs one cuDNN call; 0 queued, 1 cuDNN refused the shape (nothing queued), -1 error recorded.
static int cudnn_call(li_backend *be, const li_sdpa_args *a, const char *op) {
    li_cuda_impl *im = be->impl;
    char err[512] = "";
    int rc = li_cudnn_sdpa(im->cudnn, a, err, sizeof err);
    if (rc == 0) li_cu_prof_mark(im, op);
    else if (rc < 0) record(im, LI_ERR_BACKEND, "cuda %s: %s", op, err);
    else if (be->attn_impl == LI_ATTN_LIBRARY) record(im, LI_ERR_UNSUPPORTED, "cuda %s: %s", op, err);
    else snprintf(im->cudnn_note, sizeof im->cudnn_note, "%s", err);
    return rc;
}

static bool grow_host(void **p, int *cap, int n, size_t size) {
    if (n <= *cap) return true;
    int c = *cap > 16 ? *cap : 16;
    while (c < n) c *= 2;
    void *q = realloc(*p, (size_t)c * size);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

// The host inputs that decide a call's plan, as one int64 vector: P, the sequences' count, then
// per sequence its rows (t0, n), whether it has kv_first, its page words, and its rows' n_visible
// (and kv_first). Equal vectors: equal plans (the layers of one forward, or a repeated batch).
static bool lib_plan_key(li_cuda_impl *im, int64_t **key, int *len, int *cap,
                         const li_attn_seq *seqs, int n_seqs, int P) {
    int n = 2;
    for (int i = 0; i < n_seqs; i++)
        n += 4 + seqs[i].kv.n_pages + seqs[i].n * (seqs[i].kv.kv_first_host ? 2 : 1);
    if (!grow_host((void **)key, cap, n, sizeof **key)) {
        record(im, LI_ERR_OOM, "cuda attention (cudnn plan): out of host memory");
        return false;
    }
    int64_t *k = *key;
    int at = 0;
    k[at++] = P;
    k[at++] = n_seqs;
    for (int i = 0; i < n_seqs; i++) {
        const li_attn_seq *sq = &seqs[i];
        // a caller without host copies (NULL) is never covered: its flags keep the keys apart
        const bool has_first = sq->kv.kv_first_host != NULL;
        const bool has_pages = sq->kv.pages_host != NULL, has_nv = sq->kv.n_visible_host != NULL;
        k[at++] = sq->t0, k[at++] = sq->n, k[at++] = sq->kv.n_pages;
        k[at++] = has_first | has_pages << 1 | has_nv << 2;
        for (int p = 0; has_pages && p < sq->kv.n_pages; p++) k[at++] = (int64_t)sq->kv.pages_host[p];
        for (int t = 0; has_nv && t < sq->n; t++) k[at++] = sq->kv.n_visible_host[t];
        for (int t = 0; has_first && t < sq->n; t++) k[at++] = sq->kv.kv_first_host[t];
    }
    *len = at;
    return true;
}

// Packs the blocks of the covered sequences into p's slots (non-causal first, then causal, each
// call padded to a power of two with one-row, one-key slots), their page lists, the rows' slot
// lists, and uploads them in one copy. false: the plan does not apply (p->ok stays false) or an
// error was recorded.
static bool lib_plan_pack(li_cuda_impl *im, lib_plan *p, const li_attn_seq *seqs, int n_seqs,
                          int P, int H, int Hkv, int Dh) {
    const li_attn_blocks *bl = im->lib_blocks;
    int n_nc = 0, n_c = 0, n_pages = 0, n_list = 0, n_rows = 0;
    p->max_rows = p->max_keys = 1;
    for (int i = 0; i < n_seqs; i++) {
        if (!p->covered[i]) continue;
        const li_attn_blocks *b = &bl[i];
        n_nc += b->n_noncausal;
        n_c += b->n_entries - b->n_noncausal;
        n_list += b->group_first[b->n_groups];
        n_rows += seqs[i].n;
        for (int e = 0; e < b->n_entries; e++) {
            const li_attn_entry *en = &b->entries[e];
            const int off = (int)((en->key0 - b->segs[en->seg].k0) % P);
            n_pages += (off + en->n_keys + P - 1) / P;
        }
        if (b->max_rows > p->max_rows) p->max_rows = b->max_rows;
        if (b->max_keys > p->max_keys) p->max_keys = b->max_keys;
    }
    p->B1 = n_nc ? (int)pow2_at_least((unsigned)n_nc, 1) : 0;
    p->B2 = n_c ? (int)pow2_at_least((unsigned)n_c, 1) : 0;
    const int n_slots = p->B1 + p->B2;
    if (n_slots == 0 || n_slots > 65535) return false;
    // row and key bounds rounded up to powers of two: a new batch reuses a plan of its class
    p->s_q = (int)pow2_at_least((unsigned)p->max_rows, 16);
    p->s_kv = (int)pow2_at_least((unsigned)p->max_keys, 64);
    p->n_rows = n_rows;
    n_pages += n_slots - n_nc - n_c;  // a padding slot reads one page

    size_t n_slot_b = (size_t)n_slots * sizeof(li_cuda_block_slot), n_len_b = (size_t)n_slots * 4;
    size_t n_off_b = ((size_t)n_slots + 1) * 4, n_pages_b = (size_t)n_pages * 4;
    size_t n_rows_b = (size_t)n_rows * sizeof(li_cuda_block_row), n_list_b = (size_t)n_list * 4;
    size_t bytes = n_slot_b + 2 * n_len_b + 3 * n_off_b + n_pages_b + n_rows_b + n_list_b;
    int n_entries = 0;
    for (int i = 0; i < n_seqs; i++) n_entries += p->covered[i] ? bl[i].n_entries : 0;
    char *h = malloc(bytes);
    int *slot_of = malloc((size_t)(n_entries ? n_entries : 1) * sizeof *slot_of);
    if (!h || !slot_of) {
        free(h);
        free(slot_of);
        record(im, LI_ERR_OOM, "cuda attention (cudnn plan): out of host memory");
        return false;
    }
    li_cuda_block_slot *slots = (li_cuda_block_slot *)h;
    int32_t *seq_q = (int32_t *)(h + n_slot_b), *seq_kv = seq_q + n_slots;
    int32_t *q_off = seq_kv + n_slots, *kv_off = q_off + n_slots + 1, *lse_off = kv_off + n_slots + 1;
    int32_t *pages = lse_off + n_slots + 1;
    li_cuda_block_row *rows = (li_cuda_block_row *)(pages + n_pages);
    int32_t *list = (int32_t *)(rows + n_rows);
    // slots: pass 0 the non-causal blocks of every covered sequence, pass 1 the causal ones
    int64_t q_row = 0, kv_row = 0;
    int slot = 0, page = 0, first_row = -1;
    for (int pass = 0; pass < 2; pass++) {
        int base = 0;  // entry ids of sequence i in slot_of start at base
        for (int i = 0; i < n_seqs; i++) {
            if (!p->covered[i]) continue;
            const li_attn_blocks *b = &bl[i];
            if (first_row < 0) first_row = seqs[i].t0;
            const int e0 = pass ? b->n_noncausal : 0, e1 = pass ? b->n_entries : b->n_noncausal;
            for (int e = e0; e < e1; e++) {
                const li_attn_entry *en = &b->entries[e];
                const li_attn_segment *sg = &b->segs[en->seg];
                const int64_t rel = en->key0 - sg->k0;
                const int pg0 = sg->page0 + (int)(rel / P), off = (int)(rel % P);
                const int n_pg = (off + en->n_keys + P - 1) / P;
                const li_attn_group *gr = &b->groups[en->group];
                slots[slot] = (li_cuda_block_slot){
                    .row0 = seqs[i].t0 + gr->t0, .n_rows = gr->n, .delta = (int32_t)sg->delta,
                    .off = off, .n_keys = en->n_keys, .q_row = (int32_t)q_row,
                    .kv_row = (int32_t)kv_row, .table0 = page};
                for (int k = 0; k < n_pg; k++)
                    pages[page++] = (int32_t)li_page_id(seqs[i].kv.pages_host[pg0 + k]);
                slot_of[base + e] = slot++;
                q_row += gr->n;
                kv_row += (en->n_keys + 255) & ~255;  // room for the zeroed tail
            }
            base += b->n_entries;
        }
        const int pad_to = pass ? p->B1 + p->B2 : p->B1;
        while (slot < pad_to) {  // one row over one real key; its output is never read
            slots[slot] = (li_cuda_block_slot){.row0 = first_row, .n_rows = 1, .n_keys = 1,
                                               .q_row = (int32_t)q_row, .kv_row = (int32_t)kv_row,
                                               .table0 = page};
            pages[page++] = pages[0];
            slot++;
            q_row += 1;
            kv_row += 256;
        }
    }
    for (int s = 0; s < n_slots; s++) {
        seq_q[s] = slots[s].n_rows;
        seq_kv[s] = slots[s].n_keys;
        q_off[s] = slots[s].q_row * H * Dh;
        kv_off[s] = slots[s].kv_row * Hkv * Dh;
        lse_off[s] = slots[s].q_row * H;
    }
    q_off[n_slots] = (int32_t)(q_row * H * Dh);
    kv_off[n_slots] = (int32_t)(kv_row * Hkv * Dh);
    lse_off[n_slots] = (int32_t)(q_row * H);
    p->q_rows = q_row;
    p->kv_keys = kv_row;
    // rows: each covered row's output row and its group's slots
    int r_at = 0, l_at = 0, base = 0;
    for (int i = 0; i < n_seqs; i++) {
        if (!p->covered[i]) continue;
        const li_attn_blocks *b = &bl[i];
        for (int g = 0; g < b->n_groups; g++) {
            const int first = l_at;
            for (int k = b->group_first[g]; k < b->group_first[g + 1]; k++)
                list[l_at++] = slot_of[base + b->group_entries[k]];
            for (int r = 0; r < b->groups[g].n; r++)
                rows[r_at++] = (li_cuda_block_row){.first = first, .count = l_at - first, .r = r,
                                                   .t = seqs[i].t0 + b->groups[g].t0 + r};
        }
        base += b->n_entries;
    }
    // direct: no padding slot, every row in one slot, packed in the call's row order
    p->direct_row = n_slots == n_nc + n_c && n_rows > 0 ? rows[0].t : -1;
    for (int r = 0; r < n_rows && p->direct_row >= 0; r++)
        if (rows[r].count != 1 ||
            rows[r].t != p->direct_row + slots[list[rows[r].first]].q_row + rows[r].r)
            p->direct_row = -1;
    free(slot_of);
    bool ok = true;
    if (bytes > p->dev_cap) {
        cudaFree(p->dev);
        p->dev = NULL;
        p->dev_cap = 0;
        im->scratch_allocs++;
        ok = !cu_fail(im, "attention (cudnn plan)", cudaMalloc(&p->dev, bytes));
        if (ok) p->dev_cap = bytes;
    }
    ok = ok && !cu_fail(im, "attention (cudnn plan upload)",
                        cudaMemcpyAsync(p->dev, h, bytes, cudaMemcpyHostToDevice, im->stream));
    free(h);  // pageable source: staged before cudaMemcpyAsync returns
    if (!ok) return false;
    char *d = p->dev;
    p->d_slots = (li_cuda_block_slot *)d;
    p->d_seq_q = (int32_t *)(d + n_slot_b);
    p->d_seq_kv = p->d_seq_q + n_slots;
    p->d_q_off = p->d_seq_kv + n_slots;
    p->d_kv_off = p->d_q_off + n_slots + 1;
    p->d_lse_off = p->d_kv_off + n_slots + 1;
    p->d_pages = p->d_lse_off + n_slots + 1;
    p->d_rows = (li_cuda_block_row *)(p->d_pages + n_pages);
    p->d_slot_list = (int32_t *)(p->d_rows + n_rows);
    return true;
}

// The plan for this call: found among the kept ones (same host inputs) or made and uploaded.
// Sequences of min_rows rows or more whose visibility splits into blocks are covered; the plan
// applies (p->ok) when they hold min_total rows in all and the packed offsets fit int32. NULL:
// an error was recorded.
static lib_plan *lib_plan_get(li_cuda_impl *im, const li_attn_seq *seqs, int n_seqs, int P,
                              int H, int Hkv, int Dh, int min_rows, int min_total) {
    im->lib_tick++;
    lib_plan *lru = &im->lib[0];
    lib_plan *probe = &im->lib[LI_LIB_PLANS];  // the key of this call, built in a spare entry
    if (!lib_plan_key(im, &probe->key, &probe->key_len, &probe->key_cap, seqs, n_seqs, P))
        return NULL;
    for (int i = 0; i < LI_LIB_PLANS; i++) {
        lib_plan *p = &im->lib[i];
        if (p->key_len == probe->key_len &&
            !memcmp(p->key, probe->key, (size_t)p->key_len * sizeof *p->key)) {
            p->last_used = im->lib_tick;
            return p;
        }
        if (p->last_used < lru->last_used) lru = p;
    }
    lib_plan *p = lru;
    int64_t *k = p->key;  // swap keys: the probe's becomes the plan's
    int cap = p->key_cap;
    p->key = probe->key, p->key_len = probe->key_len, p->key_cap = probe->key_cap;
    probe->key = k, probe->key_cap = cap, probe->key_len = 0;
    p->last_used = im->lib_tick;
    p->ok = false;
    if (!grow_host((void **)&p->covered, &p->cap_seqs, n_seqs, 1) ||
        !grow_host((void **)&im->lib_blocks, &im->lib_cap_blocks, n_seqs, sizeof(li_attn_blocks))) {
        p->key_len = 0;
        record(im, LI_ERR_OOM, "cuda attention (cudnn plan): out of host memory");
        return NULL;
    }
    // grow_host leaves new li_attn_blocks uninitialised: zero them once (they own their arrays)
    for (int i = im->lib_init_blocks; i < im->lib_cap_blocks; i++)
        memset(&im->lib_blocks[i], 0, sizeof im->lib_blocks[i]);
    im->lib_init_blocks = im->lib_cap_blocks;
    p->n_seqs = n_seqs;
    int total = 0;
    for (int i = 0; i < n_seqs; i++) {
        const li_attn_seq *sq = &seqs[i];
        p->covered[i] = sq->n >= min_rows && sq->kv.pages_host && sq->kv.n_visible_host &&
                        li_attn_blocks_plan(&im->lib_blocks[i], sq->kv.pages_host, sq->kv.n_pages,
                                            P, sq->kv.kv_first_host, sq->kv.n_visible_host, sq->n);
        if (p->covered[i]) total += sq->n;
    }
    if (total == 0 || total < min_total) return p;
    if (!lib_plan_pack(im, p, seqs, n_seqs, P, H, Hkv, Dh)) return im->err == LI_OK ? p : NULL;
    // element offsets are int32 in the library's ragged tensors
    p->ok = p->q_rows * H * Dh < INT32_MAX && p->kv_keys * Hkv * Dh < INT32_MAX;
    return p;
}

void li_backend_cuda_attn_note(li_backend *be, char *buf, size_t n) {
    li_cuda_impl *im = be->impl;
    if (!im->cudnn) {
        snprintf(buf, n, "not used: %s", im->cudnn_tried ? im->cudnn_note : "no call asked for it");
        return;
    }
    li_cudnn_stats cs;
    li_cudnn_get_stats(im->cudnn, &cs);
    snprintf(buf, n, "cuDNN %d: %lld plans built in %.1f ms, %lld calls, %lld shapes refused%s%s",
             li_cudnn_version(im->cudnn), (long long)cs.plans_built, cs.build_ms,
             (long long)cs.calls, (long long)cs.unsupported, im->cudnn_note[0] ? "; last: " : "",
             im->cudnn_note);
}

// The multi-row chunks of a batch's sequences through cuDNN, all in one non-causal and one
// causal call. Returns the plan (its `covered` says which sequences it ran: the caller runs the
// others on its own kernels) or NULL when none ran through cuDNN (nothing was queued that writes
// `out`, or an error was recorded).
static const lib_plan *attention_cudnn(li_backend *be, void *out, bool out_bf16, const float *q,
                                       int n_seqs,
                                       const li_attn_seq *seqs, int H, const li_kv_storage *kv,
                                       int il, float scale, const li_rope_table *rope) {
    li_cuda_impl *im = be->impl;
    const int Hkv = kv->n_head_kv, Dh = kv->head_dim, P = kv->page_size;
    const bool lib = be->attn_impl == LI_ATTN_LIBRARY;
    if (be->attn_impl == LI_ATTN_NATIVE || im->capturing || n_seqs <= 0) return NULL;
    if (kv->dtype != LI_DTYPE_BF16 || Dh % 8 || Dh > 256 || Hkv <= 0 || H % Hkv) {
        if (lib)
            record(im, LI_ERR_UNSUPPORTED, "--attn-impl cudnn: needs a bf16 KV pool and a head "
                   "size that is a multiple of 8 up to 256 (pool %s, Dh %d)",
                   li_dtype_name(kv->dtype), Dh);
        return NULL;
    }
    // auto: the row bound over the call; --attn-impl cudnn: every chunk of 2 rows or more
    int multi = 0;
    for (int i = 0; i < n_seqs; i++) multi += seqs[i].n >= 2 ? seqs[i].n : 0;
    if (multi == 0 || (!lib && multi < LI_CUDNN_MIN_ROWS)) return NULL;
    if (!cudnn_ready(be)) return NULL;
    lib_plan *p = lib_plan_get(im, seqs, n_seqs, P, H, Hkv, Dh, 2, lib ? 1 : LI_CUDNN_MIN_ROWS);
    if (!p || !p->ok) {
        if (p && lib && im->err == LI_OK)
            record(im, LI_ERR_UNSUPPORTED, "--attn-impl cudnn: no sequence of this call has a "
                   "visibility pattern that splits into library blocks (attn-blocks.h)");
        return NULL;
    }
    bool any_delta = false;
    for (int i = 0; i < n_seqs && !any_delta; i++)
        for (int k = 0; p->covered[i] && k < seqs[i].kv.n_pages && !any_delta; k++)
            any_delta = li_page_delta(seqs[i].kv.pages_host[k]) != 0;
    if (any_delta && !rope) {
        record(im, LI_ERR_INVALID_ARG, "cuda attention: pages with a RoPE offset but no table");
        return NULL;
    }
    const int n_slots = p->B1 + p->B2;
    // packed Q / O rows and gathered keys, plus a tile of slack: the library reads whole tiles
    const size_t q_elems = (size_t)(p->q_rows + 256) * H * Dh;
    uint16_t *qb = li_cu_scratch_get(im, &im->lib_q, q_elems * 2, "attention (cudnn q)");
    uint16_t *ob = li_cu_scratch_get(im, &im->lib_o, q_elems * 2, "attention (cudnn o)");
    float *lse = li_cu_scratch_get(im, &im->lib_lse, (size_t)(p->q_rows + 256) * H * 4,
                                   "attention (cudnn lse)");
    const size_t kv_elems = (size_t)(p->kv_keys + 256) * Hkv * Dh;
    uint16_t *kb =
        li_cu_scratch_get(im, &im->lib_kv, kv_elems * 4, "attention (cudnn gathered K / V)");
    if (!qb || !ob || !lse || !kb) return NULL;
    uint16_t *vb = kb + kv_elems;
    // a bf16 out whose rows are the packed rows (a plain prompt chunk: one causal block) is
    // written by cuDNN itself — the merge of one block is a copy (w = 1), the same bits
    uint16_t *o_lib = out_bf16 && p->direct_row >= 0 ? (uint16_t *)out + (size_t)p->direct_row * H * Dh
                                                     : ob;
    li_cuda_rope_args r;
    memset(&r, 0, sizeof r);
    if (rope) r = rope_args(rope);
    if (cu_fail(im, "attention (cudnn q)",
                li_cuda_blocks_q(im->stream, qb, q, p->d_slots, n_slots, p->max_rows, H, Dh, &r)) ||
        cu_fail(im, "attention (cudnn gather)",
                li_cuda_blocks_gather(im->stream, kb, vb, kv->data, kv->n_layer, il, Hkv, P, Dh,
                                      p->d_slots, p->d_pages, n_slots, p->max_keys)))
        return NULL;
    for (int causal = 0; causal < 2; causal++) {
        const int s0 = causal ? p->B1 : 0, nb = causal ? p->B2 : p->B1;
        if (nb == 0) continue;
        li_sdpa_args a = {
            .kind = LI_SDPA_RAGGED, .b = nb, .H = H, .Hkv = Hkv, .Dh = Dh, .s_q = p->s_q,
            .s_kv = p->s_kv, .causal = causal, .scale = scale, .q = qb, .o = o_lib, .k = kb,
            .v = vb, .lse = lse, .seq_q = p->d_seq_q + s0, .seq_kv = p->d_seq_kv + s0,
            .q_off = p->d_q_off + s0, .kv_off = p->d_kv_off + s0, .lse_off = p->d_lse_off + s0};
        int rc = cudnn_call(be, &a, causal ? "attention (cudnn causal)" : "attention (cudnn)");
        if (rc < 0) return NULL;
        if (rc > 0) {  // refused: this call runs on our kernels from now on
            p->ok = false;
            return NULL;
        }
    }
    if (o_lib != ob) return p;
    if (cu_fail(im, "attention (cudnn merge)",
                li_cuda_blocks_merge(im->stream, out, out_bf16, ob, lse, p->d_slots, p->d_rows,
                                     p->d_slot_list, p->n_rows, H, Dh)))
        return NULL;
    return p;
}

// At load (li_cu_reserve): opens cuDNN and builds the smallest ragged plans of both masks for
// these heads, so that cuDNN's one-time set-up is not paid inside a request. A failure here is
// no error: the calls decide again (and --attn-impl cudnn reports there).
void li_cu_attn_prepare(li_backend *be, int H, int Hkv, int Dh) {
    li_cuda_impl *im = be->impl;
    if (be->attn_impl == LI_ATTN_NATIVE || Dh % 8 || Dh > 256 || Hkv <= 0 || H % Hkv) return;
    if (!cudnn_ready(be)) return;
    float lse_marker;  // (never written: the plan only needs to know that LSE is wanted)
    for (int causal = 0; causal < 2; causal++) {
        li_sdpa_args a = {.kind = LI_SDPA_RAGGED, .b = 1, .H = H, .Hkv = Hkv, .Dh = Dh,
                          .s_q = 16, .s_kv = 64, .causal = causal,
                          .scale = 1.0f / sqrtf((float)Dh), .lse = &lse_marker};
        char err[256] = "";
        if (li_cudnn_prepare(im->cudnn, &a, err, sizeof err) != 0)
            snprintf(im->cudnn_note, sizeof im->cudnn_note, "%s", err);
    }
}

// attention_dense / attention_dense_bf16 through cuDNN: q converted to bf16 (unscaled: cuDNN
// scales the scores in fp32), K / V bf16, out bf16 (outb) or f32 (outf, through lib_o). false
// when it does not apply (the caller runs its kernel).
// With LI_CUDNN_DENSE_PAD=1 the plan is that of the lengths' size class (LI_ATTN_DENSE_SLACK
// rows, padding mask): DPad gives LLaDA's canvas a new length every block, and a plan per exact
// length cost ~65 ms to build on the H100 (516.6 ms for 8 in bench dllm's GSM8K run at K = 4: a
// third of a step per step). q and o then hold the class's rows here, k / v and outb have the
// slack backend.h asks for. Off by default until gpu-check and the A/B (bench/gpu-run.sh
// densepad) have run on a GPU: this build has not been.
static bool dense_cudnn(li_backend *be, float *outf, uint16_t *outb, const float *q, int T, int H,
                        const uint16_t *k, const uint16_t *v, int nk, int Hkv, int Dh,
                        float scale) {
    li_cuda_impl *im = be->impl;
    // Recorded into step graphs too (a key's first step ran eagerly, so the plan and scratch
    // exist): a graph must compute the bits of the op-by-op step. If cuDNN cannot be recorded,
    // the recording fails and graph_end re-runs the step eagerly, through cuDNN again.
    if (be->attn_impl == LI_ATTN_NATIVE || T < 1 || nk < 1) return false;
    if (Dh % 8 || Dh > 256 || Hkv <= 0 || H % Hkv) {
        if (be->attn_impl == LI_ATTN_LIBRARY)
            record(im, LI_ERR_UNSUPPORTED, "--attn-impl cudnn: head size %d not supported", Dh);
        return be->attn_impl == LI_ATTN_LIBRARY;
    }
    if (!cudnn_ready(be)) return be->attn_impl == LI_ATTN_LIBRARY;
    const int C = LI_ATTN_DENSE_SLACK;
    const int sq = (T + C - 1) / C * C, skv = (nk + C - 1) / C * C;
    const bool padded = im->env.dense_pad && im->lib_iota && sq < LI_CUDNN_IOTA &&
                        skv < LI_CUDNN_IOTA;
    const size_t nq = (size_t)T * H * Dh, nq_plan = (size_t)(padded ? sq : T) * H * Dh;
    uint16_t *qb = li_cu_scratch_get(im, &im->lib_q, nq_plan * 2, "attention_dense (cudnn q)");
    uint16_t *ob =
        outb ? outb : li_cu_scratch_get(im, &im->lib_o, nq_plan * 2, "attention_dense (cudnn o)");
    if (!qb || !ob) return true;
    if (cu_fail(im, "attention_dense (cudnn q)", li_cuda_f32_to_bf16(im->stream, qb, q, (int64_t)nq)))
        return true;
    li_sdpa_args a = {.kind = LI_SDPA_DENSE, .b = 1, .H = H, .Hkv = Hkv, .Dh = Dh, .s_q = T,
                      .s_kv = nk, .scale = scale, .q = qb, .k = k, .v = v, .o = ob};
    if (padded) {
        a.kind = LI_SDPA_PADDED;
        a.s_q = sq, a.s_kv = skv;
        a.seq_q = im->lib_iota + T, a.seq_kv = im->lib_iota + nk;
    }
    int rc = cudnn_call(be, &a, "attention_dense (cudnn)");
    if (rc > 0) return be->attn_impl == LI_ATTN_LIBRARY;
    if (rc == 0 && outf)
        cu_fail(im, "attention_dense (cudnn out)", li_cuda_bf16_to_f32(im->stream, outf, ob, (int64_t)nq));
    return true;
}

// One sequence's rows on our own kernels (the decode kernel for few rows, the tensor-core tile
// kernel for many).
static void attention_native(li_backend *be, float *out, const float *q, int T, int H,
                             const li_kv_storage *kv, int il, const li_kv_seq *seq,
                             const int32_t *kv_first, const int32_t *n_visible, float scale,
                             const li_rope_table *rope) {
    li_cuda_impl *im = be->impl;
    li_cuda_attn_args a;
    if (T <= 0 || !attn_args(im, &a, out, q, T, H, kv, il, seq->pages, seq->n_pages, kv_first,
                             n_visible, scale, rope))
        return;
    li_cuda_rope_args r;
    if (rope) r = rope_args(rope);
    if (li_cuda_attention_uses_tc(T, a.Dh)) { // many rows: the tensor-core tile kernel
        if (seq->n_pages < 1) {
            record(im, LI_ERR_INVALID_ARG, "cuda attention: a sequence without pages");
            return;
        }
        // one word per page slot, then the number of keys the page table holds
        uint64_t *keys = li_cu_scratch_get(
            im, &im->keys, ((size_t)seq->n_pages * kv->page_size + 1) * 8, "attention (key index)");
        if (!keys) return;
        // few row tiles (a query over cached documents): split the keys so that the GPU fills
        li_cuda_attention_prefill_plan(T, H, seq->n_pages * kv->page_size, im->n_sm, &a.n_split,
                                       &a.keys_per_split);
        if (a.n_split > 1) {
            size_t n_o = (size_t)T * H * a.n_split * a.Dh, n_ml = (size_t)T * H * a.n_split * 2;
            float *part = li_cu_scratch_get(im, &im->attn, (n_o + n_ml) * sizeof(float),
                                            "attention (prefill split-K partials)");
            if (!part) return;
            a.part_o = part;
            a.part_ml = part + n_o;
        }
        li_cuda_rope_args none;
        memset(&none, 0, sizeof none);
        cu_fail(im, "attention (prefill)",
                li_cuda_attention_prefill(im->stream, &a, rope ? &r : &none, keys));
        return;
    }
    if (attn_split(im, &a))
        cu_fail(im, "attention", li_cuda_attention(im->stream, &a, rope ? &r : NULL));
}

// Several sequences' rows (backend.h attention_seqs): the multi-row chunks through cuDNN in one
// call when it applies (attention_cudnn), the rest sequence by sequence on our kernels. A bf16
// out is written by cuDNN's merge directly (saving, per query element, the f32 write and the
// rounding pass's 4 + 2 bytes: ~45 µs of a 4,096-row Llama-8B chunk at 3 TB/s); our kernels
// write f32 rows, rounded into out after them (scratch lib_f32).
void li_cu_attention_seqs(li_backend *be, void *out, li_dtype out_dt, const float *q, int n_seqs,
                          const li_attn_seq *seqs, int H, const li_kv_storage *kv, int il,
                          const int32_t *kv_first, const int32_t *n_visible, float scale,
                          const li_rope_table *rope) {
    li_cuda_impl *im = be->impl;
    const size_t row = (size_t)H * kv->head_dim;
    const bool bf16 = out_dt == LI_DTYPE_BF16;
    if (!bf16 && out_dt != LI_DTYPE_F32) {
        record(im, LI_ERR_INVALID_ARG, "cuda attention: output dtype %s (f32 or bf16)",
               li_dtype_name(out_dt));
        return;
    }
    const lib_plan *p = attention_cudnn(be, out, bf16, q, n_seqs, seqs, H, kv, il, scale, rope);
    const bool lib = be->attn_impl == LI_ATTN_LIBRARY;
    float *o32 = out;
    if (bf16) {  // rows for our kernels: an f32 scratch as long as the call's rows
        int rows = 0, native = 0;
        for (int i = 0; i < n_seqs; i++) {
            if (seqs[i].t0 + seqs[i].n > rows) rows = seqs[i].t0 + seqs[i].n;
            native += !(p && p->covered[i]);
        }
        if (native == 0) return;
        o32 = li_cu_scratch_get(im, &im->lib_f32, (size_t)rows * row * 4,
                                "attention (f32 rows before rounding)");
        if (!o32) return;
    }
    for (int i = 0; i < n_seqs && im->err == LI_OK; i++) {
        const li_attn_seq *sq = &seqs[i];
        if (p && p->covered[i]) continue;
        if (lib && sq->n >= 2) {  // the A/B switch: a chunk the library cannot run is an error
            record(im, LI_ERR_UNSUPPORTED, "--attn-impl cudnn: a chunk of %d rows has no split "
                   "into library blocks (attn-blocks.h)", sq->n);
            return;
        }
        attention_native(be, o32 + sq->t0 * row, q + sq->t0 * row, sq->n, H, kv, il, &sq->kv,
                         kv_first ? kv_first + sq->t0 : NULL, n_visible + sq->t0, scale, rope);
        if (bf16)
            cu_fail(im, "attention (rounding to bf16)",
                    li_cuda_f32_to_bf16(im->stream, (uint16_t *)out + sq->t0 * row,
                                        o32 + sq->t0 * row, (int64_t)sq->n * (int64_t)row));
    }
}

void li_cu_attention(li_backend *be, float *out, const float *q, int T, int H,
                         const li_kv_storage *kv, int il, const li_kv_seq *seq,
                         const int32_t *kv_first, const int32_t *n_visible, float scale,
                         const li_rope_table *rope) {
    li_attn_seq one = {.t0 = 0, .n = T, .kv = *seq};
    li_cu_attention_seqs(be, out, LI_DTYPE_F32, q, 1, &one, H, kv, il, kv_first, n_visible, scale,
                         rope);
}

// Decode rows of n sequences (backend.h attention_decode): one launch of the slot kernel, each
// row reading its own table (row_page0 = page_start); a launch per row for the shapes it does
// not serve.
void li_cu_attention_decode(li_backend *be, float *out, const float *q, int n, int H,
                                const li_kv_storage *kv, int il, const uint64_t *pages,
                                const int32_t *page_start, const int32_t *page_start_host,
                                const int32_t *n_visible, float scale, const li_rope_table *rope) {
    li_cuda_impl *im = be->impl;
    const int Hkv = kv->n_head_kv;
    if (n <= 0) return;
    if (n > 65535 || Hkv <= 0 || H % Hkv ||
        !li_cuda_attention_rows_ok(H / Hkv, kv->head_dim, kv->dtype == LI_DTYPE_BF16)) {
        li_attention_decode_rows(be, out, q, n, H, kv, il, pages, page_start_host, n_visible, scale,
                                 rope);
        return;
    }
    int max_pages = 0;
    for (int i = 0; i < n; i++) {
        const int np = page_start_host[i + 1] - page_start_host[i];
        if (np < 1) {
            record(im, LI_ERR_INVALID_ARG, "cuda attention: a sequence without pages");
            return;
        }
        if (np > max_pages) max_pages = np;
    }
    li_cuda_attn_args a;
    if (!attn_args(im, &a, out, q, n, H, kv, il, pages, max_pages, NULL, n_visible, scale, rope))
        return;
    a.row_page0 = page_start;
    li_cuda_rope_args r;
    if (rope) r = rope_args(rope);
    if (attn_split(im, &a))
        cu_fail(im, "attention_decode", li_cuda_attention(im->stream, &a, rope ? &r : NULL));
}

// ---- diffusion / FP8 ops (dllm.cu) --------------------------------------------------------------

// Layer-0 attention of LLaDA (FACache carries its state between calls). From 16 query rows at
// Dh 64 / 128 the keys are rounded to bf16 once per call and streamed by the tensor-core kernel
// with the state in and out (64-key tiles, whatever `tile` says: the result is the same online
// softmax within bf16 rounding, and a call's bits depend only on its inputs, so cached = uncached
// still holds). The fp32 kernel took ~1.6 ms of a 32 ms LLaDA-8B step at canvas 1024, 13x the
// time of a tensor-core layer; it serves the other shapes (fewer rows, other head sizes).
void li_cu_flash_attn_tiles(li_backend *be, float *o, float *m, float *l, const float *q,
                                int nq, int H, const float *k, const float *v, int nk, int Hkv,
                                int Dh, int tile, float scale) {
    li_cuda_impl *im = be->impl;
    if (li_cuda_attention_uses_tc(nq, Dh) && nk > 0 && Hkv > 0 && H % Hkv == 0) {
        const size_t nkv = (size_t)nk * Hkv * Dh;
        uint16_t *kb = li_cu_scratch_get(im, &im->dense, nkv * 4, "flash_attn_tiles (bf16 K / V)");
        if (!kb) return;
        uint16_t *vb = kb + nkv;
        if (cu_fail(im, "flash_attn_tiles (bf16 k)",
                    li_cuda_f32_to_bf16(im->stream, kb, k, (int64_t)nkv)) ||
            cu_fail(im, "flash_attn_tiles (bf16 v)",
                    li_cuda_f32_to_bf16(im->stream, vb, v, (int64_t)nkv)))
            return;
        cu_fail(im, "flash_attn_tiles",
                li_cuda_flash_attn_tc(im->stream, o, m, l, q, nq, H, kb, vb, nk, Hkv, Dh, scale));
        return;
    }
    cu_fail(im, "flash_attn_tiles", li_cuda_flash_attn_tiles(im->stream, o, m, l, q, nq, H, k, v,
                                                             nk, Hkv, Dh, tile, scale));
}

void li_cu_flash_attn_finalize(li_backend *be, float *out, const float *o, const float *l,
                                   int64_t n, int Dh) {
    li_cuda_impl *im = be->impl;
    cu_fail(im, "flash_attn_finalize", li_cuda_flash_attn_finalize(im->stream, out, o, l, n, Dh));
}

bool li_backend_cuda_attention_tc(int T, int head_dim) {
    return li_cuda_attention_uses_tc(T, head_dim) != 0;
}

// LLaDA's bidirectional layers (>= 1) on f32 K / V: K and V rounded to bf16 (what the tensor
// cores read anyway), then cuDNN (dense_cudnn) or our pipelined flash kernel (cp.async tiles, S
// and P in registers: no score round trip). Two paths that lost on the H200 were removed (in git
// history before this file's split): cuBLASLt S = Q Kᵀ, softmax, O = P V, and the flash kernel
// reading f32 K / V per tile.
static void cu_attention_dense(li_backend *be, float *out, const float *q, int T, int H,
                               const float *k, const float *v, int nk, int Hkv, int Dh,
                               float scale) {
    li_cuda_impl *im = be->impl;
    if (T > 0 && nk > 0 && Hkv > 0) {
        // K and V each with dense_cudnn's slack rows after them, zeroed (finite) when a padded
        // plan reads them
        const size_t nkv = (size_t)nk * Hkv * Dh, slack = (size_t)LI_ATTN_DENSE_SLACK * Hkv * Dh;
        uint16_t *kb = li_cu_scratch_get(im, &im->dense, (nkv + slack) * 4,
                                         "attention_dense (bf16 K / V)");
        if (!kb) return;
        uint16_t *vb = kb + nkv + slack;
        if (cu_fail(im, "attention_dense (bf16 k)", li_cuda_f32_to_bf16(im->stream, kb, k, (int64_t)nkv)) ||
            cu_fail(im, "attention_dense (bf16 v)", li_cuda_f32_to_bf16(im->stream, vb, v, (int64_t)nkv)))
            return;
        if (im->env.dense_pad &&  // (read only by a padded plan)
            (cu_fail(im, "attention_dense (slack)", cudaMemsetAsync(kb + nkv, 0, slack * 2, im->stream)) ||
             cu_fail(im, "attention_dense (slack)", cudaMemsetAsync(vb + nkv, 0, slack * 2, im->stream))))
            return;
        if (dense_cudnn(be, out, NULL, q, T, H, kb, vb, nk, Hkv, Dh, scale)) return;
        cu_fail(im, "attention_dense",
                li_cuda_attention_dense(im->stream, out, q, T, H, kb, vb, 1, nk, Hkv, Dh, scale));
        return;
    }
    cu_fail(im, "attention_dense",
            li_cuda_attention_dense(im->stream, out, q, T, H, k, v, 0, nk, Hkv, Dh, scale));
}

// The pipelined flash kernel's dense mode on the bf16 K / V as given, storing bf16 (no conversion
// passes: attention_dense's three are what this op exists to remove).
static void cu_attention_dense_bf16(li_backend *be, uint16_t *out, const float *q, int T, int H,
                                    const uint16_t *k, const uint16_t *v, int nk, int Hkv, int Dh,
                                    float scale) {
    li_cuda_impl *im = be->impl;
    if (dense_cudnn(be, NULL, out, q, T, H, k, v, nk, Hkv, Dh, scale)) return;
    cu_fail(im, "attention_dense_bf16",
            li_cuda_attention_dense_out(im->stream, NULL, out, q, T, H, k, v, 1, nk, Hkv, Dh,
                                        scale));
}

void li_cu_attention_dense_dt(li_backend *be, void *out, li_dtype dt, const float *q, int T,
                                  int H, const void *k, const void *v, int nk, int Hkv, int Dh,
                                  float scale) {
    if (dt == LI_DTYPE_BF16)
        cu_attention_dense_bf16(be, out, q, T, H, k, v, nk, Hkv, Dh, scale);
    else
        cu_attention_dense(be, out, q, T, H, k, v, nk, Hkv, Dh, scale);
}

void li_cu_attention_free(li_cuda_impl *im) {
    for (int i = 0; i <= LI_LIB_PLANS; i++) {
        lib_plan *p = &im->lib[i];
        li_free(p->key);
        li_free(p->covered);
        cudaFree(p->dev);
    }
    for (int i = 0; i < im->lib_cap_blocks; i++) li_attn_blocks_free(&im->lib_blocks[i]);
    li_free(im->lib_blocks);
    cudaFree(im->lib_q.p);
    cudaFree(im->lib_o.p);
    cudaFree(im->lib_lse.p);
    cudaFree(im->lib_f32.p);
    cudaFree(im->lib_kv.p);
    cudaFree(im->lib_iota);
    if (im->cudnn && im->prof) {
        li_cudnn_stats cs;
        li_cudnn_get_stats(im->cudnn, &cs);
        fprintf(stderr, "cudnn (LI_CUDA_PROFILE): %lld plans built in %.1f ms, %lld calls, "
                "%lld shapes refused, %lld workspace allocations\n",
                (long long)cs.plans_built, cs.build_ms, (long long)cs.calls,
                (long long)cs.unsupported, (long long)cs.workspace_allocs);
    }
    li_cudnn_close(im->cudnn);
}
