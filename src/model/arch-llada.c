// arch-llada.c — the LLaDA forward (DESIGN.md §4): being written; every function of llada.h is
// defined so the tree links. Tested by tests/test-llada.c.
#include <stdlib.h>
#include <string.h>

#include "llada.h"

li_status li_llada_load(li_llada **out, const char *path, li_backend *be, bool metadata_only) {
    (void)be;
    (void)metadata_only;
    *out = NULL;
    return li_error_set(LI_ERR_UNSUPPORTED, "%s: LLaDA loading is not implemented yet", path);
}

li_status li_llada_synth(li_llada **out, const char *name, uint64_t seed, li_backend *be,
                         bool metadata_only) {
    (void)seed;
    (void)be;
    (void)metadata_only;
    *out = NULL;
    return li_error_set(LI_ERR_UNSUPPORTED, "synthetic LLaDA '%s' is not implemented yet", name);
}

bool li_llada_synth_known(const char *name) {
    return strcmp(name, "tiny-llada") == 0 || strcmp(name, "llada-8b") == 0 ||
           strcmp(name, "llada-mid") == 0;
}

void li_llada_free(li_llada *m) { (void)m; }
const li_hparams *li_llada_hparams(const li_llada *m) { (void)m; return NULL; }
int64_t li_llada_n_params(const li_llada *m) { (void)m; return 0; }
const char *li_llada_source_dtype(const li_llada *m) { (void)m; return "?"; }

li_status li_llada_cache_init(li_llada_cache **out, const li_llada *m, int max_tokens) {
    (void)m;
    (void)max_tokens;
    *out = NULL;
    return li_error_set(LI_ERR_UNSUPPORTED, "LLaDA caches are not implemented yet");
}
void li_llada_cache_free(li_llada_cache *c) { (void)c; }

li_status li_llada_scratch_init(li_llada_scratch **out, const li_llada *m, int max_rows) {
    (void)m;
    (void)max_rows;
    *out = NULL;
    return li_error_set(LI_ERR_UNSUPPORTED, "LLaDA scratch is not implemented yet");
}
void li_llada_scratch_free(li_llada_scratch *s) { (void)s; }

li_status li_llada_forward(const li_llada *m, const li_lacache *lc, li_llada_scratch *s,
                           li_llada_cache *const *caches, const li_llada_canvas *canvases, int n,
                           float *const *logits, li_llada_step_info *info) {
    (void)m; (void)lc; (void)s; (void)caches; (void)canvases; (void)n; (void)logits; (void)info;
    return li_error_set(LI_ERR_UNSUPPORTED, "the LLaDA forward is not implemented yet");
}
