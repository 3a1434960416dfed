// hf-config.h — in-memory variants of the config.json / generation_config.json parsers of
// hparams.h (for the fuzzer and for callers that already hold the text), and the shared sanity
// check of li_hparams used by both the HF and the GGUF readers. Implemented in hf-config.c.
#ifndef LI_HF_CONFIG_H
#define LI_HF_CONFIG_H

#include "hparams.h"

// `json` holds `len` bytes (need not be NUL-terminated); `name` is used in error messages.
li_status li_hf_config_parse(li_hparams *hp, const char *json, size_t len, const char *name);
li_status li_hf_generation_config_parse(li_generation_config *gc, const char *json, size_t len,
                                        const char *name);

// LI_ERR_FORMAT naming `name` and the field (as config.json or, with from_gguf, as GGUF metadata
// calls it) when a value is impossible: sizes ≤ 0 or absurd (> 2^20), H % Hkv != 0, odd or huge
// head_dim, rope dims > head_dim, eps/theta/factors not positive, token ids outside the vocab.
li_status li_hparams_validate(const li_hparams *hp, const char *name, bool from_gguf);

#endif
