// llada-load.c — fills li_llada from an HF directory (config.json model_type "llada", safetensors
// named as in ARCHITECTURE.md §2.3) or from a named synthetic configuration of random weights, and
// builds the FP8 copies of the FFN weights (layers >= 1) on first use.
//
// Weight handling as for Llama (model-load.c, whose helpers weights-internal.h shares): f32 used in
// place in the mapping, f16 widened, bf16 matrices kept bf16 when the model is too big for f32
// (li_llama_keeps_bf16: the parameter count formula is the same), widened otherwise.
// Synthetic configurations (random weights, std 1/sqrt(in), norms ~1):
//   tiny-llada  L 3, D 64, H = Hkv 4, Dh 16, F 176, V 512 (byte tokenizer: BOS 256, EOS 257,
//               EOT 260, <|mdm_mask|> 261), theta 500000: every test runs on it.
//   llada-mid   L 8, D 1024, H = Hkv 16, Dh 64, F 3072, V 32768, f32 (176 M parameters, 0.7 GB):
//               CPU benchmarks; F = 3 D and a head of ~20 % of the parameters like LLaDA-8B.
//   llada-8b    GSAI-ML/LLaDA-8B-Instruct shapes: L 32, D 4096, H = Hkv 32, Dh 128, F 12288,
//               V 126464, theta 500000, eps 1e-5, untied; bf16 matrices.
// Not here: the forward and caches (arch-llada.c). Tested by tests/test-llada.c.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../format/hf-config.h"
#include "llada-internal.h"
#include "weights-fp8.h"
#include "weights-internal.h"

// Allocates the model, checks hp, builds the RoPE table and the layer table.
static li_status create(li_llada **out, const li_hparams *hp, li_backend *be, const char *src) {
    *out = NULL;
    LI_TRY(li_check_hparams(hp, src, "llada"));
    li_llada *m = calloc(1, sizeof *m);
    if (!m) return li_error_set(LI_ERR_OOM, "out of memory");
    m->hp = *hp;
    m->be = be;
    pthread_mutex_init(&m->fp8_lock, NULL);
    *out = m;
    li_status rc = li_rope_table_init(&m->rope, &m->hp.rope);
    if (rc != LI_OK) return li_error_wrap(rc, "%s: ", src);
    m->w.layers = calloc((size_t)hp->n_layer, sizeof *m->w.layers);
    if (!m->w.layers) return li_error_set(LI_ERR_OOM, "out of memory");
    return LI_OK;
}

void li_llada_free(li_llada *m) {
    if (!m) return;
    if (m->fp8) {
        for (int i = 0; i < 3 * m->hp.n_layer; i++)
            li_fp8_weight_free_be(m->be, &m->fp8[i]);
        free(m->fp8);
    }
    pthread_mutex_destroy(&m->fp8_lock);
    li_weight_store_free_device(&m->store);
    li_weight_store_free(&m->store);
    free(m->w.layers);
    free(m);
}

// ---- HF directory -------------------------------------------------------------------------------

// W (host memory: f32, or bf16 rounded back to bf16) times s, as a copy the store owns.
static li_status scaled_copy(li_weight_store *st, li_weight *W, float s) {
    if (!W->data) return LI_OK;  // (metadata only)
    size_t n = (size_t)(W->n_rows * W->n_cols);
    if (W->dtype == LI_DTYPE_F32) {
        float *p = li_alloc(n * sizeof *p, "scaled weight");
        if (!p) return LI_ERR_OOM;
        for (size_t i = 0; i < n; i++) p[i] = ((const float *)W->data)[i] * s;
        LI_TRY(li_store_own(st, p));
        W->data = p;
    } else {
        LI_ASSERT(W->dtype == LI_DTYPE_BF16);
        uint16_t *p = li_alloc(n * sizeof *p, "scaled weight");
        if (!p) return LI_ERR_OOM;
        for (size_t i = 0; i < n; i++)
            p[i] = li_f32_to_bf16(li_bf16_to_f32(((const uint16_t *)W->data)[i]) * s);
        LI_TRY(li_store_own(st, p));
        W->data = p;
    }
    return LI_OK;
}

// The config switches scale_logits and input_emb_norm, folded into the weights that feed them:
// HF `logits.mul_(1 / sqrt(d_model))` into ln_f's weight (the logits are linear in it; the
// product's rounding differs from the reference's by an fp32 ulp), HF `x * d_model**0.5` into the
// embedding rows (bit for bit the reference's f32 product; a bf16-kept embedding rounds it to
// bf16, as a bf16 run of the reference would). The embedding is not the head here (hf-config.c
// refuses input_emb_norm with weight_tying).
static li_status fold_switches(li_llada *m) {
    const li_hparams *hp = &m->hp;
    if (hp->scale_logits)
        LI_TRY(scaled_copy(&m->store, &m->w.out_norm, (float)(1.0 / sqrt((double)hp->n_embd))));
    if (hp->input_emb_norm) {
        LI_ASSERT(!hp->tied_embeddings);
        LI_TRY(scaled_copy(&m->store, &m->w.tok_embd, (float)sqrt((double)hp->n_embd)));
    }
    return LI_OK;
}

// A tied config (weight_tying true or absent) whose checkpoint also ships a head of its own. The
// reference's tie_weights makes ff_out the wte module itself, so loading the state dict copies
// both tensors into one parameter and the last one (ff_out's) becomes the embedding and the head
// alike; reading wte as the head here would give other logits (20.6 off on a random checkpoint).
// Equal bytes are a harmless duplicate; anything else is refused, naming the key.
static li_status check_tied_head(const li_llada *m, const char *dir) {
    const char *head_key = "model.transformer.ff_out.weight";
    const li_st_tensor *h = li_safetensors_find(m->store.st, head_key);
    if (!m->hp.tied_embeddings || !h) return LI_OK;
    const li_st_tensor *e = li_safetensors_find(m->store.st, "model.transformer.wte.weight");
    if (e && e->n_bytes == h->n_bytes && !strcmp(e->dtype_str, h->dtype_str) &&
        e->n_dims == h->n_dims && !memcmp(e->shape, h->shape, sizeof e->shape) &&
        (!e->data || !h->data || !memcmp(e->data, h->data, (size_t)e->n_bytes)))
        return LI_OK;
    return li_error_set(LI_ERR_FORMAT,
                        "%s: config.json has weight_tying true (or absent: the default) but the "
                        "checkpoint has its own head '%s', different from the embedding (the "
                        "reference would load it into the tied embedding too). Set "
                        "\"weight_tying\": false to use it as the head, or remove the tensor",
                        dir, head_key);
}

static li_status load_hf(li_llada **out, const char *dir, li_backend *be, bool metadata_only) {
    char path[4096];
    li_hparams hp;
    LI_TRY(li_path_join(path, sizeof path, dir, "config.json"));
    LI_TRY(li_hf_config_load(&hp, path));
    LI_TRY(create(out, &hp, be, path));
    li_llada *m = *out;
    LI_TRY(li_safetensors_open(&m->store.st, dir));
    const li_st_tensor *probe =
        li_safetensors_find(m->store.st, "model.transformer.blocks.0.q_proj.weight");
    snprintf(m->store.source_dtype, sizeof m->store.source_dtype, "%s",
             probe ? probe->dtype_str : "?");
    LI_TRY(check_tied_head(m, dir));
    LI_TRY(li_bind_safetensors(&m->store, &m->w, &m->hp, &li_names_hf_llada,
                               li_llama_keeps_bf16(&m->hp), metadata_only));
    return fold_switches(m);
}

li_status li_llada_load(li_llada **out, const char *path, li_backend *be, bool metadata_only) {
    *out = NULL;
    if (!li_path_is_dir(path))
        return li_error_set(LI_ERR_IO, "%s: not a directory (LLaDA loads from an HF directory)",
                            path);
    li_llada *m = NULL;
    li_status rc = load_hf(&m, path, be, metadata_only);
    if (rc != LI_OK) {
        li_llada_free(m);
        return rc;
    }
    m->has_weights = !metadata_only;
    // fused Q/K/V and gate/up (what the GPU's bf16-activation path multiplies in one GEMM each)
    if (m->has_weights &&
        ((rc = li_fuse_layer_weights(&m->store, &m->w, m->hp.n_layer)) != LI_OK ||
         (rc = li_weights_to_device(&m->store, &m->w, m->hp.n_layer, be)) != LI_OK)) {
        li_llada_free(m);
        return rc;
    }
    *out = m;
    return LI_OK;
}

// ---- synthetic configurations ---------------------------------------------------------------

typedef struct {
    const char *name;
    li_hparams hp;
} synth_config;

// What LLaDA's presets share: MHA (Hkv = H), ε = 1e-5, 4096 positions, NeoX RoPE with
// θ = 500000 over all of Dh, one EOS token.
#define LLADA(nm, L, D, F, H, Dh, V, bos, eos, dtype)                                              \
    {nm,                                                                                           \
     {.arch = "llada", .name = nm, .n_layer = L, .n_embd = D, .n_ff = F, .n_head = H,              \
      .n_head_kv = H, .head_dim = Dh, .n_vocab = V, .n_ctx_train = 4096, .rms_eps = 1e-5f,         \
      .rope = {.layout = LI_ROPE_NEOX, .theta = 500000.0f, .n_dims = Dh, .max_pos = 4096},         \
      .bos_id = bos, .eos_ids = {eos}, .n_eos = 1, .torch_dtype = dtype}}
static const synth_config synth_configs[] = {
    //    name          L   D     F      H   Dh   V       BOS     EOS     torch_dtype
    LLADA("tiny-llada", 3,  64,   176,   4,  16,  512,    256,    257,    ""),
    LLADA("llada-mid",  8,  1024, 3072,  16, 64,  32768,  256,    257,    ""),
    LLADA("llada-8b",   32, 4096, 12288, 32, 128, 126464, 126080, 126081, "bfloat16"),
};
#undef LLADA

bool li_llada_synth_known(const char *name) {
    for (size_t i = 0; i < sizeof synth_configs / sizeof synth_configs[0]; i++)
        if (strcmp(synth_configs[i].name, name) == 0) return true;
    return false;
}

li_status li_llada_synth(li_llada **out, const char *name, uint64_t seed, li_backend *be,
                         bool metadata_only) {
    *out = NULL;
    const synth_config *c = NULL;
    for (size_t i = 0; i < sizeof synth_configs / sizeof synth_configs[0]; i++)
        if (strcmp(synth_configs[i].name, name) == 0) c = &synth_configs[i];
    if (!c) return li_error_set(LI_ERR_INVALID_ARG, "unknown synthetic LLaDA model '%s'", name);
    li_llada *m = NULL;
    li_status rc = create(&m, &c->hp, be, name);
    if (rc != LI_OK) goto fail;
    snprintf(m->store.source_dtype, sizeof m->store.source_dtype, "random");

    const li_hparams *hp = &m->hp;
    bool bf16 = li_llama_keeps_bf16(hp);
    if (!metadata_only && bf16 && li_be_is_device(be) && be->ops->fill_random) {
        // too big for a host copy (llada-8b): built in device memory (other values than the CPU's)
        if ((rc = li_weights_synth_on_device(&m->store, &m->w, hp, be, seed)) != LI_OK) goto fail;
        m->has_weights = true;
        *out = m;
        return LI_OK;
    }
    li_rng rng;
    li_rng_seed(&rng, seed);
    if ((rc = li_synth_llama_weights(&m->store, &m->w, hp, &rng, bf16, metadata_only)) != LI_OK)
        goto fail;
    m->has_weights = !metadata_only;
    if (m->has_weights && ((rc = li_fuse_layer_weights(&m->store, &m->w, hp->n_layer)) != LI_OK ||
                           (rc = li_weights_to_device(&m->store, &m->w, hp->n_layer, be)) != LI_OK))
        goto fail;
    *out = m;
    return LI_OK;
fail:
    li_llada_free(m);
    return rc;
}

// ---- accessors -----------------------------------------------------------------------------

const li_hparams *li_llada_hparams(const li_llada *m) {
    return &m->hp;
}
int64_t li_llada_n_params(const li_llada *m) {
    return li_llama_n_params(&m->hp);
}
const char *li_llada_source_dtype(const li_llada *m) {
    return m->store.source_dtype;
}

// ---- FP8 weights ----------------------------------------------------------------------------

li_status li_llada_fp8_prepare(const li_llada *cm) {
    li_llada *m = (li_llada *)cm; // the FP8 copies are a cache: filled once, then read-only
    if (!m->has_weights)
        return li_error_set(LI_ERR_INVALID_ARG, "%s: loaded for metadata only", m->hp.name);
    pthread_mutex_lock(&m->fp8_lock);
    li_status rc = LI_OK;
    if (!m->fp8_ready) {
        int L = m->hp.n_layer;
        m->fp8 = calloc((size_t)3 * L, sizeof *m->fp8);
        if (!m->fp8) rc = li_error_set(LI_ERR_OOM, "out of memory");
        for (int il = 1; il < L && rc == LI_OK; il++) {
            const li_llama_layer *l = &m->w.layers[il];
            const li_weight *ws[3] = {&l->w_gate, &l->w_up, &l->w_down};
            for (int j = 0; j < 3 && rc == LI_OK; j++)
                rc = li_fp8_weight_quantize_be(m->be, &m->fp8[3 * il + j], ws[j]);
        }
        if (rc == LI_OK) {
            m->fp8_ready = true;
        } else if (m->fp8) {
            for (int i = 0; i < 3 * L; i++)
                li_fp8_weight_free_be(m->be, &m->fp8[i]);
            free(m->fp8);
            m->fp8 = NULL;
        }
    }
    pthread_mutex_unlock(&m->fp8_lock);
    return rc;
}
