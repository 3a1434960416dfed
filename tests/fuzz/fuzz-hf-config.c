// fuzz-hf-config.c — libFuzzer target for the config.json and generation_config.json parsers
// (src/format/hf-config.c, in-memory variants of hf-config.h): the input is the JSON text, not
// NUL-terminated. A config that parses must pass li_hparams_validate again (the parser may not
// return anything the validator refuses). Seeds in tests/fuzz/corpus/fuzz-hf-config/.
//   make fuzz      or      build/fuzz/fuzz-hf-config -runs=1000000 tests/fuzz/corpus/fuzz-hf-config
#include <stdint.h>
#include <stdlib.h>

#include "format/hf-config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    li_hparams hp;
    li_generation_config gc;
    if (li_hf_config_parse(&hp, (const char *)data, size, "fuzz-config.json") == LI_OK) {
        if (li_hparams_validate(&hp, "fuzz-config.json", false) != LI_OK) abort();
        if (hp.n_eos < 0 || hp.n_eos > LI_MAX_EOS) abort();
    }
    if (li_hf_generation_config_parse(&gc, (const char *)data, size, "fuzz-gen.json") == LI_OK) {
        if (gc.n_eos < 0 || gc.n_eos > LI_MAX_EOS) abort();
    }
    return 0;
}
