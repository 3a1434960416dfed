// logits.h — what the server does to a sequence's logits before the engine samples its next
// token (li_generate_params.on_logits), and the log-probabilities it reports:
//   repetition_penalty  logits of tokens in the prompt or generated: / p when > 0, * p when < 0
//                       (HF / vLLM)
//   frequency_penalty, presence_penalty   logit -= count * frequency + (count > 0) * presence,
//                       over the generated tokens (OpenAI)
//   logit_bias          logit += bias
//   response_format     every token whose text would leave the JSON grammar: -inf
//                       (json-grammar.h; special tokens and tokens without text too)
// then, when logprobs are asked, the log-softmax of the result: the distribution the token is
// drawn from before temperature, top-k and top-p.
// The vocabulary's texts (li_vocab) are made once per server. Not here: the sampling itself
// (the engine's sampler). Tested by tests/test_server_api.py.
#ifndef LI_SERVER_LOGITS_H
#define LI_SERVER_LOGITS_H

#include "../core/core.h"
#include "api.h"
#include "json-grammar.h"
#include "lazyinfer.h"

typedef struct {
    int V;
    char *bytes;     // every token's text, concatenated
    size_t *off;     // (V + 1) token id's text is bytes[off[id], off[id + 1])
    uint8_t *special;  // (V) special (control) tokens
} li_vocab;

li_status li_vocab_init(li_vocab *v, const li_model *m);
void li_vocab_free(li_vocab *v);
// Appends the text of token id to b (li_token_to_piece into a growable buffer): an id outside
// the tokenizer is LI_ERR_INVALID_ARG with the tokenizer's message.
li_status li_piece_append(const li_model *m, int32_t id, li_buf *b);

typedef struct {
    const li_api_request *a;
    const li_vocab *vocab;
    int32_t *count;       // (V) times each token was generated (penalties), NULL: none asked
    uint8_t *seen;        // (V) in the prompt or generated (repetition_penalty), NULL: none
    li_json_state *json;  // the grammar's state (response_format), NULL: none
    float *logp;          // (V) log-softmax of the last processed logits (logprobs), NULL: none
} li_logits_proc;

// Whether a request asks for any processing (then on_logits is installed).
bool li_logits_wanted(const li_api_request *a);
// prompt: the prompt's token ids in parts (repetition_penalty); g: the grammar or NULL.
li_status li_logits_proc_init(li_logits_proc *p, const li_api_request *a, const li_vocab *vocab,
                              const li_json_grammar *g);
void li_logits_proc_seen(li_logits_proc *p, const int32_t *ids, int n);  // prompt tokens
void li_logits_proc_free(li_logits_proc *p);
// Processes logits (V) in place; false when no token is left (the grammar found none).
bool li_logits_apply(li_logits_proc *p, float *logits);
// Records the token drawn: counts, the grammar (true when the JSON document is complete).
bool li_logits_take(li_logits_proc *p, int32_t tok);
// Fills l with the token's log-probability and the k most likely tokens (p->logp).
void li_logits_report(const li_logits_proc *p, int32_t tok, int k, li_api_logprob *l);

#endif
