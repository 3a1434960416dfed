// sampler.c — turns logits into a token: the backend's sample op with one uniform draw per token
// from the request's seeded PRNG, so that the same seed gives byte-identical output.
#include "engine.h"

li_sampling_params li_sampling_default_params(void) {
    li_sampling_params p = {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
                            .seed = 0};
    return p;
}

void li_sampler_init(li_sampler *s, const li_sampling_params *p) {
    s->cfg.temperature = p->temperature;
    s->cfg.top_k = p->top_k;
    s->cfg.top_p = p->top_p;
    s->cfg.min_p = p->min_p;
    li_rng_seed(&s->rng, p->seed);
}

int32_t li_sampler_sample(li_sampler *s, li_backend *be, const float *logits, int V) {
    // Draw even for greedy so the stream of draws does not depend on the temperature.
    double u = li_rng_uniform(&s->rng);
    return be->ops->sample(be, logits, V, &s->cfg, u);
}
