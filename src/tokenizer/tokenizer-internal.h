// tokenizer-internal.h — the li_tokenizer struct and the helpers shared by the tokenizer's files
// (tokenizer.c: tables, encode, decode; vocab-json.c: tokenizer.json; vocab-gguf.c: GGUF
// metadata; vocab-bytes.c: the byte tokenizer; chat.c: chat formats). Not part of any other
// layer's API.
#ifndef LI_TOKENIZER_INTERNAL_H
#define LI_TOKENIZER_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer.h"

// Token attributes.
enum {
    TOK_ADDED = 1,    // an added token: matched in the raw text before pre-tokenization
    TOK_SPECIAL = 2,  // special (control) token: matched only when parse_special is set
    TOK_LSTRIP = 4,   // absorbs whitespace on its left when matched
    TOK_RSTRIP = 8,   // absorbs whitespace on its right
    TOK_SINGLE_WORD = 16,  // matched only when not inside a word
    TOK_MODEL = 32,   // part of the BPE model's vocabulary (looked up by BPE)
};

#define TOK_TEXT(t, id) ((t)->blob + (t)->tok_off[id])
#define TOK_HAS(t, id) ((id) >= 0 && (id) < (t)->n_vocab && (t)->tok_off[id] != UINT32_MAX)

// One step of the pre-tokenizer pipeline, applied to every piece the previous steps produced.
typedef enum { PRE_SPLIT, PRE_PREFIX_SPACE } pre_kind;
typedef enum {
    SPLIT_ISOLATED,
    SPLIT_REMOVED,
    SPLIT_MERGED_WITH_PREVIOUS,
    SPLIT_MERGED_WITH_NEXT,
    SPLIT_CONTIGUOUS,
} split_behavior;

typedef struct {
    pre_kind kind;
    pcre2_code *re;  // PRE_SPLIT: compiled with PCRE2_UTF | PCRE2_UCP, JIT-compiled when possible
    bool jit;
    split_behavior behavior;
} pre_step;

#define LI_TOK_MAX_PRE 8

// Decoder kinds: byte-level (GPT-2 byte↔unicode map) or sentencepiece-style (▁ → space,
// <0xNN> byte fallback, optional strip of one leading space).
typedef enum { DEC_BYTE_LEVEL, DEC_SENTENCEPIECE, DEC_RAW } dec_kind;

typedef struct {
    uint64_t key;  // (left id << 32) | right id; 0 marks an empty slot (id pair (0,0) stored +1)
    int32_t rank, new_id;
} merge_slot;

struct li_tokenizer {
    int n_vocab;                 // V: ids are 0..V-1; ids without a token decode as ""
    uint32_t *tok_off;           // (V) offset of the token's text in blob, UINT32_MAX if none
    uint32_t *tok_len;           // (V) bytes of the token's text (NUL-terminated in blob)
    uint8_t *tok_attr;           // (V) TOK_* flags
    char *blob;                  // storage of all token texts
    size_t blob_len, blob_cap;

    int32_t *vocab_slots;        // open-addressing hash text → id of the BPE model vocabulary
    uint32_t vocab_mask;
    merge_slot *merges;          // open-addressing hash (a, b) → (rank, merged id)
    uint32_t merge_mask;
    int n_merges;

    int32_t *added;              // ids of added tokens, sorted by first byte then longest first
    int n_added;
    int32_t added_first[257];    // added[added_first[c] .. added_first[c+1]) start with byte c
    pcre2_code *word_re;         // Unicode \w, compiled when some added token is single_word

    pre_step pre[LI_TOK_MAX_PRE];
    int n_pre;
    bool byte_level;             // BPE symbols are GPT-2 byte-level characters
    bool byte_fallback;          // unknown characters become <0xNN> tokens
    bool ignore_merges;          // a whole piece found in the vocabulary is one token (Llama-3)
    int32_t unk;                 // -1 if none
    int32_t byte_tok[256];       // byte-fallback token of each byte (<0xNN>) or -1
    int32_t bl_tok[256];         // byte-level: id of the one-character token of each byte or -1
    dec_kind dec;
    bool dec_strip_space;        // sentencepiece decoders: drop one leading space of the output
    bool sp_normalize;           // sentencepiece normalizer: prepend ▁, spaces → ▁
    bool nfc;                    // NFC normalizer (nfc.h), before pre-tokenization
    bool raw_bytes;              // built-in byte tokenizer: id = byte

    int32_t bos, eos;            // -1 if none
    bool add_bos;
    int32_t eog[8];              // end-of-generation ids (eos, <|eot_id|>, <|im_end|> …)
    int n_eog;

    li_chat_format chat;         // detected or set; LI_CHAT_UNKNOWN if none
    char *chat_template;         // the model's template text (NULL if none)
    char *default_system;        // default system message of the template (NULL if none)
    char *date_string;           // Llama-3.1 "Today Date" default (NULL: template has no date)
};

// ---- tokenizer.c: construction helpers used by the loaders ----
li_status li_tok_alloc(li_tokenizer **out, int n_vocab);
// Sets the text of token `id` (copied) and ORs attr into its flags. A second text for the same
// id replaces the first and drops TOK_MODEL (the added token wins, as in HF).
li_status li_tok_set(li_tokenizer *t, int32_t id, const char *s, size_t len, uint8_t attr);
// Builds the vocabulary hash over every id that has a text and is not an added-only token
// (model vocabulary), then the added-token index.
li_status li_tok_build_index(li_tokenizer *t, const char *what);
int32_t li_tok_lookup(const li_tokenizer *t, const char *s, size_t len);  // -1 if absent
// Adds merge `a b` (token texts); rank = order of insertion. `what` names the source.
li_status li_tok_add_merge(li_tokenizer *t, const char *a, size_t alen, const char *b,
                           size_t blen, int rank, const char *what);
li_status li_tok_reserve_merges(li_tokenizer *t, size_t n);
li_status li_tok_add_split(li_tokenizer *t, const char *pattern, size_t len, bool literal,
                           split_behavior b, const char *what);
li_status li_tok_add_prefix_space(li_tokenizer *t, const char *what);
// Pre-tokenizer regexes.
extern const char *const LI_RE_LLAMA3;
extern const char *const LI_RE_QWEN2;
extern const char *const LI_RE_GPT2;
// Finishes loading: byte-fallback table, eog list, chat format detection.
li_status li_tok_finish(li_tokenizer *t, const char *what);

// ---- vocab-json.c ----
// Parses tokenizer.json given as a buffer (fuzz target, tests; `name` for messages).
li_status li_tokenizer_load_json_buffer(li_tokenizer **out, const char *data, size_t len,
                                        const char *name);
// The same with an optional tokenizer_config.json buffer (cfg_data NULL: none), as
// li_tokenizer_load_json does with two files (fuzz target fuzz-tokenizer-config, tests).
li_status li_tokenizer_load_json_buffers(li_tokenizer **out, const char *data, size_t len,
                                         const char *name, const char *cfg_data, size_t cfg_len,
                                         const char *cfg_name);

// ---- chat.c ----
// Extracts the default system message / date from the template and detects the format
// (unknown templates leave chat = LI_CHAT_UNKNOWN; the error comes when rendering).
li_status li_tok_set_template(li_tokenizer *t, const char *text, size_t len);

#endif
