// json-grammar.c — the JSON grammar of response_format (json-grammar.h): schema compilation
// (jansson) and the byte-level recogniser.
//
// The recogniser is a pushdown automaton over bytes. Each frame is one value being read:
//   VALUE   a value of its node is expected (whitespace, then its first byte picks the kind)
//   OBJ     an object: keys (free strings, or a schema's property names in order), ':', values
//   ARR     an array of the node's items
//   STR     a string (escapes checked, control bytes refused, other bytes passed through)
//   NUM     a number (RFC 8259 grammar; integers refuse '.', 'e')
//   LIT     one of a set of literal texts (true, false, null, an enum's or const's JSON texts)
// A frame that ends on a byte that is not its own (a number ends at the byte after it, a literal
// that is complete and cannot continue) is popped and the byte goes to the frame below.
// Napkin maths: a step checks every token of a 49,152-token vocabulary, ~6 bytes each, ~300k
// byte steps of a few branches and one copy of the used frames per token: about a millisecond.
#include "json-grammar.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    T_OBJ = 1, T_ARR = 2, T_STR = 4, T_NUM = 8, T_INT = 16, T_BOOL = 32, T_NULL = 64,
    T_ANY = 127,
};
enum { F_VALUE, F_OBJ, F_ARR, F_STR, F_NUM, F_LIT };
enum { O_START, O_KEY, O_COLON, O_AFTER, O_NEED_KEY };               // F_OBJ phases
enum { A_START, A_AFTER, A_NEED };                                    // F_ARR phases
enum { S_IN, S_ESC, S_U1, S_U2, S_U3, S_U4 };                         // F_STR phases
enum { N_SIGN, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };   // F_NUM phases (+8: int only)

#define MAX_PROPS 64  // candidates are bits of a 64-bit mask
#define MAX_LITS 64

typedef struct jnode jnode;
typedef struct {
    char *name;  // plain bytes (no quote, backslash or control byte)
    size_t len;
    jnode *node;
    bool required;
} jprop;

struct jnode {
    unsigned types;    // T_* allowed
    bool any_props;    // an object of any keys whose values are any values
    jprop *props;      // (n_props) in the schema's order
    int n_props;
    jnode *items;      // array items
    int min_items, max_items;  // max < 0: none
    char **lits;       // (n_lits) enum / const: the JSON texts allowed, NULL: none
    size_t *lit_len;
    int n_lits;
    jnode *next;       // the grammar's list of nodes (to free them)
};

struct li_json_grammar {
    jnode *root;
    jnode any;   // any value: objects of any keys, arrays of any items
    jnode *nodes;
};

// Literals of booleans and null, as LIT frames read them.
static char *const BOOL_LITS[] = {"true", "false"};
static const size_t BOOL_LENS[] = {4, 5};
static char *const NULL_LITS[] = {"null"};
static const size_t NULL_LENS[] = {4};
static const jnode BOOL_NODE = {.lits = (char **)BOOL_LITS, .lit_len = (size_t *)BOOL_LENS, .n_lits = 2};
static const jnode NULL_NODE = {.lits = (char **)NULL_LITS, .lit_len = (size_t *)NULL_LENS, .n_lits = 1};

// ---- compiling a schema ----------------------------------------------------------------------

static jnode *new_node(li_json_grammar *g) {
    jnode *n = calloc(1, sizeof *n);
    if (!n) return NULL;
    n->max_items = -1;
    n->next = g->nodes;
    g->nodes = n;
    return n;
}

static void any_node(li_json_grammar *g) {
    g->any.types = T_ANY;
    g->any.any_props = true;
    g->any.items = &g->any;
    g->any.max_items = -1;
}

void li_json_grammar_free(li_json_grammar *g) {
    if (!g) return;
    for (jnode *n = g->nodes, *next; n; n = next) {
        next = n->next;
        for (int i = 0; i < n->n_props; i++) free(n->props[i].name);
        free(n->props);
        for (int i = 0; i < n->n_lits; i++) free(n->lits[i]);
        free(n->lits);
        free(n->lit_len);
        free(n);
    }
    free(g);
}

li_status li_json_grammar_object(li_json_grammar **out) {
    li_json_grammar *g = calloc(1, sizeof *g);
    if (!g) return li_error_set(LI_ERR_OOM, "out of memory");
    any_node(g);
    jnode *root = new_node(g);
    if (!root) {
        li_json_grammar_free(g);
        return li_error_set(LI_ERR_OOM, "out of memory");
    }
    root->types = T_OBJ;
    root->any_props = true;
    g->root = root;
    *out = g;
    return LI_OK;
}

#define UNSUP(...) li_error_set(LI_ERR_UNSUPPORTED, "response_format: " __VA_ARGS__)

static unsigned type_bit(const char *t) {
    static const char *const names[] = {"object", "array", "string", "number", "integer",
                                        "boolean", "null"};
    for (int i = 0; i < 7; i++)
        if (!strcmp(t, names[i])) return 1u << i;
    return 0;
}

static li_status compile(li_json_grammar *g, const json_t *sch, jnode **out, int depth);

static li_status compile_lits(jnode *n, const json_t *values, const char *kw) {
    size_t k = json_array_size(values);
    if (k == 0 || k > MAX_LITS) return UNSUP("'%s' must list 1 to %d values", kw, MAX_LITS);
    n->lits = calloc(k, sizeof *n->lits);
    n->lit_len = calloc(k, sizeof *n->lit_len);
    if (!n->lits || !n->lit_len) return li_error_set(LI_ERR_OOM, "out of memory");
    for (size_t i = 0; i < k; i++) {
        const json_t *v = json_array_get(values, i);
        if (json_is_object(v) || json_is_array(v))
            return UNSUP("'%s' values must be strings, numbers, booleans or null", kw);
        if (!(n->lits[i] = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY)))
            return li_error_set(LI_ERR_OOM, "out of memory");
        n->lit_len[i] = strlen(n->lits[i]);
        n->n_lits++;
    }
    return LI_OK;
}

static li_status compile_object(li_json_grammar *g, const json_t *sch, jnode *n, int depth) {
    const json_t *props = json_object_get(sch, "properties"), *req = json_object_get(sch, "required");
    const json_t *add = json_object_get(sch, "additionalProperties");
    if (add && !json_is_false(add))
        return UNSUP("only \"additionalProperties\": false (or none) is supported");
    if (props && !json_is_object(props)) return UNSUP("'properties' must be an object");
    if (req && !json_is_array(req)) return UNSUP("'required' must be an array of names");
    if (!props) {  // {"type": "object"}: any object
        if (req && json_array_size(req)) return UNSUP("'required' without 'properties'");
        n->any_props = true;
        return LI_OK;
    }
    size_t k = json_object_size(props);
    if (k > MAX_PROPS) return UNSUP("%zu properties, at most %d", k, MAX_PROPS);
    n->props = calloc(k ? k : 1, sizeof *n->props);
    if (!n->props) return li_error_set(LI_ERR_OOM, "out of memory");
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)props, key, v) {
        for (const char *c = key; *c; c++)
            if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20)
                return UNSUP("property name '%.40s': quotes, backslashes and control characters "
                             "are not supported", key);
        jprop *p = &n->props[n->n_props];
        if (!(p->name = strdup(key))) return li_error_set(LI_ERR_OOM, "out of memory");
        p->len = strlen(key);
        n->n_props++;
        LI_TRY(compile(g, v, &p->node, depth + 1));
    }
    for (size_t i = 0; req && i < json_array_size(req); i++) {
        const json_t *r = json_array_get(req, i);
        int found = -1;
        for (int j = 0; json_is_string(r) && j < n->n_props; j++)
            if (!strcmp(n->props[j].name, json_string_value(r))) found = j;
        if (found < 0) return UNSUP("'required' names a property that 'properties' does not have");
        n->props[found].required = true;
    }
    return LI_OK;
}

static li_status compile(li_json_grammar *g, const json_t *sch, jnode **out, int depth) {
    if (depth > LI_JSON_MAX_DEPTH) return UNSUP("the schema nests deeper than %d", LI_JSON_MAX_DEPTH);
    if (json_is_true(sch)) {  // `true`: any value
        *out = &g->any;
        return LI_OK;
    }
    if (!json_is_object(sch)) return UNSUP("a schema must be an object");
    static const char *const known[] = {"type", "properties", "required", "additionalProperties",
                                        "items", "minItems", "maxItems", "enum", "const", "title",
                                        "description", "$schema", "$id", "default", "examples",
                                        NULL};
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)sch, key, v) {
        bool ok = false;
        for (int i = 0; known[i] && !ok; i++) ok = !strcmp(known[i], key);
        if (!ok) return UNSUP("JSON schema keyword '%.40s' is not supported", key);
    }
    jnode *n = new_node(g);
    if (!n) return li_error_set(LI_ERR_OOM, "out of memory");
    *out = n;
    const json_t *type = json_object_get(sch, "type");
    if (json_is_string(type)) {
        n->types = type_bit(json_string_value(type));
        if (!n->types) return UNSUP("unknown type '%.40s'", json_string_value(type));
    } else if (json_is_array(type)) {
        for (size_t i = 0; i < json_array_size(type); i++) {
            const json_t *t = json_array_get(type, i);
            unsigned b = json_is_string(t) ? type_bit(json_string_value(t)) : 0;
            if (!b) return UNSUP("'type' lists an unknown type");
            n->types |= b;
        }
    } else if (type) {
        return UNSUP("'type' must be a name or a list of names");
    } else {
        n->types = json_object_get(sch, "properties") ? T_OBJ
                   : json_object_get(sch, "items")    ? T_ARR
                                                      : T_ANY;
        if (n->types == T_ANY) {
            n->any_props = true;
            n->items = &g->any;
        }
    }
    if (n->types & T_INT && n->types & T_NUM) n->types &= ~T_INT;  // integers are numbers
    const json_t *en = json_object_get(sch, "enum"), *cn = json_object_get(sch, "const");
    if (en && cn) return UNSUP("give 'enum' or 'const', not both");
    if (en) {
        if (!json_is_array(en)) return UNSUP("'enum' must be an array");
        LI_TRY(compile_lits(n, en, "enum"));
    } else if (cn) {
        json_t *one = json_pack("[O]", cn);
        if (!one) return li_error_set(LI_ERR_OOM, "out of memory");
        li_status rc = compile_lits(n, one, "const");
        json_decref(one);
        LI_TRY(rc);
    }
    if (n->types & T_OBJ && !n->any_props) LI_TRY(compile_object(g, sch, n, depth));
    if (n->types & T_ARR && !n->items) {
        const json_t *items = json_object_get(sch, "items");
        if (items) LI_TRY(compile(g, items, &n->items, depth + 1));
        else n->items = &g->any;
    }
    const json_t *mn = json_object_get(sch, "minItems"), *mx = json_object_get(sch, "maxItems");
    if ((mn && !json_is_integer(mn)) || (mx && !json_is_integer(mx)))
        return UNSUP("minItems and maxItems must be integers");
    n->min_items = mn ? (int)json_integer_value(mn) : 0;
    n->max_items = mx ? (int)json_integer_value(mx) : -1;
    if (n->min_items < 0 || (mx && n->max_items < n->min_items) || n->min_items > 1 << 16)
        return UNSUP("minItems / maxItems out of range");
    return LI_OK;
}

li_status li_json_grammar_schema(const char *schema_json, li_json_grammar **out) {
    *out = NULL;
    json_error_t je;
    json_t *sch = json_loads(schema_json, JSON_REJECT_DUPLICATES, &je);
    if (!sch) return li_error_set(LI_ERR_INVALID_ARG, "response_format: bad schema: %s", je.text);
    li_json_grammar *g = calloc(1, sizeof *g);
    li_status rc = g ? LI_OK : li_error_set(LI_ERR_OOM, "out of memory");
    if (g) any_node(g);
    if (rc == LI_OK) rc = compile(g, sch, &g->root, 0);
    if (rc == LI_OK && (g->root->types != T_OBJ || g->root->n_lits))
        rc = UNSUP("the schema's root must be an object (\"type\": \"object\")");
    json_decref(sch);
    if (rc != LI_OK) {
        li_json_grammar_free(g);
        return rc;
    }
    *out = g;
    return LI_OK;
}

// ---- the recogniser --------------------------------------------------------------------------

void li_json_state_init(li_json_state *st, const li_json_grammar *g) {
    memset(st, 0, offsetof(li_json_state, f) + sizeof st->f[0]);
    st->any = &g->any;
    st->depth = 1;
    st->f[0].node = g->root;
    st->f[0].kind = F_VALUE;
}

static bool is_ws(unsigned c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
static bool is_digit(unsigned c) { return c >= '0' && c <= '9'; }
static bool is_hex(unsigned c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

static bool ws(li_json_state *st) { return ++st->ws_run <= LI_JSON_MAX_WS; }

static bool push(li_json_state *st, const jnode *n, int kind) {
    if (st->depth >= LI_JSON_MAX_DEPTH) return false;
    li_json_frame *f = &st->f[st->depth++];
    memset(f, 0, sizeof *f);
    f->node = n;
    f->kind = (unsigned char)kind;
    return true;
}

static void pop(li_json_state *st) {
    if (--st->depth == 0) st->done = true;
}

// Bits of the properties a key may name next: from i + 1 up to the first required one.
static unsigned long long next_props(const jnode *n, int i) {
    unsigned long long m = 0;
    for (int k = i + 1; k < n->n_props; k++) {
        m |= 1ull << k;
        if (n->props[k].required) break;
    }
    return m;
}

static bool required_left(const jnode *n, int i) {
    for (int k = i + 1; k < n->n_props; k++)
        if (n->props[k].required) return true;
    return false;
}

// Literal candidates of a LIT frame: those whose text continues with c at pos.
static unsigned long long lit_next(const jnode *n, unsigned long long cand, int pos, unsigned c) {
    unsigned long long m = 0;
    for (int k = 0; k < n->n_lits; k++)
        if (cand >> k & 1 && (size_t)pos < n->lit_len[k] && (unsigned char)n->lits[k][pos] == c)
            m |= 1ull << k;
    return m;
}

static bool lit_complete(const jnode *n, unsigned long long cand, int pos) {
    for (int k = 0; k < n->n_lits; k++)
        if (cand >> k & 1 && n->lit_len[k] == (size_t)pos) return true;
    return false;
}

// A value of f's node starts with c: the frame becomes that value's reader (c is fed again).
static bool start_value(li_json_frame *f, unsigned c) {
    const jnode *n = f->node;
    if (n->n_lits) {
        f->kind = F_LIT;
        f->cand = n->n_lits == 64 ? ~0ull : (1ull << n->n_lits) - 1;
        return true;
    }
    if (c == '{' && n->types & T_OBJ) f->kind = F_OBJ;
    else if (c == '[' && n->types & T_ARR) f->kind = F_ARR;
    else if (c == '"' && n->types & T_STR) f->kind = F_STR;
    else if ((c == '-' || is_digit(c)) && n->types & (T_NUM | T_INT)) f->kind = F_NUM;
    else if ((c == 't' || c == 'f') && n->types & T_BOOL) f->node = &BOOL_NODE, f->kind = F_LIT, f->cand = 3;
    else if (c == 'n' && n->types & T_NULL) f->node = &NULL_NODE, f->kind = F_LIT, f->cand = 1;
    else return false;
    if (f->kind == F_NUM) f->phase = n->types & T_NUM ? 0 : 8;
    return true;
}

// Feeds one byte; false when it leaves the language (st is then garbage: callers work on copies).
static bool step(li_json_state *st, unsigned c) {
    if (!is_ws(c)) st->ws_run = 0;
    for (;;) {
        if (st->depth == 0) return is_ws(c) && ws(st);  // trailing whitespace after the value
        li_json_frame *f = &st->f[st->depth - 1];
        const jnode *n = f->node;
        switch (f->kind) {
        case F_VALUE:
            if (is_ws(c)) return ws(st);
            if (!start_value(f, c)) return false;
            if (f->kind == F_OBJ || f->kind == F_ARR || f->kind == F_STR) {
                f->i = -1 * (f->kind == F_OBJ);
                return true;  // the opening byte is the frame's
            }
            continue;  // numbers and literals read their first byte themselves
        case F_OBJ:
            switch (f->phase) {
            case O_START:
            case O_NEED_KEY:
                if (is_ws(c)) return ws(st);
                if (c == '}' && f->phase == O_START && (n->any_props || !required_left(n, f->i))) {
                    pop(st);
                    return true;
                }
                if (c != '"') return false;
                if (n->any_props) {  // a free key: a string
                    f->phase = O_COLON;
                    return push(st, st->any, F_STR);
                }
                f->cand = next_props(n, f->i);
                if (!f->cand) return false;
                f->phase = O_KEY;
                f->pos = 0;
                return true;
            case O_KEY: {
                if (c == '"') {
                    for (int k = 0; k < n->n_props; k++)
                        if (f->cand >> k & 1 && n->props[k].len == f->pos) {
                            f->i = k;
                            f->phase = O_COLON;
                            return true;
                        }
                    return false;
                }
                unsigned long long m = 0;
                for (int k = 0; k < n->n_props; k++)
                    if (f->cand >> k & 1 && f->pos < n->props[k].len &&
                        (unsigned char)n->props[k].name[f->pos] == c)
                        m |= 1ull << k;
                if (!m) return false;
                f->cand = m;
                f->pos++;
                return true;
            }
            case O_COLON:
                if (is_ws(c)) return ws(st);
                if (c != ':') return false;
                f->phase = O_AFTER;
                return push(st, n->any_props ? st->any : n->props[f->i].node, F_VALUE);
            case O_AFTER:
                if (is_ws(c)) return ws(st);
                if (c == ',' && (n->any_props || next_props(n, f->i))) {
                    f->phase = O_NEED_KEY;
                    return true;
                }
                if (c == '}' && (n->any_props || !required_left(n, f->i))) {
                    pop(st);
                    return true;
                }
                return false;
            }
            return false;
        case F_ARR:
            if (f->phase != A_AFTER) {
                if (is_ws(c)) return ws(st);
                if (c == ']' && f->phase == A_START && n->items && 0 >= n->min_items) {
                    pop(st);
                    return true;
                }
                if (n->max_items >= 0 && f->i >= n->max_items) return false;
                f->phase = A_AFTER;
                f->i++;
                if (!push(st, n->items, F_VALUE)) return false;
                continue;
            }
            if (is_ws(c)) return ws(st);
            if (c == ',' && (n->max_items < 0 || f->i < n->max_items)) {
                f->phase = A_NEED;
                return true;
            }
            if (c == ']' && f->i >= n->min_items) {
                pop(st);
                return true;
            }
            return false;
        case F_STR:
            switch (f->phase) {
            case S_IN:
                if (f->pos) {  // inside a UTF-8 sequence: cand holds the next byte's range
                    if (c < (f->cand >> 8) || c > (f->cand & 0xff)) return false;
                    f->pos--;
                    f->cand = 0x80bf;
                    return true;
                }
                if (c == '"') {
                    pop(st);
                    return true;
                }
                if (c == '\\') f->phase = S_ESC;
                if (c < 0x80) return c >= 0x20;
                // a UTF-8 lead byte: how many bytes follow, and the second one's range (no
                // overlong forms, no surrogates, nothing past U+10FFFF)
                if (c >= 0xc2 && c <= 0xdf) f->pos = 1;
                else if (c >= 0xe0 && c <= 0xef) f->pos = 2;
                else if (c >= 0xf0 && c <= 0xf4) f->pos = 3;
                else return false;
                f->cand = c == 0xe0 ? 0xa0bf : c == 0xed ? 0x809f : c == 0xf0 ? 0x90bf
                          : c == 0xf4 ? 0x808f : 0x80bf;
                return true;
            case S_ESC:
                if (c == 'u') f->phase = S_U1;
                else if (strchr("\"\\/bfnrt", (int)c) && c) f->phase = S_IN;
                else return false;
                return true;
            default:  // \uXXXX; no surrogates (\uD800-\uDFFF: a lone one is not Unicode) and
                      // no \u0000 (many JSON readers refuse a NUL)
                if (!is_hex(c)) return false;
                if (f->phase == S_U2 && f->pos && !(c >= '0' && c <= '7')) return false;
                if (f->phase == S_U4 && f->cand && c == '0') return false;
                f->cand = (f->phase == S_U1 || f->cand) && c == '0';
                f->pos = f->phase == S_U1 && (c == 'd' || c == 'D');
                f->phase = f->phase == S_U4 ? S_IN : f->phase + 1;
                return true;
            }
        case F_NUM: {
            // pos counts the digits of the current part: at most 16 before the point and after
            // it, 2 in the exponent, so that any number parses as a double (or an int64) and a
            // model cannot fill its budget with digits
            int p = f->phase & 7, int_only = f->phase & 8, q = p;
            if (p == N_SIGN) {  // pos 1 here: a '-' was read, a digit must follow
                if (c == '-' && f->pos == 0) {
                    f->pos = 1;
                    return true;
                }
                if (c == '0') q = N_ZERO;
                else if (is_digit(c)) q = N_INT;
                else return false;
                f->pos = 0;
            } else if (p == N_INT && is_digit(c) && f->pos < 16) {
                q = N_INT;
            } else if ((p == N_ZERO || p == N_INT) && c == '.' && !int_only) {
                q = N_DOT;
            } else if ((p == N_ZERO || p == N_INT || p == N_FRAC) && (c == 'e' || c == 'E') &&
                       !int_only) {
                q = N_E;
            } else if ((p == N_DOT || (p == N_FRAC && f->pos < 16)) && is_digit(c)) {
                q = N_FRAC;
            } else if (p == N_E && (c == '+' || c == '-')) {
                q = N_ESIGN;
            } else if ((p == N_E || p == N_ESIGN || (p == N_EXP && f->pos < 2)) && is_digit(c)) {
                q = N_EXP;
            } else if (p == N_ZERO || p == N_INT || p == N_FRAC || p == N_EXP) {
                pop(st);  // the number is complete: c belongs to the frame below
                continue;
            } else {
                return false;
            }
            if (q != p && !(p == N_SIGN)) f->pos = 0;
            if (is_digit(c)) f->pos++;
            f->phase = (unsigned char)(q | int_only);
            return true;
        }
        case F_LIT: {
            unsigned long long m = lit_next(n, f->cand, f->pos, c);
            if (m) {
                f->cand = m;
                f->pos++;
                return true;
            }
            if (!lit_complete(n, f->cand, f->pos)) return false;
            pop(st);
            continue;
        }
        }
        return false;
    }
}

bool li_json_state_accepts(const li_json_state *st, const char *bytes, size_t n) {
    li_json_state t;
    size_t used = offsetof(li_json_state, f) + (size_t)st->depth * sizeof st->f[0];
    memcpy(&t, st, used);
    for (size_t i = 0; i < n; i++)
        if (!step(&t, (unsigned char)bytes[i])) return false;
    return true;
}

bool li_json_state_feed(li_json_state *st, const char *bytes, size_t n) {
    if (!li_json_state_accepts(st, bytes, n)) return false;
    for (size_t i = 0; i < n; i++) step(st, (unsigned char)bytes[i]);
    return true;
}
