// vocab-json.c — loads an HF tokenizer.json (+ optional tokenizer_config.json) with jansson.
//
// Understood: model BPE (vocab, merges as "a b" strings or [a, b] pairs, byte_fallback,
// ignore_merges, unk_token), added_tokens (special or not; lstrip/rstrip/single_word), the
// pre-tokenizers ByteLevel (add_prefix_space, use_regex), Split (Regex or String pattern, every
// behaviour, invert false), Digits and Sequence of these; the sentencepiece normalizer pair
// Prepend("▁") + Replace(" " → "▁"), NFC (nfc.h: applied to the text between added tokens, before
// pre-tokenization, as HF); decoders ByteLevel and the sentencepiece chain
// Replace/ByteFallback/Fuse/Strip; post_processor TemplateProcessing (whether BOS is added).
// tokenizer_config.json: chat_template (string or list of {name, template}), bos_token /
// eos_token (string or AddedToken object), add_bos_token.
// Not understood (clear LI_ERR_UNSUPPORTED naming the field): other models (WordPiece, Unigram),
// other normalizers/pre-tokenizers/decoders. Every type mismatch or bad id is LI_ERR_FORMAT
// naming the file and the field. Tested by tests/test-tokenizer.c (malformed files), the parity
// test, tests/fuzz/fuzz-tokenizer.c and tests/fuzz/fuzz-tokenizer-config.c (the config part).
#include <jansson.h>
#include <string.h>

#include "tokenizer-internal.h"

#define MAX_JSON_BYTES ((size_t)1 << 30)

typedef struct {
    const char *path;
    li_tokenizer *t;
} jctx;

static li_status bad(const jctx *j, const char *field, const char *problem) {
    return li_error_set(LI_ERR_FORMAT, "%s: %s %s", j->path, field, problem);
}

static bool opt_bool(json_t *o, const char *key, bool dflt) {
    json_t *v = json_object_get(o, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

static li_status parse_pre(jctx *j, json_t *p);

static li_status parse_split(jctx *j, json_t *p) {
    json_t *pat = json_object_get(p, "pattern");
    json_t *re = json_object_get(pat, "Regex"), *str = json_object_get(pat, "String");
    if (!json_is_string(re) && !json_is_string(str))
        return bad(j, "pre_tokenizer Split.pattern", "is not {\"Regex\": …} or {\"String\": …}");
    if (opt_bool(p, "invert", false))
        return li_error_set(LI_ERR_UNSUPPORTED, "%s: pre_tokenizer Split with invert=true is not "
                            "supported", j->path);
    const char *b = json_string_value(json_object_get(p, "behavior"));
    static const char *const names[] = {"Isolated", "Removed", "MergedWithPrevious",
                                        "MergedWithNext", "Contiguous"};
    int bi = -1;
    for (int i = 0; b && i < 5; i++)
        if (strcmp(b, names[i]) == 0) bi = i;
    if (bi < 0) return bad(j, "pre_tokenizer Split.behavior", "is missing or unknown");
    json_t *s = re ? re : str;
    return li_tok_add_split(j->t, json_string_value(s), json_string_length(s), !re,
                            (split_behavior)bi, j->path);
}

static li_status parse_pre(jctx *j, json_t *p) {
    if (json_is_null(p) || !p) return LI_OK;
    const char *type = json_string_value(json_object_get(p, "type"));
    if (!json_is_object(p) || !type) return bad(j, "pre_tokenizer", "has no \"type\"");
    if (strcmp(type, "Sequence") == 0) {
        json_t *arr = json_object_get(p, "pretokenizers");
        if (!json_is_array(arr)) return bad(j, "pre_tokenizer Sequence.pretokenizers", "is not an array");
        size_t i;
        json_t *e;
        json_array_foreach(arr, i, e) LI_TRY(parse_pre(j, e));
        return LI_OK;
    }
    if (strcmp(type, "Split") == 0) return parse_split(j, p);
    if (strcmp(type, "ByteLevel") == 0) {
        j->t->byte_level = true;
        if (opt_bool(p, "add_prefix_space", false)) LI_TRY(li_tok_add_prefix_space(j->t, j->path));
        if (opt_bool(p, "use_regex", true))
            LI_TRY(li_tok_add_split(j->t, LI_RE_GPT2, strlen(LI_RE_GPT2), false, SPLIT_ISOLATED,
                                    j->path));
        return LI_OK;
    }
    if (strcmp(type, "Digits") == 0) {
        // HF: individual → split(char::is_numeric, Isolated), else Contiguous; \p{N} is the
        // same set of characters (Nd, Nl, No).
        const char *re = opt_bool(p, "individual_digits", false) ? "\\p{N}" : "\\p{N}+";
        return li_tok_add_split(j->t, re, strlen(re), false, SPLIT_ISOLATED, j->path);
    }
    return li_error_set(LI_ERR_UNSUPPORTED, "%s: pre_tokenizer type '%s' is not supported "
                        "(ByteLevel, Split, Digits, Sequence are)", j->path, type);
}

static bool str_is(json_t *v, const char *s) {
    return json_is_string(v) && strcmp(json_string_value(v), s) == 0;
}

static li_status parse_normalizer(jctx *j, json_t *n) {
    if (!n || json_is_null(n)) return LI_OK;
    const char *type = json_string_value(json_object_get(n, "type"));
    if (type && strcmp(type, "NFC") == 0) {  // Qwen2's
        j->t->nfc = true;
        return LI_OK;
    }
    if (type && strcmp(type, "Sequence") == 0) {
        json_t *arr = json_object_get(n, "normalizers");
        bool prepend = false, replace = false, other = !json_is_array(arr);
        size_t i;
        json_t *e;
        json_array_foreach(arr, i, e) {
            const char *ty = json_string_value(json_object_get(e, "type"));
            if (ty && strcmp(ty, "Prepend") == 0 && str_is(json_object_get(e, "prepend"), "\xE2\x96\x81"))
                prepend = true;
            else if (ty && strcmp(ty, "Replace") == 0 &&
                     str_is(json_object_get(json_object_get(e, "pattern"), "String"), " ") &&
                     str_is(json_object_get(e, "content"), "\xE2\x96\x81"))
                replace = true;
            else
                other = true;
        }
        if (prepend && replace && !other) {
            j->t->sp_normalize = true;
            return LI_OK;
        }
    }
    return li_error_set(LI_ERR_UNSUPPORTED, "%s: normalizer '%s' is not supported (only none, NFC, or "
                        "sentencepiece's Prepend(\"▁\") + Replace(\" \", \"▁\"))", j->path,
                        type ? type : "?");
}

static li_status parse_decoder(jctx *j, json_t *d) {
    li_tokenizer *t = j->t;
    if (!d || json_is_null(d)) {
        t->dec = t->byte_level ? DEC_BYTE_LEVEL : DEC_RAW;
        return LI_OK;
    }
    const char *type = json_string_value(json_object_get(d, "type"));
    if (!type) return bad(j, "decoder", "has no \"type\"");
    if (strcmp(type, "ByteLevel") == 0) {
        t->dec = DEC_BYTE_LEVEL;
        return LI_OK;
    }
    json_t *arr = strcmp(type, "Sequence") == 0 ? json_object_get(d, "decoders") : NULL;
    if (json_is_array(arr)) {
        size_t i;
        json_t *e;
        t->dec = DEC_SENTENCEPIECE;
        json_array_foreach(arr, i, e) {
            const char *ty = json_string_value(json_object_get(e, "type"));
            if (ty && strcmp(ty, "ByteLevel") == 0 && json_array_size(arr) == 1) {
                t->dec = DEC_BYTE_LEVEL;
            } else if (ty && strcmp(ty, "Strip") == 0) {
                json_t *start = json_object_get(e, "start");
                t->dec_strip_space = json_is_integer(start) && json_integer_value(start) >= 1;
            } else if (!ty || (strcmp(ty, "Replace") != 0 && strcmp(ty, "ByteFallback") != 0 &&
                               strcmp(ty, "Fuse") != 0)) {
                return li_error_set(LI_ERR_UNSUPPORTED, "%s: decoder '%s' is not supported",
                                    j->path, ty ? ty : "?");
            }
        }
        return LI_OK;
    }
    return li_error_set(LI_ERR_UNSUPPORTED, "%s: decoder '%s' is not supported (ByteLevel or a "
                        "sentencepiece Sequence are)", j->path, type);
}

// TemplateProcessing.single starting with a SpecialToken means "prepend BOS".
static void parse_post(jctx *j, json_t *p, const char **bos_text) {
    if (!json_is_object(p)) return;
    const char *type = json_string_value(json_object_get(p, "type"));
    if (!type) return;
    if (strcmp(type, "Sequence") == 0) {
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(p, "processors"), i, e) parse_post(j, e, bos_text);
    } else if (strcmp(type, "TemplateProcessing") == 0) {
        json_t *first = json_array_get(json_object_get(p, "single"), 0);
        json_t *sp = json_object_get(json_object_get(first, "SpecialToken"), "id");
        if (json_is_string(sp)) *bos_text = json_string_value(sp);
    }
}

// bos_token / eos_token of tokenizer_config.json: a string or an AddedToken {"content": …}.
static const char *token_field(json_t *cfg, const char *key) {
    json_t *v = json_object_get(cfg, key);
    if (json_is_object(v)) v = json_object_get(v, "content");
    return json_string_value(v);
}

static li_status load_json(jctx *j, json_t *root, json_t *cfg) {
    if (!json_is_object(root)) return bad(j, "top level", "is not a JSON object");
    json_t *model = json_object_get(root, "model");
    if (!json_is_object(model)) return bad(j, "\"model\"", "is missing or not an object");
    json_t *type = json_object_get(model, "type");
    if (type && !str_is(type, "BPE"))
        return li_error_set(LI_ERR_UNSUPPORTED, "%s: model type '%s' is not supported (BPE is)",
                            j->path, json_is_string(type) ? json_string_value(type) : "?");
    json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
    if (!json_is_object(vocab)) return bad(j, "model.vocab", "is missing or not an object");
    if (merges && !json_is_array(merges)) return bad(j, "model.merges", "is not an array");
    json_t *csp = json_object_get(model, "continuing_subword_prefix");
    json_t *ews = json_object_get(model, "end_of_word_suffix");
    if ((csp && !json_is_null(csp)) || (ews && !json_is_null(ews)))
        return li_error_set(LI_ERR_UNSUPPORTED, "%s: BPE continuing_subword_prefix / "
                            "end_of_word_suffix are not supported", j->path);
    json_t *added = json_object_get(root, "added_tokens");
    if (added && !json_is_null(added) && !json_is_array(added))
        return bad(j, "added_tokens", "is not an array");

    // Vocabulary size: the largest id of the model vocabulary and the added tokens, plus one.
    json_int_t max_id = -1;
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= (1 << 24))
            return li_error_set(LI_ERR_FORMAT, "%s: model.vocab['%s'] is not an id in 0..%d",
                                j->path, key, (1 << 24) - 1);
        if (json_integer_value(v) > max_id) max_id = json_integer_value(v);
    }
    size_t i;
    json_array_foreach(added, i, v) {
        json_t *id = json_object_get(v, "id"), *content = json_object_get(v, "content");
        if (!json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) >= (1 << 24) || !json_is_string(content))
            return li_error_set(LI_ERR_FORMAT, "%s: added_tokens[%zu] needs an integer \"id\" in "
                                "0..%d and a string \"content\"", j->path, i, (1 << 24) - 1);
        if (json_integer_value(id) > max_id) max_id = json_integer_value(id);
    }
    if (max_id < 0) return bad(j, "model.vocab", "is empty");
    LI_TRY(li_tok_alloc(&j->t, (int)max_id + 1));
    li_tokenizer *t = j->t;
    json_object_foreach(vocab, key, v) {
        // Keys cannot hold NUL: jansson rejects \u0000 without JSON_ALLOW_NUL.
        LI_TRY(li_tok_set(t, (int32_t)json_integer_value(v), key, strlen(key), TOK_MODEL));
    }
    json_array_foreach(added, i, v) {
        json_t *content = json_object_get(v, "content");
        uint8_t at = TOK_ADDED;
        if (opt_bool(v, "special", false)) at |= TOK_SPECIAL;
        if (opt_bool(v, "lstrip", false)) at |= TOK_LSTRIP;
        if (opt_bool(v, "rstrip", false)) at |= TOK_RSTRIP;
        if (opt_bool(v, "single_word", false)) at |= TOK_SINGLE_WORD;
        LI_TRY(li_tok_set(t, (int32_t)json_integer_value(json_object_get(v, "id")),
                          json_string_value(content), json_string_length(content), at));
    }
    LI_TRY(li_tok_build_index(t, j->path));

    size_t n_merges = json_array_size(merges);
    LI_TRY(li_tok_reserve_merges(t, n_merges));
    json_array_foreach(merges, i, v) {
        const char *a, *b;
        size_t al, bl;
        if (json_is_string(v)) {
            const char *s = json_string_value(v), *sp = strchr(s, ' ');
            size_t len = json_string_length(v);
            if (!sp || memchr(sp + 1, ' ', len - (size_t)(sp + 1 - s)))
                return li_error_set(LI_ERR_FORMAT, "%s: model.merges[%zu] '%s' is not two tokens "
                                    "separated by one space", j->path, i, s);
            a = s;
            al = (size_t)(sp - s);
            b = sp + 1;
            bl = len - al - 1;
        } else if (json_is_array(v) && json_array_size(v) == 2 &&
                   json_is_string(json_array_get(v, 0)) && json_is_string(json_array_get(v, 1))) {
            a = json_string_value(json_array_get(v, 0));
            al = json_string_length(json_array_get(v, 0));
            b = json_string_value(json_array_get(v, 1));
            bl = json_string_length(json_array_get(v, 1));
        } else {
            return li_error_set(LI_ERR_FORMAT, "%s: model.merges[%zu] is neither \"a b\" nor "
                                "[\"a\", \"b\"]", j->path, i);
        }
        LI_TRY(li_tok_add_merge(t, a, al, b, bl, (int)i, j->path));
    }
    t->byte_fallback = opt_bool(model, "byte_fallback", false);
    t->ignore_merges = opt_bool(model, "ignore_merges", false);
    json_t *unk = json_object_get(model, "unk_token");
    if (json_is_string(unk)) {
        t->unk = li_tokenizer_find(t, json_string_value(unk));
        if (t->unk < 0) return bad(j, "model.unk_token", "is not in the vocabulary");
    }

    LI_TRY(parse_normalizer(j, json_object_get(root, "normalizer")));
    LI_TRY(parse_pre(j, json_object_get(root, "pre_tokenizer")));
    LI_TRY(parse_decoder(j, json_object_get(root, "decoder")));

    const char *bos_text = NULL;
    parse_post(j, json_object_get(root, "post_processor"), &bos_text);
    t->add_bos = bos_text != NULL;
    const char *eos_text = NULL;
    if (cfg) {
        if (token_field(cfg, "bos_token")) bos_text = token_field(cfg, "bos_token");
        eos_text = token_field(cfg, "eos_token");
        json_t *ab = json_object_get(cfg, "add_bos_token");
        if (json_is_boolean(ab)) t->add_bos = json_is_true(ab);
    }
    if (bos_text) {
        t->bos = li_tokenizer_find(t, bos_text);
        if (t->bos < 0)
            return li_error_set(LI_ERR_FORMAT, "%s: BOS token '%s' is not in the vocabulary",
                                j->path, bos_text);
    }
    if (eos_text) {
        t->eos = li_tokenizer_find(t, eos_text);
        if (t->eos < 0)
            return li_error_set(LI_ERR_FORMAT, "%s: EOS token '%s' is not in the vocabulary",
                                j->path, eos_text);
    } else {
        static const char *const guesses[] = {"<|end_of_text|>", "<|endoftext|>", "</s>"};
        for (size_t k = 0; k < 3 && t->eos < 0; k++) t->eos = li_tokenizer_find(t, guesses[k]);
    }
    LI_TRY(li_tok_finish(t, j->path));

    json_t *tmpl = cfg ? json_object_get(cfg, "chat_template") : NULL;
    if (json_is_array(tmpl)) {  // [{name, template}]: the one named "default", else the first
        json_t *pick = NULL, *e;
        json_array_foreach(tmpl, i, e) {
            if (!pick || str_is(json_object_get(e, "name"), "default")) pick = e;
        }
        tmpl = json_object_get(pick, "template");
    }
    if (tmpl && !json_is_null(tmpl) && !json_is_string(tmpl))
        return li_error_set(LI_ERR_FORMAT, "%s: chat_template is not a string or a list of "
                            "{name, template}", "tokenizer_config.json");
    if (json_is_string(tmpl))
        LI_TRY(li_tok_set_template(t, json_string_value(tmpl), json_string_length(tmpl)));
    return LI_OK;
}

// flags: 0 for tokenizer.json (ids must stay integers); JSON_DECODE_INT_AS_REAL for
// tokenizer_config.json, whose model_max_length (1e30) overflows jansson's integers.
static li_status parse_file(const char *path, json_t **out, size_t flags) {
    char *buf = NULL;
    size_t len = 0;
    *out = NULL;
    LI_TRY(li_file_read_all(path, &buf, &len, MAX_JSON_BYTES));
    json_error_t err;
    json_t *root = json_loadb(buf, len, flags, &err);
    li_free(buf);
    if (!root)
        return li_error_set(LI_ERR_FORMAT, "%s: invalid JSON at line %d column %d: %s", path,
                            err.line, err.column, err.text);
    *out = root;
    return LI_OK;
}

li_status li_tokenizer_load_json_buffer(li_tokenizer **out, const char *data, size_t len,
                                        const char *name) {
    return li_tokenizer_load_json_buffers(out, data, len, name, NULL, 0, NULL);
}

// The tokenizer from tokenizer.json's parsed root and the optional config (cfg_name's parsed
// contents, which must be an object); st: how parsing went (not LI_OK: nothing is built).
// Releases root and cfg either way.
static li_status load_parsed(li_tokenizer **out, const char *name, json_t *root, json_t *cfg,
                             const char *cfg_name, li_status st) {
    if (st == LI_OK && cfg && !json_is_object(cfg))
        st = li_error_set(LI_ERR_FORMAT, "%s: top level is not a JSON object", cfg_name);
    jctx j = {name, NULL};
    if (st == LI_OK) st = load_json(&j, root, cfg);
    json_decref(root);
    json_decref(cfg);
    if (st != LI_OK) li_tokenizer_free(j.t);
    else *out = j.t;
    return st;
}

li_status li_tokenizer_load_json_buffers(li_tokenizer **out, const char *data, size_t len,
                                         const char *name, const char *cfg_data, size_t cfg_len,
                                         const char *cfg_name) {
    *out = NULL;
    json_error_t err;
    json_t *root = json_loadb(data, len, 0, &err);
    if (!root)
        return li_error_set(LI_ERR_FORMAT, "%s: invalid JSON at line %d column %d: %s", name,
                            err.line, err.column, err.text);
    json_t *cfg = NULL;
    li_status st = LI_OK;
    if (cfg_data) {  // same flags as a tokenizer_config.json file (see parse_file)
        cfg = json_loadb(cfg_data, cfg_len, JSON_DECODE_INT_AS_REAL, &err);
        if (!cfg)
            st = li_error_set(LI_ERR_FORMAT, "%s: invalid JSON at line %d column %d: %s",
                              cfg_name, err.line, err.column, err.text);
    }
    return load_parsed(out, name, root, cfg, cfg_name, st);
}

li_status li_tokenizer_load_json(li_tokenizer **out, const char *tokenizer_json_path,
                                 const char *tokenizer_config_path) {
    *out = NULL;
    json_t *root = NULL, *cfg = NULL;
    LI_TRY(parse_file(tokenizer_json_path, &root, 0));
    li_status st = LI_OK;
    if (tokenizer_config_path)
        st = parse_file(tokenizer_config_path, &cfg, JSON_DECODE_INT_AS_REAL);
    return load_parsed(out, tokenizer_json_path, root, cfg, tokenizer_config_path, st);
}
