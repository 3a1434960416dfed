// tokenizer.h — byte-level BPE (GPT-2 / Llama-3 style), special tokens, decode, chat formats.
//
// Pre-tokenization uses PCRE2 (UTF + Unicode properties) with the Llama-3 or GPT-2 regex (and the
// variants HF tokenizer.json files and GGUF `tokenizer.ggml.pre` name, e.g. SmolLM's individual
// digits); pieces are mapped to byte-level unicode and merged by rank. Added/special tokens are
// matched in the raw text before BPE when parse_special is set. Decode handles byte-level
// vocabularies and byte-fallback (<0xNN>) tokens.
// Sources: tokenizer.json (+ tokenizer_config.json), GGUF metadata, or the built-in byte-level
// vocabulary of synthetic models. Tested against HF `tokenizers` by tests/test_tokenizer_parity.py
// and golden ids by tests/test-tokenizer.c.
#ifndef LI_TOKENIZER_H
#define LI_TOKENIZER_H

#include "../core/core.h"
#include "../format/gguf.h"

typedef struct li_tokenizer li_tokenizer;

typedef enum {
    LI_CHAT_UNKNOWN = 0,
    LI_CHAT_LLAMA3,  // <|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n…<|eot_id|>
    LI_CHAT_CHATML,  // <|im_start|>user\n…<|im_end|>\n   (SmolLM2, Qwen)
    LI_CHAT_LLADA,   // <|startoftext|><|start_header_id|>user<|end_header_id|>\n\n…<|eot_id|>
} li_chat_format;

// tokenizer.json; config_path (tokenizer_config.json) may be NULL. Both are parsed with jansson.
li_status li_tokenizer_load_json(li_tokenizer **out, const char *tokenizer_json_path,
                                 const char *tokenizer_config_path);
// From GGUF metadata (tokenizer.ggml.*; model "gpt2" = byte-level BPE).
li_status li_tokenizer_load_gguf(li_tokenizer **out, const li_gguf *g);
// Built-in tokenizer of synthetic models: ids 0..255 are the bytes, then the family's special
// tokens (chat format `fmt`) from id 256 upward unless the family fixes their ids; n_vocab is the
// real vocabulary size (ids never produced are decoded as "").
li_status li_tokenizer_init_bytes(li_tokenizer **out, int n_vocab, li_chat_format fmt);
void li_tokenizer_free(li_tokenizer *t);  // NULL is a no-op

int li_tokenizer_n_vocab(const li_tokenizer *t);
int32_t li_tokenizer_bos(const li_tokenizer *t);   // -1 if none
int32_t li_tokenizer_eos(const li_tokenizer *t);   // -1 if none
bool li_tokenizer_add_bos(const li_tokenizer *t);  // whether encode(add_bos=true) prepends BOS
// True for ids that end a generation (eos and end-of-turn tokens such as <|eot_id|>, <|im_end|>).
bool li_tokenizer_is_eog(const li_tokenizer *t, int32_t id);
int32_t li_tokenizer_find(const li_tokenizer *t, const char *token_text);  // -1 if absent

// text → ids. *ids is malloc'ed (free()).
li_status li_tokenizer_encode(const li_tokenizer *t, const char *text, size_t len, bool add_bos,
                              bool parse_special, int32_t **ids, int *n);
// As li_tokenizer_encode with parse_special, except inside the n_plain byte ranges
// [plain[2i], plain[2i + 1]) (text a user wrote), where special tokens are never matched: a
// special token's text there is plain text, and a match that overlaps one is not made either.
li_status li_tokenizer_encode_spans(const li_tokenizer *t, const char *text, size_t len,
                                    bool add_bos, const size_t *plain, int n_plain, int32_t **ids,
                                    int *n);
// True for special (control) tokens: eos, end of turn, chat markers (their text is not content).
bool li_tokenizer_is_special(const li_tokenizer *t, int32_t id);
// Bytes of one token appended to b (special tokens as their text).
li_status li_tokenizer_decode_token(const li_tokenizer *t, int32_t id, li_buf *b);
li_status li_tokenizer_decode(const li_tokenizer *t, const int32_t *ids, int n, li_buf *b);

// Chat. The format is detected from the model's template text (tokenizer_config.json
// chat_template or GGUF tokenizer.chat_template) or set by name ("llama3", "chatml", "llada").
// An unrecognised template is LI_ERR_UNSUPPORTED telling the user about --chat-template.
li_chat_format li_tokenizer_chat_format(const li_tokenizer *t);  // LI_CHAT_UNKNOWN if none
li_status li_chat_format_detect(const char *template_text, li_chat_format *out);
li_status li_chat_format_parse(const char *name, li_chat_format *out);
const char *li_chat_format_name(li_chat_format f);
li_status li_tokenizer_set_chat_format(li_tokenizer *t, li_chat_format f);

// li_chat_message: include/lazyinfer.h.
// Renders messages with the tokenizer's chat format (including the model's default system
// message where its template adds one) and, if add_generation_prompt, opens the assistant turn.
li_status li_chat_render_messages(const li_tokenizer *t, const li_chat_message *msgs, int n,
                                  bool add_generation_prompt, li_buf *out);
// The same, recording where each message's content lands in out: spans (2n) [begin, end) byte
// offsets (after the format's trimming); NULL: not recorded.
li_status li_chat_render_spans(const li_tokenizer *t, const li_chat_message *msgs, int n,
                               bool add_generation_prompt, li_buf *out, size_t *spans);
// Renders and tokenises a chat: the template's special tokens are matched, the messages' contents
// are never parsed for special tokens (a user who writes "<|im_end|>" gets its text, not the
// control token). *ids: free().
li_status li_chat_tokenize(const li_tokenizer *t, const li_chat_message *msgs, int n,
                           bool add_generation_prompt, int32_t **ids, int *n_ids);

#endif
