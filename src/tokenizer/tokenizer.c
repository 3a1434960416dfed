// tokenizer.c — the tokenizer's tables (token texts, vocabulary hash, merge ranks, added tokens,
// pre-tokenizer steps), encode (added tokens → pre-tokenizer → BPE), decode and the accessors.
//
// Not here: reading tokenizer.json (vocab-json.c), GGUF metadata (vocab-gguf.c), the built-in
// byte tokenizer (vocab-bytes.c), chat formats (chat.c, which calls into this file, never the
// other way). Behaviour follows HF `tokenizers` (checked by tests/test_tokenizer_parity.py on
// >2,000 strings per vocabulary; golden ids in tests/test-tokenizer.c):
//   - added tokens are matched leftmost-longest in the raw text; special ones only when
//     parse_special is set (HF's encode_special_tokens = !parse_special), non-special ones
//     always; lstrip/rstrip/single_word as HF's AddedVocabulary::find_matches;
//   - each pre-tokenizer step splits every current piece (PCRE2 with UTF + UCP, the subject is
//     the piece, as HF's find_iter on the piece); split behaviours mirror HF's fold logic;
//   - BPE merges the lowest rank first, ties to the leftmost pair (HF word.rs merge_all), with a
//     binary heap over a linked list of symbols: O(n log n) per piece, so a 1 MB run of one
//     character does not go quadratic.
// Unicode tables are PCRE2's (Debian 12's 10.42: Unicode 14). Characters assigned in Unicode 15+
// (e.g. Nag Mundari digits U+1E4F0.., CJK extension H) are not \p{L}/\p{N} here but are for HF,
// so text containing them may split differently; the parity test keeps to Unicode 14 for digits.
// Invalid UTF-8 input: HF cannot be given it (Rust strings are valid UTF-8), so encode rejects it
// with LI_ERR_INVALID_ARG naming the byte offset instead of guessing a repair. The built-in byte
// tokenizer accepts any bytes.
// Thread-safety: a loaded tokenizer is read-only; encode/decode may run on many threads at once.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nfc.h"
#include "tokenizer-internal.h"

// Qwen2's Split regex (its tokenizer.json; llama.cpp's "qwen2" pre-tokenizer): Llama-3's with
// single digits (\p{N}, not \p{N}{1,3}).
const char *const LI_RE_QWEN2 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char *const LI_RE_LLAMA3 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// HF tokenizers' ByteLevel pre-tokenizer regex (byte_level.rs), = OpenAI GPT-2's.
const char *const LI_RE_GPT2 =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

// Rust regex \w (Unicode): HF decides single_word with "\w$" / "^\w" around the match.
static const char *const WORD_RE = "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}]";

// ---- GPT-2 byte ↔ unicode map -------------------------------------------------------------
// Printable bytes 33..126, 161..172, 174..255 map to themselves; the other 68 bytes map to
// U+0100.. in byte order (OpenAI bytes_to_unicode).
static uint16_t byte_to_cp[256];
static int16_t cp_to_byte[256 + 68];

static void byte_map_build(void) {
    int n = 0;
    for (int b = 0; b < 256; b++) {
        bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        byte_to_cp[b] = keep ? (uint16_t)b : (uint16_t)(256 + n++);
    }
    for (int i = 0; i < 256 + 68; i++) cp_to_byte[i] = -1;
    for (int b = 0; b < 256; b++) cp_to_byte[byte_to_cp[b]] = (int16_t)b;
}

static void byte_map_init(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, byte_map_build);
}

// Length of the valid UTF-8 character at s (n bytes left) and its code point; 0 if invalid
// (overlong forms, surrogates and values above U+10FFFF are invalid, as for PCRE2 and Rust).
static int utf8_char(const uint8_t *s, size_t n, uint32_t *cp) {
    uint8_t c = s[0];
    if (c < 0x80) { *cp = c; return 1; }
    int len;
    uint32_t v, min;
    if ((c & 0xE0) == 0xC0) { len = 2; v = c & 0x1F; min = 0x80; }
    else if ((c & 0xF0) == 0xE0) { len = 3; v = c & 0x0F; min = 0x800; }
    else if ((c & 0xF8) == 0xF0) { len = 4; v = c & 0x07; min = 0x10000; }
    else return 0;
    if ((size_t)len > n) return 0;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

// Offset of the first invalid byte, or n when all of s is valid UTF-8.
static size_t utf8_check(const char *s, size_t n) {
    const uint8_t *u = (const uint8_t *)s;
    size_t i = 0;
    uint32_t cp;
    while (i < n) {
        if (u[i] < 0x80) { i++; continue; }
        int l = utf8_char(u + i, n - i, &cp);
        if (!l) return i;
        i += (size_t)l;
    }
    return n;
}

// ---- tables ---------------------------------------------------------------------------------

static uint32_t hash_bytes(const char *s, size_t n) {
    uint32_t h = 2166136261u;  // FNV-1a
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

static uint32_t hash_u64(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return (uint32_t)k;
}

li_status li_tok_alloc(li_tokenizer **out, int n_vocab) {
    *out = NULL;
    if (n_vocab <= 0 || n_vocab > (1 << 24))
        return li_error_set(LI_ERR_FORMAT, "tokenizer: vocabulary size %d out of range (1..%d)",
                            n_vocab, 1 << 24);
    byte_map_init();
    li_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return li_error_set(LI_ERR_OOM, "tokenizer: out of memory");
    t->n_vocab = n_vocab;
    t->tok_off = malloc((size_t)n_vocab * sizeof *t->tok_off);
    t->tok_len = calloc((size_t)n_vocab, sizeof *t->tok_len);
    t->tok_attr = calloc((size_t)n_vocab, 1);
    if (!t->tok_off || !t->tok_len || !t->tok_attr) {
        li_tokenizer_free(t);
        return li_error_set(LI_ERR_OOM, "tokenizer: out of memory for %d tokens", n_vocab);
    }
    for (int i = 0; i < n_vocab; i++) t->tok_off[i] = UINT32_MAX;
    t->bos = t->eos = t->unk = -1;
    for (int b = 0; b < 256; b++) t->byte_tok[b] = t->bl_tok[b] = -1;
    t->dec = DEC_RAW;
    *out = t;
    return LI_OK;
}

li_status li_tok_set(li_tokenizer *t, int32_t id, const char *s, size_t len, uint8_t attr) {
    LI_ASSERT(id >= 0 && id < t->n_vocab);
    if (TOK_HAS(t, id)) {
        if (t->tok_len[id] == len && memcmp(TOK_TEXT(t, id), s, len) == 0) {
            t->tok_attr[id] |= attr;
            return LI_OK;
        }
        t->tok_attr[id] &= (uint8_t)~TOK_MODEL;
    }
    if (len >= UINT32_MAX / 2 || t->blob_len + len + 1 >= UINT32_MAX)
        return li_error_set(LI_ERR_FORMAT, "tokenizer: token texts exceed 4 GB");
    if (t->blob_len + len + 1 > t->blob_cap) {
        size_t cap = t->blob_cap ? t->blob_cap : 1 << 16;
        while (cap < t->blob_len + len + 1) cap *= 2;
        char *nb = realloc(t->blob, cap);
        if (!nb) return li_error_set(LI_ERR_OOM, "tokenizer: out of memory for token texts");
        t->blob = nb;
        t->blob_cap = cap;
    }
    memcpy(t->blob + t->blob_len, s, len);
    t->blob[t->blob_len + len] = 0;
    t->tok_off[id] = (uint32_t)t->blob_len;
    t->tok_len[id] = (uint32_t)len;
    t->tok_attr[id] = (uint8_t)((t->tok_attr[id] & ~TOK_MODEL) | attr);
    t->blob_len += len + 1;
    return LI_OK;
}

int32_t li_tok_lookup(const li_tokenizer *t, const char *s, size_t len) {
    if (!t->vocab_slots) return -1;
    for (uint32_t h = hash_bytes(s, len) & t->vocab_mask;; h = (h + 1) & t->vocab_mask) {
        int32_t id = t->vocab_slots[h];
        if (id < 0) return -1;
        if (t->tok_len[id] == len && memcmp(TOK_TEXT(t, id), s, len) == 0) return id;
    }
}

// Added tokens sort by first byte, then longest first (so the first match is the longest).
typedef struct {
    uint8_t first;
    uint32_t len;
    int32_t id;
} added_key;

static int cmp_added(const void *pa, const void *pb) {
    const added_key *a = pa, *b = pb;
    if (a->first != b->first) return a->first < b->first ? -1 : 1;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

// An added token the encoder looks for in the text: non-empty and valid UTF-8. The text is valid
// UTF-8, so a token that is not could only match across a character boundary, and would leave the
// pre-tokenizer regex (run without UTF checks) a split character. Such tokens still decode.
static bool matchable_added(const li_tokenizer *t, int i) {
    return TOK_HAS(t, i) && (t->tok_attr[i] & TOK_ADDED) && t->tok_len[i] > 0 &&
           utf8_check(TOK_TEXT(t, i), t->tok_len[i]) == t->tok_len[i];
}

li_status li_tok_build_index(li_tokenizer *t, const char *what) {
    int n_model = 0, n_added = 0;
    for (int i = 0; i < t->n_vocab; i++) {
        if (!TOK_HAS(t, i)) continue;
        if (t->tok_attr[i] & TOK_MODEL) n_model++;
        if (matchable_added(t, i)) n_added++;
    }
    uint32_t cap = 16;
    while (cap < (uint32_t)n_model * 2) cap *= 2;
    free(t->vocab_slots);
    t->vocab_slots = malloc(cap * sizeof *t->vocab_slots);
    free(t->added);
    t->added = malloc(((size_t)n_added + 1) * sizeof *t->added);
    if (!t->vocab_slots || !t->added)
        return li_error_set(LI_ERR_OOM, "%s: out of memory for the vocabulary index", what);
    memset(t->vocab_slots, 0xFF, cap * sizeof *t->vocab_slots);
    t->vocab_mask = cap - 1;
    for (int i = 0; i < t->n_vocab; i++) {
        if (!TOK_HAS(t, i) || !(t->tok_attr[i] & TOK_MODEL)) continue;
        const char *s = TOK_TEXT(t, i);
        uint32_t h = hash_bytes(s, t->tok_len[i]) & t->vocab_mask;
        for (;; h = (h + 1) & t->vocab_mask) {
            int32_t o = t->vocab_slots[h];
            if (o < 0) { t->vocab_slots[h] = i; break; }
            if (t->tok_len[o] == t->tok_len[i] && memcmp(TOK_TEXT(t, o), s, t->tok_len[i]) == 0)
                break;  // duplicate text: the lowest id wins lookups (later ids still decode)
        }
    }
    added_key *keys = malloc(((size_t)n_added + 1) * sizeof *keys);
    if (!keys) return li_error_set(LI_ERR_OOM, "%s: out of memory for the vocabulary index", what);
    t->n_added = 0;
    for (int i = 0; i < t->n_vocab; i++)
        if (matchable_added(t, i))
            keys[t->n_added++] = (added_key){(uint8_t)TOK_TEXT(t, i)[0], t->tok_len[i], i};
    qsort(keys, (size_t)t->n_added, sizeof *keys, cmp_added);
    for (int i = 0; i < t->n_added; i++) t->added[i] = keys[i].id;
    free(keys);
    bool single_word = false;
    for (int i = 0; i < t->n_added; i++) single_word |= (t->tok_attr[t->added[i]] & TOK_SINGLE_WORD) != 0;
    if (single_word && !t->word_re) {
        int err;
        PCRE2_SIZE eoff;
        t->word_re = pcre2_compile((PCRE2_SPTR)WORD_RE, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP, &err, &eoff, NULL);
        if (!t->word_re) return li_error_set(LI_ERR_OOM, "%s: cannot compile the word regex", what);
    }
    int j = 0;
    for (int c = 0; c <= 256; c++) {
        while (j < t->n_added && (uint8_t)TOK_TEXT(t, t->added[j])[0] < c) j++;
        t->added_first[c] = j;
    }
    return LI_OK;
}

li_status li_tok_reserve_merges(li_tokenizer *t, size_t n) {
    uint32_t cap = 16;
    while (cap < n * 2 + 16) {
        if (cap > (1u << 28)) return li_error_set(LI_ERR_FORMAT, "tokenizer: too many merges");
        cap *= 2;
    }
    free(t->merges);
    t->merges = calloc(cap, sizeof *t->merges);
    if (!t->merges) return li_error_set(LI_ERR_OOM, "tokenizer: out of memory for merges");
    t->merge_mask = cap - 1;
    t->n_merges = 0;
    return LI_OK;
}

static uint64_t pair_key(int32_t a, int32_t b) {
    return (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;  // +1: key 0 marks empty slots
}

static const merge_slot *merge_find(const li_tokenizer *t, int32_t a, int32_t b) {
    if (!t->merges) return NULL;
    uint64_t k = pair_key(a, b);
    for (uint32_t h = hash_u64(k) & t->merge_mask;; h = (h + 1) & t->merge_mask) {
        const merge_slot *m = &t->merges[h];
        if (m->key == k) return m;
        if (m->key == 0) return NULL;
    }
}

li_status li_tok_add_merge(li_tokenizer *t, const char *a, size_t alen, const char *b,
                           size_t blen, int rank, const char *what) {
    LI_ASSERT(t->merges && t->vocab_slots);
    if ((uint32_t)t->n_merges * 2 + 2 > t->merge_mask)
        return li_error_set(LI_ERR_FORMAT, "%s: more merges than announced", what);
    int32_t ia = li_tok_lookup(t, a, alen), ib = li_tok_lookup(t, b, blen);
    if (ia < 0 || ib < 0)
        return li_error_set(LI_ERR_FORMAT, "%s: merge %d names token '%.*s' that is not in the "
                            "vocabulary", what, rank, (int)(ia < 0 ? alen : blen),
                            ia < 0 ? a : b);
    char stack[256], *cat = alen + blen <= sizeof stack ? stack : malloc(alen + blen);
    if (!cat) return li_error_set(LI_ERR_OOM, "%s: out of memory", what);
    memcpy(cat, a, alen);
    memcpy(cat + alen, b, blen);
    int32_t nid = li_tok_lookup(t, cat, alen + blen);
    if (cat != stack) free(cat);
    if (nid < 0)
        return li_error_set(LI_ERR_FORMAT, "%s: merge %d ('%.*s' '%.*s') makes a token that is "
                            "not in the vocabulary", what, rank, (int)alen, a, (int)blen, b);
    uint64_t k = pair_key(ia, ib);
    for (uint32_t h = hash_u64(k) & t->merge_mask;; h = (h + 1) & t->merge_mask) {
        merge_slot *m = &t->merges[h];
        if (m->key == 0) { m->key = k; t->n_merges++; }
        if (m->key == k) {  // a repeated pair keeps its last rank, as HF's HashMap collect
            m->rank = rank;
            m->new_id = nid;
            return LI_OK;
        }
    }
}

li_status li_tok_add_split(li_tokenizer *t, const char *pattern, size_t len, bool literal,
                           split_behavior b, const char *what) {
    if (t->n_pre >= LI_TOK_MAX_PRE)
        return li_error_set(LI_ERR_UNSUPPORTED, "%s: more than %d pre-tokenizer steps", what,
                            LI_TOK_MAX_PRE);
    int err;
    PCRE2_SIZE eoff;
    // PCRE2_LITERAL admits only a few options: UCP (about \w, \d, \s) is meaningless there.
    uint32_t opt = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, len, opt, &err, &eoff, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return li_error_set(LI_ERR_FORMAT, "%s: pre-tokenizer regex does not compile at offset "
                            "%zu: %s", what, (size_t)eoff, (const char *)msg);
    }
    pre_step *s = &t->pre[t->n_pre++];
    s->kind = PRE_SPLIT;
    s->re = re;
    s->jit = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0;
    s->behavior = b;
    return LI_OK;
}

li_status li_tok_add_prefix_space(li_tokenizer *t, const char *what) {
    if (t->n_pre >= LI_TOK_MAX_PRE)
        return li_error_set(LI_ERR_UNSUPPORTED, "%s: more than %d pre-tokenizer steps", what,
                            LI_TOK_MAX_PRE);
    t->pre[t->n_pre++] = (pre_step){.kind = PRE_PREFIX_SPACE};
    return LI_OK;
}

static void eog_add(li_tokenizer *t, int32_t id) {
    if (id < 0) return;
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return;
    if (t->n_eog < (int)(sizeof t->eog / sizeof t->eog[0])) t->eog[t->n_eog++] = id;
}

li_status li_tok_finish(li_tokenizer *t, const char *what) {
    // Byte-fallback tokens <0xNN> and the byte-level one-character tokens.
    for (int b = 0; b < 256; b++) {
        char s[8];
        snprintf(s, sizeof s, "<0x%02X>", b);
        t->byte_tok[b] = li_tok_lookup(t, s, 6);
        int n = li_utf8_put(s, byte_to_cp[b]);
        t->bl_tok[b] = li_tok_lookup(t, s, (size_t)n);
    }
    if (t->bos >= t->n_vocab || t->eos >= t->n_vocab || t->unk >= t->n_vocab)
        return li_error_set(LI_ERR_FORMAT, "%s: bos/eos/unk id beyond the vocabulary (%d)", what,
                            t->n_vocab);
    // End-of-generation: eos plus the end-of-turn tokens of the families we know, if special.
    eog_add(t, t->eos);
    static const char *const eog_names[] = {"<|eot_id|>", "<|eom_id|>", "<|im_end|>",
                                            "<|end_of_text|>", "<|endoftext|>", "<end_of_turn>",
                                            "<|end|>"};
    for (size_t i = 0; i < sizeof eog_names / sizeof eog_names[0]; i++) {
        int32_t id = li_tokenizer_find(t, eog_names[i]);
        if (id >= 0 && (t->tok_attr[id] & TOK_SPECIAL)) eog_add(t, id);
    }
    return LI_OK;
}

void li_tokenizer_free(li_tokenizer *t) {
    if (!t) return;
    if (t->word_re) pcre2_code_free(t->word_re);
    for (int i = 0; i < t->n_pre; i++)
        if (t->pre[i].re) pcre2_code_free(t->pre[i].re);
    free(t->tok_off);
    free(t->tok_len);
    free(t->tok_attr);
    free(t->blob);
    free(t->vocab_slots);
    free(t->merges);
    free(t->added);
    free(t->chat_template);
    free(t->default_system);
    free(t->date_string);
    free(t);
}

// ---- accessors --------------------------------------------------------------------------------

int li_tokenizer_n_vocab(const li_tokenizer *t) { return t->n_vocab; }
int32_t li_tokenizer_bos(const li_tokenizer *t) { return t->bos; }
int32_t li_tokenizer_eos(const li_tokenizer *t) { return t->eos; }
bool li_tokenizer_add_bos(const li_tokenizer *t) { return t->add_bos && t->bos >= 0; }

bool li_tokenizer_is_eog(const li_tokenizer *t, int32_t id) {
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return true;
    return false;
}

int32_t li_tokenizer_find(const li_tokenizer *t, const char *text) {
    size_t len = strlen(text);
    for (int i = 0; i < t->n_added; i++) {
        int32_t id = t->added[i];
        if (t->tok_len[id] == len && memcmp(TOK_TEXT(t, id), text, len) == 0) return id;
    }
    if (t->raw_bytes) return len == 1 ? (uint8_t)text[0] : -1;
    return li_tok_lookup(t, text, len);
}

// ---- encode -----------------------------------------------------------------------------------

typedef struct {
    int32_t *v;
    int n, cap;
} idvec;

static li_status idvec_push(idvec *v, int32_t id) {
    if (v->n == v->cap) {
        int cap = v->cap ? v->cap * 2 : 64;
        if (cap < 0 || (size_t)cap > SIZE_MAX / sizeof *v->v)
            return li_error_set(LI_ERR_LIMIT, "tokenizer: too many tokens");
        int32_t *nv = realloc(v->v, (size_t)cap * sizeof *nv);
        if (!nv) return li_error_set(LI_ERR_OOM, "tokenizer: out of memory for token ids");
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = id;
    return LI_OK;
}

// A piece of text under pre-tokenization: bytes [off, off+len) of either the input text
// (in_scratch false) or the scratch buffer (prefix-space copies).
typedef struct {
    size_t off, len;
    bool in_scratch;
} piece;

typedef struct {
    piece *v;
    size_t n, cap;
} piecevec;

// The growth of the encoder's arrays: p (cap elements of elem bytes) doubled, from 64. NULL when
// out of memory, and then p is freed: every caller gives up on the whole encode, whose cleanup
// would otherwise free it (the caller's pointer is set to NULL).
static void *grow(void *p, size_t *cap, size_t elem) {
    size_t n = *cap ? *cap * 2 : 64;
    void *q = n <= SIZE_MAX / elem ? realloc(p, n * elem) : NULL;
    if (!q) {
        free(p);
        *cap = 0;
        return NULL;
    }
    *cap = n;
    return q;
}

static li_status piece_push(piecevec *p, size_t off, size_t len, bool in_scratch) {
    if (len == 0) return LI_OK;
    if (p->n == p->cap && !(p->v = grow(p->v, &p->cap, sizeof *p->v)))
        return li_error_set(LI_ERR_OOM, "tokenizer: out of memory for pieces");
    p->v[p->n++] = (piece){off, len, in_scratch};
    return LI_OK;
}

// BPE state for one piece: symbols in a linked list, candidate merges in a min-heap.
typedef struct {
    int32_t rank, pos, new_id;
} cand;

typedef struct {
    int32_t id, prev, next;  // next = -1 at the end; id = -1 once merged away
} sym;

// Scratch reused across the pieces of one encode call.
typedef struct {
    li_buf scratch;     // prefix-space copies of pieces
    li_buf word;        // the piece mapped to byte-level characters
    piecevec a, b;      // pieces before / after a pre-tokenizer step
    sym *syms;
    cand *heap;
    size_t cap_syms, cap_heap, n_heap;
    pcre2_match_data *md;
    pcre2_match_data *md_word;  // for single_word checks
    struct { size_t s, e; bool m; } *spl;  // one piece's split list (gaps and matches)
    size_t cap_spl;
} enc_ctx;

static bool cand_less(const cand *a, const cand *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static li_status heap_push(enc_ctx *c, cand x) {
    if (c->n_heap == c->cap_heap && !(c->heap = grow(c->heap, &c->cap_heap, sizeof *c->heap)))
        return li_error_set(LI_ERR_OOM, "tokenizer: out of memory");
    size_t i = c->n_heap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&x, &c->heap[p])) break;
        c->heap[i] = c->heap[p];
        i = p;
    }
    c->heap[i] = x;
    return LI_OK;
}

static cand heap_pop(enc_ctx *c) {
    cand top = c->heap[0], x = c->heap[--c->n_heap];
    size_t i = 0, n = c->n_heap;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const cand *best = &x;
        if (l < n && cand_less(&c->heap[l], best)) { m = l; best = &c->heap[l]; }
        if (r < n && cand_less(&c->heap[r], best)) m = r;
        if (m == i) break;
        c->heap[i] = c->heap[m];
        i = m;
    }
    if (n) c->heap[i] = x;
    return top;
}

static li_status add_cand(const li_tokenizer *t, enc_ctx *c, int32_t pos) {
    int32_t nx = c->syms[pos].next;
    if (nx < 0) return LI_OK;
    const merge_slot *m = merge_find(t, c->syms[pos].id, c->syms[nx].id);
    if (!m) return LI_OK;
    return heap_push(c, (cand){m->rank, pos, m->new_id});
}

static li_status sym_push(enc_ctx *c, size_t *n, int32_t id) {
    if (*n == c->cap_syms && !(c->syms = grow(c->syms, &c->cap_syms, sizeof *c->syms)))
        return li_error_set(LI_ERR_OOM, "tokenizer: out of memory");
    c->syms[*n] = (sym){id, (int32_t)*n - 1, (int32_t)*n + 1};
    (*n)++;
    return LI_OK;
}

// BPE of one pre-tokenized piece (raw bytes s[0..len)) appended to out.
static li_status bpe_piece(const li_tokenizer *t, enc_ctx *c, const char *s, size_t len,
                           idvec *out) {
    const char *w = s;
    size_t wlen = len;
    if (t->byte_level) {
        c->word.len = 0;
        for (size_t i = 0; i < len; i++) {
            char u[4];
            int n = li_utf8_put(u, byte_to_cp[(uint8_t)s[i]]);
            LI_TRY(li_buf_append(&c->word, u, (size_t)n));
        }
        w = c->word.data;
        wlen = c->word.len;
    }
    if (t->ignore_merges) {
        int32_t id = li_tok_lookup(t, w, wlen);
        if (id >= 0) return idvec_push(out, id);
    }
    size_t n = 0;
    if (t->byte_level) {
        for (size_t i = 0; i < len; i++) {
            int32_t id = t->bl_tok[(uint8_t)s[i]];
            if (id >= 0) LI_TRY(sym_push(c, &n, id));  // a vocabulary without it: dropped, as HF
        }
    } else {
        bool prev_unk = false;
        for (size_t i = 0; i < wlen;) {
            uint32_t cp;
            int cl = utf8_char((const uint8_t *)w + i, wlen - i, &cp);
            LI_ASSERT(cl > 0);  // pieces are valid UTF-8 (checked at the start of encode)
            int32_t id = li_tok_lookup(t, w + i, (size_t)cl);
            if (id >= 0) {
                LI_TRY(sym_push(c, &n, id));
                prev_unk = false;
            } else if (t->byte_fallback && t->byte_tok[(uint8_t)w[i]] >= 0) {
                for (int k = 0; k < cl; k++) {
                    int32_t b = t->byte_tok[(uint8_t)w[i + k]];
                    if (b >= 0) LI_TRY(sym_push(c, &n, b));
                }
                prev_unk = false;
            } else if (t->unk >= 0 && !prev_unk) {
                LI_TRY(sym_push(c, &n, t->unk));
                prev_unk = true;
            }
            i += (size_t)cl;
        }
    }
    if (n == 0) return LI_OK;
    c->syms[n - 1].next = -1;
    c->n_heap = 0;
    for (size_t i = 0; i + 1 < n; i++) LI_TRY(add_cand(t, c, (int32_t)i));
    while (c->n_heap) {
        cand top = heap_pop(c);
        sym *a = &c->syms[top.pos];
        if (a->id < 0 || a->next < 0) continue;
        sym *b = &c->syms[a->next];
        const merge_slot *m = merge_find(t, a->id, b->id);
        if (!m || m->new_id != top.new_id || m->rank != top.rank) continue;  // stale candidate
        a->id = top.new_id;
        b->id = -1;
        a->next = b->next;
        if (b->next >= 0) c->syms[b->next].prev = top.pos;
        if (a->prev >= 0) LI_TRY(add_cand(t, c, a->prev));
        LI_TRY(add_cand(t, c, top.pos));
    }
    for (int32_t i = 0; i >= 0; i = c->syms[i].next) LI_TRY(idvec_push(out, c->syms[i].id));
    return LI_OK;
}

static const char *piece_ptr(const char *text, const enc_ctx *c, const piece *p) {
    return (p->in_scratch ? c->scratch.data : text) + p->off;
}

static li_status spl_push(enc_ctx *c, size_t *n, size_t s, size_t e, bool m) {
    if (*n == c->cap_spl && !(c->spl = grow(c->spl, &c->cap_spl, sizeof *c->spl)))
        return li_error_set(LI_ERR_OOM, "tokenizer: out of memory");
    c->spl[*n].s = s;
    c->spl[*n].e = e;
    c->spl[*n].m = m;
    (*n)++;
    return LI_OK;
}

// Splits piece p by the step's regex into c->b, following HF's SplitDelimiterBehavior.
static li_status split_piece(const pre_step *st, enc_ctx *c, const char *text, const piece *p) {
    const char *subj = piece_ptr(text, c, p);
    size_t n = 0, prev = 0, off = 0;
    while (off < p->len) {
        int rc = PCRE2_ERROR_JIT_STACKLIMIT;
        if (st->jit)
            rc = pcre2_jit_match(st->re, (PCRE2_SPTR)subj, p->len, off, PCRE2_NO_UTF_CHECK, c->md,
                                 NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)  // no JIT, or its 32 KB stack ran out: interpreter
            rc = pcre2_match(st->re, (PCRE2_SPTR)subj, p->len, off, PCRE2_NO_UTF_CHECK, c->md,
                             NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return li_error_set(LI_ERR_INVALID_ARG, "tokenizer: pre-tokenizer regex failed: %s",
                                (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
        size_t ms = ov[0], me = ov[1];
        if (me <= ms) {  // empty match: step over one character
            off = ms + 1;
            while (off < p->len && ((uint8_t)subj[off] & 0xC0) == 0x80) off++;
            continue;
        }
        if (prev != ms) LI_TRY(spl_push(c, &n, prev, ms, false));
        LI_TRY(spl_push(c, &n, ms, me, true));
        prev = off = me;
    }
    if (prev != p->len) LI_TRY(spl_push(c, &n, prev, p->len, false));

    // Fold as HF's split() does; work on (s, e) pairs in place, then emit.
    size_t k = 0;  // entries kept
    bool prev_m = false;
    switch (st->behavior) {
    case SPLIT_ISOLATED: k = n; break;
    case SPLIT_REMOVED:
        for (size_t i = 0; i < n; i++)
            if (!c->spl[i].m) c->spl[k++] = c->spl[i];
        break;
    case SPLIT_MERGED_WITH_PREVIOUS:
        for (size_t i = 0; i < n; i++) {
            if (c->spl[i].m && !prev_m && k > 0) c->spl[k - 1].e = c->spl[i].e;
            else c->spl[k++] = c->spl[i];
            prev_m = c->spl[i].m;
        }
        break;
    case SPLIT_MERGED_WITH_NEXT:
        // Right to left: a match prepends itself to the following piece.
        for (size_t i = n; i-- > 0;) {
            size_t j = n - 1 - k;  // write position from the right end
            if (c->spl[i].m && !prev_m && k > 0) c->spl[j + 1].s = c->spl[i].s;
            else { c->spl[j] = c->spl[i]; k++; }
            prev_m = c->spl[i].m;
        }
        memmove(c->spl, c->spl + (n - k), k * sizeof *c->spl);
        break;
    case SPLIT_CONTIGUOUS:
        for (size_t i = 0; i < n; i++) {
            if (c->spl[i].m == prev_m && k > 0) c->spl[k - 1].e = c->spl[i].e;
            else c->spl[k++] = c->spl[i];
            prev_m = c->spl[i].m;
        }
        break;
    }
    for (size_t i = 0; i < k; i++)
        LI_TRY(piece_push(&c->b, p->off + c->spl[i].s, c->spl[i].e - c->spl[i].s,
                          p->in_scratch));
    return LI_OK;
}

// Pre-tokenizes and BPE-encodes one segment of text (no added tokens inside).
static li_status encode_segment(const li_tokenizer *t, enc_ctx *c, const char *text, size_t off,
                                size_t len, idvec *out) {
    if (len == 0) return LI_OK;
    if (t->raw_bytes) {
        for (size_t i = 0; i < len; i++) LI_TRY(idvec_push(out, (uint8_t)text[off + i]));
        return LI_OK;
    }
    c->a.n = 0;
    if (t->nfc && li_nfc_needed(text + off, len)) {
        // HF normalises each stretch between added tokens (AddedVocabulary::
        // extract_and_normalize), then pre-tokenizes the normalised text.
        size_t base = c->scratch.len;
        LI_TRY(li_nfc_append(&c->scratch, text + off, len));
        LI_TRY(piece_push(&c->a, base, c->scratch.len - base, true));
    } else if (t->sp_normalize) {
        // Sentencepiece normalizer: prepend ▁ and replace every space with ▁.
        size_t base = c->scratch.len;
        LI_TRY(li_buf_append(&c->scratch, "\xE2\x96\x81", 3));
        for (size_t i = 0; i < len; i++) {
            if (text[off + i] == ' ') LI_TRY(li_buf_append(&c->scratch, "\xE2\x96\x81", 3));
            else LI_TRY(li_buf_append(&c->scratch, text + off + i, 1));
        }
        LI_TRY(piece_push(&c->a, base, c->scratch.len - base, true));
    } else {
        LI_TRY(piece_push(&c->a, off, len, false));
    }
    for (int s = 0; s < t->n_pre; s++) {
        const pre_step *st = &t->pre[s];
        c->b.n = 0;
        for (size_t i = 0; i < c->a.n; i++) {
            piece p = c->a.v[i];
            if (st->kind == PRE_PREFIX_SPACE) {
                if (piece_ptr(text, c, &p)[0] == ' ') {
                    LI_TRY(piece_push(&c->b, p.off, p.len, p.in_scratch));
                    continue;
                }
                size_t base = c->scratch.len;
                LI_TRY(li_buf_append(&c->scratch, " ", 1));
                LI_TRY(li_buf_append(&c->scratch, piece_ptr(text, c, &p), p.len));
                LI_TRY(piece_push(&c->b, base, p.len + 1, true));
            } else {
                LI_TRY(split_piece(st, c, text, &p));
            }
        }
        piecevec tmp = c->a;
        c->a = c->b;
        c->b = tmp;
    }
    for (size_t i = 0; i < c->a.n; i++)
        LI_TRY(bpe_piece(t, c, piece_ptr(text, c, &c->a.v[i]), c->a.v[i].len, out));
    return LI_OK;
}

// Rust char::is_whitespace (Unicode White_Space), used by HF for lstrip/rstrip.
static bool is_white_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

// Bytes of the whitespace character starting at s[i] (0 if none).
static size_t ws_at(const char *s, size_t i, size_t n) {
    uint32_t cp;
    int l = i < n ? utf8_char((const uint8_t *)s + i, n - i, &cp) : 0;
    return l && is_white_space(cp) ? (size_t)l : 0;
}

// Bytes of the whitespace character ending just before s[i], not reaching before `from`.
static size_t ws_before(const char *s, size_t from, size_t i) {
    size_t j = i;
    while (j > from && i - j < 4) {
        j--;
        if (((uint8_t)s[j] & 0xC0) != 0x80) break;
    }
    return j < i && ws_at(s, j, i) == i - j ? i - j : 0;
}


static bool word_char_at(const li_tokenizer *t, enc_ctx *c, const char *s, size_t len, size_t i) {
    int rc = pcre2_match(t->word_re, (PCRE2_SPTR)s, len, i, PCRE2_ANCHORED | PCRE2_NO_UTF_CHECK,
                         c->md_word, NULL);
    return rc >= 0;
}

// The next added token at or after `from`, as HF's AddedVocabulary::find_matches: the
// leftmost-longest match over all added tokens; a match that may not be used here (special
// without parse_special, single_word inside a word) is skipped as a whole and the search goes on
// after it. lstrip/rstrip widen the span over Unicode whitespace, not before `from` (the end of
// the previous match). Returns the id or -1, with the span in [*ms, *me).
// Whether [a, b) overlaps one of the plain (user text) ranges.
static bool in_plain(const size_t *plain, int n_plain, size_t a, size_t b) {
    for (int i = 0; i < n_plain; i++)
        if (a < plain[2 * i + 1] && plain[2 * i] < b) return true;
    return false;
}

static int32_t find_added(const li_tokenizer *t, enc_ctx *c, const char *s, size_t from,
                          size_t len, bool parse_special, const size_t *plain, int n_plain,
                          size_t *ms, size_t *me) {
    size_t p = from;
    while (p < len) {
        int32_t id = -1;
        size_t q = p;
        for (; q < len && id < 0; q++) {
            uint8_t ch = (uint8_t)s[q];
            for (int j = t->added_first[ch]; j < t->added_first[ch + 1]; j++) {
                int32_t cand = t->added[j];
                uint32_t tl = t->tok_len[cand];
                if (tl <= len - q && memcmp(s + q, TOK_TEXT(t, cand), tl) == 0) {
                    id = cand;
                    break;
                }
            }
        }
        if (id < 0) return -1;
        size_t a = q - 1, b = a + t->tok_len[id];
        uint8_t at = t->tok_attr[id];
        bool skip = (at & TOK_SPECIAL) && (!parse_special || in_plain(plain, n_plain, a, b));
        if (!skip && (at & TOK_SINGLE_WORD)) {
            size_t j = a;
            while (j > 0 && ((uint8_t)s[--j] & 0xC0) == 0x80) {}
            skip = (a > 0 && word_char_at(t, c, s, len, j)) ||
                   (b < len && word_char_at(t, c, s, len, b));
        }
        if (skip) {
            p = b;
            continue;
        }
        size_t w;
        if (at & TOK_LSTRIP)
            while ((w = ws_before(s, from, a)) > 0) a -= w;
        if (at & TOK_RSTRIP)
            while ((w = ws_at(s, b, len)) > 0) b += w;
        *ms = a;
        *me = b;
        return id;
    }
    return -1;
}

static li_status encode(const li_tokenizer *t, const char *text, size_t len, bool add_bos,
                        bool parse_special, const size_t *plain, int n_plain, int32_t **ids,
                        int *n);

li_status li_tokenizer_encode(const li_tokenizer *t, const char *text, size_t len, bool add_bos,
                              bool parse_special, int32_t **ids, int *n) {
    return encode(t, text, len, add_bos, parse_special, NULL, 0, ids, n);
}

li_status li_tokenizer_encode_spans(const li_tokenizer *t, const char *text, size_t len,
                                    bool add_bos, const size_t *plain, int n_plain, int32_t **ids,
                                    int *n) {
    return encode(t, text, len, add_bos, true, plain, n_plain, ids, n);
}

bool li_tokenizer_is_special(const li_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && (t->tok_attr[id] & TOK_SPECIAL);
}

static li_status encode(const li_tokenizer *t, const char *text, size_t len, bool add_bos,
                        bool parse_special, const size_t *plain, int n_plain, int32_t **ids,
                        int *n) {
    *ids = NULL;
    *n = 0;
    if (!text && len) return li_error_set(LI_ERR_INVALID_ARG, "tokenize: NULL text");
    if (len > (size_t)INT32_MAX / 2)
        return li_error_set(LI_ERR_LIMIT, "tokenize: text of %zu bytes is too long", len);
    if (!t->raw_bytes) {
        size_t bad = utf8_check(text, len);
        if (bad != len)
            return li_error_set(LI_ERR_INVALID_ARG, "tokenize: text is not valid UTF-8 (byte "
                                "0x%02X at offset %zu)", (uint8_t)text[bad], bad);
    }
    idvec out = {0};
    enc_ctx c = {0};
    li_status st = LI_OK;
    if (t->n_pre) {
        c.md = pcre2_match_data_create(4, NULL);
        if (!c.md) { st = li_error_set(LI_ERR_OOM, "tokenize: out of memory"); goto done; }
    }
    if (t->word_re) {
        c.md_word = pcre2_match_data_create(1, NULL);
        if (!c.md_word) { st = li_error_set(LI_ERR_OOM, "tokenize: out of memory"); goto done; }
    }
    if (add_bos && li_tokenizer_add_bos(t) && (st = idvec_push(&out, t->bos)) != LI_OK) goto done;
    size_t pos = 0;
    while (pos <= len) {
        size_t ms = len, me = len;
        int32_t id = t->n_added ? find_added(t, &c, text, pos, len, parse_special, plain, n_plain,
                                             &ms, &me) : -1;
        if ((st = encode_segment(t, &c, text, pos, ms - pos, &out)) != LI_OK) goto done;
        if (id < 0) break;
        if ((st = idvec_push(&out, id)) != LI_OK) goto done;
        pos = me;
    }
    *ids = out.v;
    *n = out.n;
    out.v = NULL;
done:
    free(out.v);
    li_buf_free(&c.scratch);
    li_buf_free(&c.word);
    free(c.a.v);
    free(c.b.v);
    free(c.syms);
    free(c.heap);
    free(c.spl);
    if (c.md) pcre2_match_data_free(c.md);
    if (c.md_word) pcre2_match_data_free(c.md_word);
    return st;
}

// ---- decode -----------------------------------------------------------------------------------

li_status li_tokenizer_decode_token(const li_tokenizer *t, int32_t id, li_buf *b) {
    if (id < 0 || id >= t->n_vocab)
        return li_error_set(LI_ERR_INVALID_ARG, "detokenize: token id %d outside the vocabulary "
                            "(0..%d)", id, t->n_vocab - 1);
    if (!TOK_HAS(t, id)) return LI_OK;
    const char *s = TOK_TEXT(t, id);
    size_t n = t->tok_len[id];
    if (t->raw_bytes || t->dec == DEC_RAW) return li_buf_append(b, s, n);
    if (t->dec == DEC_SENTENCEPIECE) {
        if (n == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>') {
            int hi = s[3], lo = s[4], v = 0;
            bool ok = true;
            for (int k = 0; k < 2; k++) {
                int ch = k ? lo : hi, d;
                if (ch >= '0' && ch <= '9') d = ch - '0';
                else if (ch >= 'A' && ch <= 'F') d = ch - 'A' + 10;
                else { ok = false; break; }
                v = v * 16 + d;
            }
            if (ok) {
                char byte = (char)v;
                return li_buf_append(b, &byte, 1);
            }
        }
        for (size_t i = 0; i < n;) {
            if (i + 3 <= n && memcmp(s + i, "\xE2\x96\x81", 3) == 0) {
                LI_TRY(li_buf_append(b, " ", 1));
                i += 3;
            } else {
                LI_TRY(li_buf_append(b, s + i, 1));
                i++;
            }
        }
        return LI_OK;
    }
    // Byte-level (HF decoders/byte_level.rs): map every character back to its byte when all of
    // them are in the map, else keep the token's text as it is.
    char tmp[256];
    char *o = n <= sizeof tmp ? tmp : malloc(n);
    if (!o) return li_error_set(LI_ERR_OOM, "detokenize: out of memory");
    size_t k = 0;
    bool all = true;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int cl = utf8_char((const uint8_t *)s + i, n - i, &cp);
        if (!cl || cp >= 256 + 68 || cp_to_byte[cp] < 0) { all = false; break; }
        o[k++] = (char)cp_to_byte[cp];
        i += (size_t)cl;
    }
    li_status st = all ? li_buf_append(b, o, k) : li_buf_append(b, s, n);
    if (o != tmp) free(o);
    return st;
}

li_status li_tokenizer_decode(const li_tokenizer *t, const int32_t *ids, int n, li_buf *b) {
    size_t start = b->len;
    for (int i = 0; i < n; i++) LI_TRY(li_tokenizer_decode_token(t, ids[i], b));
    if (t->dec == DEC_SENTENCEPIECE && t->dec_strip_space && b->len > start &&
        b->data[start] == ' ') {
        memmove(b->data + start, b->data + start + 1, b->len - start - 1);
        b->len--;
        b->data[b->len] = 0;
    }
    return LI_OK;
}
