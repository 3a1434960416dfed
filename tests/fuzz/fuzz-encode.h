// fuzz-encode.h — the check both tokenizer fuzzers run on every input (fuzz-gguf-tokenizer.c,
// fuzz-tokenizer-config.c): encode, every id inside the vocabulary, BOS first when the tokenizer
// adds one, decode. Errors on bad UTF-8 or unknown characters are allowed; crashes, ids out of
// range and a missing BOS abort.
#ifndef LI_FUZZ_ENCODE_H
#define LI_FUZZ_ENCODE_H

#include <stdio.h>
#include <stdlib.h>

#include "tokenizer/tokenizer.h"

static inline void encode_decode(const li_tokenizer *t, const char *s, size_t n, bool bos, bool sp) {
    int32_t *ids = NULL;
    int k = 0;
    if (li_tokenizer_encode(t, s, n, bos, sp, &ids, &k) != LI_OK) return;
    int nv = li_tokenizer_n_vocab(t);
    for (int i = 0; i < k; i++)
        if (ids[i] < 0 || ids[i] >= nv) {
            fprintf(stderr, "encode produced id %d outside 0..%d\n", ids[i], nv - 1);
            abort();
        }
    if (bos && li_tokenizer_add_bos(t) && li_tokenizer_bos(t) >= 0 &&
        (k == 0 || ids[0] != li_tokenizer_bos(t))) {
        fprintf(stderr, "add_bos set but the first id is not BOS\n");
        abort();
    }
    li_buf b = {0};
    li_tokenizer_decode(t, ids, k, &b);
    li_buf_free(&b);
    free(ids);
}

#endif
