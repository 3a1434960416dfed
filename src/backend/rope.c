// rope.c — the RoPE table (per-pair inverse frequency w_i and the magnitude m) built exactly as HF
// transformers' rope init functions build it (modeling_rope_utils.py of transformers 5.24:
// default, linear, llama3, yarn). Every step is done in fp32 in the order torch does it, so the
// table matches HF to the last bit or within 1 ulp (torch's float pow differs from the correctly
// rounded one by <= 1 ulp for some bases). torch details mirrored here: `scalar / tensor` is
// `tensor.reciprocal() * scalar`, `tensor / scalar` is a true fp32 division, Python scalars
// take part as fp32.
//
// Not here: applying the rotation (the backends' rope op, attention's Δ rotation), dynamic NTK and
// longrope (they depend on the sequence length; not supported by the engine).
// Tested by tests/test-ops.c against numbers printed by transformers itself.
#include <math.h>
#include <string.h>

#include "backend.h"

// HF: base ** (torch.arange(0, dim, 2).float() / dim), in fp32
static float pos_freq(float base, int i, int dim) {
    float e = (float)(2 * i) / (float)dim;
    return (float)pow((double)base, (double)e);
}

// YaRN helpers, in Python double like HF.
static double yarn_get_mscale(double scale, double mscale) {
    if (scale <= 1) return 1.0;
    return 0.1 * mscale * log(scale) + 1.0;
}
static double yarn_correction_dim(double n_rot, int dim, double base, double max_pos) {
    return (dim * log(max_pos / (n_rot * 2 * M_PI))) / (2 * log(base));
}

static li_status scaled_table(li_rope_table *t, const li_rope_config *cfg) {
    int dim = cfg->n_dims;
    if (dim <= 0 || dim % 2 != 0 || dim > 2 * LI_ROPE_MAX_PAIRS)
        return li_error_set(LI_ERR_INVALID_ARG,
                            "rope: rotated dims must be even and in 2..%d, got %d",
                            2 * LI_ROPE_MAX_PAIRS, dim);
    if (!(cfg->theta > 0) || !isfinite(cfg->theta))
        return li_error_set(LI_ERR_INVALID_ARG, "rope: rope_theta must be > 0, got %g",
                            (double)cfg->theta);
    if (cfg->layout != LI_ROPE_NEOX && cfg->layout != LI_ROPE_GPTJ)
        return li_error_set(LI_ERR_INVALID_ARG, "rope: unknown layout %d", (int)cfg->layout);
    t->layout = cfg->layout;
    t->n_dims = dim;
    t->mscale = 1.0f;
    int half = dim / 2;
    float base = cfg->theta;

    switch (cfg->scaling) {
    case LI_ROPE_SCALING_NONE:
        // HF: inv_freq = 1.0 / (base ** (arange(0, dim, 2) / dim))
        for (int i = 0; i < half; i++) t->inv_freq[i] = 1.0f / pos_freq(base, i, dim);
        return LI_OK;

    case LI_ROPE_SCALING_LINEAR:
        if (!(cfg->factor > 0))
            return li_error_set(LI_ERR_INVALID_ARG, "rope: linear scaling needs factor > 0, got %g",
                                (double)cfg->factor);
        // HF: inv_freq /= factor
        for (int i = 0; i < half; i++) t->inv_freq[i] = (1.0f / pos_freq(base, i, dim)) / cfg->factor;
        return LI_OK;

    case LI_ROPE_SCALING_LLAMA3: {
        double factor = cfg->factor, lo = cfg->low_freq_factor, hi = cfg->high_freq_factor;
        double old = cfg->original_max_pos > 0 ? cfg->original_max_pos : cfg->max_pos;
        if (!(factor > 0) || !(lo > 0) || !(hi > lo) || !(old > 0))
            return li_error_set(LI_ERR_INVALID_ARG,
                                "rope: llama3 scaling needs factor > 0, 0 < low_freq_factor < "
                                "high_freq_factor and original_max_position_embeddings > 0 "
                                "(got %g, %g, %g, %g)", factor, lo, hi, old);
        float low_wl = (float)(old / lo), high_wl = (float)(old / hi);
        for (int i = 0; i < half; i++) {
            float inv = 1.0f / pos_freq(base, i, dim);
            float wavelen = (1.0f / inv) * (float)(2 * M_PI);  // HF: 2 * math.pi / inv_freq
            // HF: torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
            float inv_l = wavelen > low_wl ? inv / (float)factor : inv;
            // HF: (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            float smooth = ((1.0f / wavelen) * (float)old - (float)lo) / (float)(hi - lo);
            // HF: (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
            float a = ((1.0f - smooth) * inv_l) / (float)factor;
            float b = smooth * inv_l;
            float smoothed = a + b;
            bool medium = !(wavelen < high_wl) && !(wavelen > low_wl);
            t->inv_freq[i] = medium ? smoothed : inv_l;
        }
        return LI_OK;
    }

    case LI_ROPE_SCALING_YARN: {
        double omax = cfg->original_max_pos > 0 ? cfg->original_max_pos : cfg->max_pos;
        if (!(omax > 0))
            return li_error_set(LI_ERR_INVALID_ARG,
                                "rope: yarn needs original_max_position_embeddings or "
                                "max_position_embeddings");
        // HF: factor None -> max_position_embeddings / original_max_position_embeddings
        double factor = cfg->factor > 0 ? cfg->factor : (double)cfg->max_pos / omax;
        if (!(factor > 0))
            return li_error_set(LI_ERR_INVALID_ARG, "rope: yarn needs factor > 0, got %g", factor);
        double att = cfg->attention_factor;
        if (att < 0)
            return li_error_set(LI_ERR_INVALID_ARG, "rope: yarn attention_factor must be >= 0, got %g",
                                att);
        if (att == 0) {
            if (cfg->mscale != 0 && cfg->mscale_all_dim != 0)
                att = yarn_get_mscale(factor, cfg->mscale) / yarn_get_mscale(factor, cfg->mscale_all_dim);
            else
                att = yarn_get_mscale(factor, 1);
        }
        double beta_fast = cfg->beta_fast != 0 ? cfg->beta_fast : 32;  // HF: get("beta_fast") or 32
        double beta_slow = cfg->beta_slow != 0 ? cfg->beta_slow : 1;
        // HF find_correction_range: floor/ceil unless the config says truncate: false
        double low = yarn_correction_dim(beta_fast, dim, base, omax);
        double high = yarn_correction_dim(beta_slow, dim, base, omax);
        if (!cfg->yarn_no_truncate) {
            low = floor(low);
            high = ceil(high);
        }
        if (low < 0) low = 0;
        if (high > dim - 1) high = dim - 1;
        if (low == high) high += 0.001;  // HF: prevent singularity
        for (int i = 0; i < half; i++) {
            float pf = pos_freq(base, i, dim);
            float extra = 1.0f / pf;                    // HF: 1.0 / pos_freqs
            float inter = 1.0f / ((float)factor * pf);  // HF: 1.0 / (factor * pos_freqs)
            // HF: clamp((arange(dim // 2) - min) / (max - min), 0, 1)
            float ramp = ((float)i - (float)low) / (float)(high - low);
            ramp = ramp < 0 ? 0.0f : ramp > 1 ? 1.0f : ramp;
            float ef = 1.0f - ramp;  // inv_freq_extrapolation_factor
            // HF: inter * (1 - ef) + extra * ef
            float a = inter * (1.0f - ef);
            float b = extra * ef;
            t->inv_freq[i] = a + b;
        }
        t->mscale = (float)att;
        return LI_OK;
    }
    }
    return li_error_set(LI_ERR_INVALID_ARG, "rope: unknown scaling type %d", (int)cfg->scaling);
}

li_status li_rope_table_init(li_rope_table *t, const li_rope_config *cfg) {
    memset(t, 0, sizeof *t);
    LI_TRY(scaled_table(t, cfg));
    if (cfg->has_freq_factors) {
        // llama.cpp: theta = theta_base / freq_factor, for each pair
        for (int i = 0; i < t->n_dims / 2; i++) {
            if (!(cfg->freq_factors[i] > 0))
                return li_error_set(LI_ERR_INVALID_ARG, "rope: frequency factor %d is %g (must be > 0)",
                                    i, (double)cfg->freq_factors[i]);
            t->inv_freq[i] /= cfg->freq_factors[i];
        }
    }
    return LI_OK;
}
