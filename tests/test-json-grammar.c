// test-json-grammar.c — the JSON grammar of response_format (src/server/json-grammar.c).
//
// Oracle: jansson. Random walks over a grammar (each byte drawn among the bytes it accepts, then
// a completion that closes what is open) must parse as JSON and satisfy their schema, checked by
// a small validator here; texts that break the grammar in each way it guards (syntax, a missing
// required key, an extra key, an enum outside, too much whitespace, too deep) must be refused;
// unsupported schema keywords must be errors naming the keyword.
#include <jansson.h>

#include "../src/server/json-grammar.h"
#include "test.h"

// Bytes a walk draws from: JSON's punctuation and literals, digits, a few letters, whitespace,
// an escape, a multi-byte character's first byte.
static const char ALPHABET[] = "{}[]\":,-+.eE0123456789 \n\\uAB\xc3\xa9{}[]\":,"
                               "abcdefghijklmnopqrstuvwxyz";
// The completion's order: close strings, objects, arrays; then the shortest values, the letters
// of keys and literals, a UTF-8 continuation byte.
static const char CLOSE[] = "\"}]0123456789:,abcdefghijklmnopqrstuvwxyz\xa9{[";

static const char *SCHEMA =
    "{\"type\": \"object\", \"properties\": {"
    "\"name\": {\"type\": \"string\"},"
    "\"age\": {\"type\": \"integer\"},"
    "\"score\": {\"type\": [\"number\", \"null\"]},"
    "\"tags\": {\"type\": \"array\", \"items\": {\"enum\": [\"red\", \"green\", 7, null]}, "
    "\"minItems\": 1, \"maxItems\": 3},"
    "\"ok\": {\"type\": \"boolean\"},"
    "\"inner\": {\"type\": \"object\", \"properties\": {\"x\": {\"const\": \"y\"}, "
    "\"any\": {}}, \"required\": [\"x\"], \"additionalProperties\": false}"
    "}, \"required\": [\"name\", \"tags\"]}";

// Appends one accepted byte from `set` (in order if first, else drawn at random); false if none.
static bool put_one(li_json_state *st, char *text, int *n, const char *set, li_rng *rng, bool first) {
    int k = (int)strlen(set), start = first ? 0 : (int)(li_rng_u64(rng) % (uint64_t)k);
    for (int j = 0; j < k; j++) {
        char c = set[(start + j) % k];
        if (li_json_state_feed(st, &c, 1)) {
            text[(*n)++] = c;
            return true;
        }
    }
    return false;
}

// A random text of the grammar: `len` random bytes, then the completion. NUL-terminated.
static bool walk(const li_json_grammar *g, li_rng *rng, int len, char *text, int cap) {
    li_json_state st;
    li_json_state_init(&st, g);
    int n = 0;
    for (int i = 0; i < len && n < cap / 2; i++)
        if (!put_one(&st, text, &n, ALPHABET, rng, false)) break;
    while (!st.done && n < cap - 1)
        if (!put_one(&st, text, &n, CLOSE, rng, true)) return false;
    text[n] = 0;
    return st.done;
}

// Is v valid against the schema node s (the subset the grammar supports)?
static bool valid(const json_t *v, const json_t *s) {
    if (json_is_true(s) || json_object_size(s) == 0) return true;
    const json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    if (cn) return json_equal(v, cn);
    if (en) {
        for (size_t i = 0; i < json_array_size(en); i++)
            if (json_equal(v, json_array_get(en, i))) return true;
        return false;
    }
    const json_t *type = json_object_get(s, "type");
    bool ok = !type;
    for (size_t i = 0; type && i < (json_is_array(type) ? json_array_size(type) : 1) && !ok; i++) {
        const char *t = json_string_value(json_is_array(type) ? json_array_get(type, i) : type);
        ok = (!strcmp(t, "object") && json_is_object(v)) || (!strcmp(t, "array") && json_is_array(v)) ||
             (!strcmp(t, "string") && json_is_string(v)) || (!strcmp(t, "number") && json_is_number(v)) ||
             (!strcmp(t, "integer") && json_is_integer(v)) || (!strcmp(t, "boolean") && json_is_boolean(v)) ||
             (!strcmp(t, "null") && json_is_null(v));
    }
    if (!ok) return false;
    const json_t *props = json_object_get(s, "properties");
    if (json_is_object(v) && props) {
        const char *k;
        const json_t *x;
        json_object_foreach((json_t *)v, k, x) {
            const json_t *ps = json_object_get(props, k);
            if (!ps || !valid(x, ps)) return false;
        }
        const json_t *req = json_object_get(s, "required");
        for (size_t i = 0; i < json_array_size(req); i++)
            if (!json_object_get(v, json_string_value(json_array_get(req, i)))) return false;
    }
    const json_t *items = json_object_get(s, "items");
    if (json_is_array(v)) {
        const json_t *mn = json_object_get(s, "minItems"), *mx = json_object_get(s, "maxItems");
        if (mn && (json_int_t)json_array_size(v) < json_integer_value(mn)) return false;
        if (mx && (json_int_t)json_array_size(v) > json_integer_value(mx)) return false;
        for (size_t i = 0; items && i < json_array_size(v); i++)
            if (!valid(json_array_get(v, i), items)) return false;
    }
    return true;
}

static bool accepts(const li_json_grammar *g, const char *text) {
    li_json_state st;
    li_json_state_init(&st, g);
    return li_json_state_feed(&st, text, strlen(text));
}

static bool complete(const li_json_grammar *g, const char *text) {
    li_json_state st;
    li_json_state_init(&st, g);
    return li_json_state_feed(&st, text, strlen(text)) && st.done;
}

// Walk i: a random text over g of about rng % max_len bytes into text (cap), parsed as JSON into
// *v (NULL when it does not parse, *err saying why). false, with a failed check, when the walk
// found no way to complete the text: the caller stops walking.
static bool walk_json(const li_json_grammar *g, li_rng *rng, int max_len, int i, char *text,
                      int cap, json_t **v, const char **err) {
    static json_error_t je;
    int len = (int)(li_rng_u64(rng) % (uint64_t)max_len);
    if (!walk(g, rng, len, text, cap)) {
        CHECK(0, "walk %d found no way to complete '%s'", i, text);
        return false;
    }
    *v = json_loads(text, 0, &je);
    *err = je.text;
    return true;
}

int main(void) {
    li_rng rng;
    test_rng_init(&rng, "test-json-grammar");
    li_json_grammar *obj = NULL, *sch = NULL;
    json_t *schema = json_loads(SCHEMA, 0, NULL);

    TEST_BEGIN("grammars compile: json_object and a schema of every supported keyword");
    CHECK(li_json_grammar_object(&obj) == LI_OK, "%s", li_last_error());
    CHECK(li_json_grammar_schema(SCHEMA, &sch) == LI_OK, "%s", li_last_error());
    CHECK(schema != NULL, "the test's schema parses");
    TEST_END();
    if (!obj || !sch || !schema) return test_summary();

    TEST_BEGIN("random walks over json_object parse as JSON objects");
    {
        static char text[8192];
        int done = 0;
        for (int i = 0; i < 2000; i++) {
            json_t *v;
            const char *err;
            if (!walk_json(obj, &rng, 200, i, text, (int)sizeof text, &v, &err)) break;
            CHECK(v && json_is_object(v), "walk %d: '%s' does not parse: %s", i, text, err);
            json_decref(v);
            done += v != NULL;
        }
        CHECK(done == 2000, "%d of 2000 parsed", done);
    }
    TEST_END();

    TEST_BEGIN("random walks over a schema parse and satisfy it");
    {
        static char text[8192];
        int n_valid = 0, n_tags = 0, n_inner = 0;
        for (int i = 0; i < 2000; i++) {
            json_t *v;
            const char *err;
            if (!walk_json(sch, &rng, 300, i, text, (int)sizeof text, &v, &err)) break;
            bool ok = v && valid(v, schema);
            CHECK(ok, "walk %d: '%s' %s", i, text, v ? "breaks the schema" : err);
            n_valid += ok;
            n_tags += v && json_array_size(json_object_get(v, "tags")) > 1;
            n_inner += v && json_object_get(v, "inner") != NULL;
            json_decref(v);
        }
        CHECK(n_valid == 2000, "%d of 2000 valid", n_valid);
        // the walks reach the schema's corners, not only the shortest documents
        CHECK(n_tags > 20 && n_inner > 20, "%d walks with 2+ tags, %d with inner", n_tags, n_inner);
    }
    TEST_END();

    TEST_BEGIN("texts outside the grammar are refused");
    {
        static const char *const bad_obj[] = {"[", "\"a\"", "{,", "{\"a\" 1", "{\"a\":01",
                                              "{\"a\":1,}", "{\"a\":[1,]", "{\"a\":tru ",
                                              "{\"a\":\"\x01", "{\"a\":\"\\x", "{\"a\":-}",
                                              "{\"a\":1.}", "{\"a\":1e}", "{}}", "{} x",
                                              "{\"\\u0000", "{\"\\ud800", "{\"\xc3(",
                                              "{\"a\":12345678901234567", "{\"a\":1e123"};
        for (size_t i = 0; i < sizeof bad_obj / sizeof *bad_obj; i++)
            CHECK(!accepts(obj, bad_obj[i]), "json_object accepted '%s'", bad_obj[i]);
        static const char *const good_obj[] = {"{}", "{\"a\":[1,-2.5e+3,true,null,{\"b\":\"\\u00e9\"}]}",
                                               " { \"a\" : 0 } \n"};
        for (size_t i = 0; i < sizeof good_obj / sizeof *good_obj; i++)
            CHECK(complete(obj, good_obj[i]), "json_object refused '%s'", good_obj[i]);
        static const char *const bad_sch[] = {
            "{}",                                   // name and tags are required
            "{\"name\":\"a\"}",                     // tags missing
            "{\"nope\"",                            // not a property
            "{\"tags\":[\"red\"],\"name\"",         // properties come in the schema's order
            "{\"name\":\"a\",\"tags\":[]",          // minItems 1
            "{\"name\":\"a\",\"tags\":[\"blue\"",   // not in the enum
            "{\"name\":\"a\",\"tags\":[7,7,7,7",    // maxItems 3
            "{\"name\":\"a\",\"age\":1.5",          // an integer
            "{\"name\":\"a\",\"tags\":[7],\"inner\":{}",  // inner.x required
            "{\"name\":\"a\",\"tags\":[7],\"inner\":{\"x\":\"z\"",  // const
        };
        for (size_t i = 0; i < sizeof bad_sch / sizeof *bad_sch; i++)
            CHECK(!complete(sch, bad_sch[i]) && (i < 2 || !accepts(sch, bad_sch[i])),
                  "the schema accepted '%s'", bad_sch[i]);
        CHECK(complete(sch, "{\"name\":\"a\",\"tags\":[null],\"inner\":{\"x\":\"y\",\"any\":[{}]}}"),
              "a valid document refused");
        char spaces[LI_JSON_MAX_WS + 3] = "{";
        memset(spaces + 1, ' ', LI_JSON_MAX_WS);
        CHECK(accepts(obj, spaces), "%d spaces refused", LI_JSON_MAX_WS);
        spaces[LI_JSON_MAX_WS + 1] = ' ';
        CHECK(!accepts(obj, spaces), "%d spaces accepted", LI_JSON_MAX_WS + 1);
        char deep[LI_JSON_MAX_DEPTH * 6 + 8] = "";
        for (int i = 0; i < LI_JSON_MAX_DEPTH; i++) strcat(deep, "{\"a\":");
        CHECK(!accepts(obj, deep), "nesting past %d accepted", LI_JSON_MAX_DEPTH);
    }
    TEST_END();

    TEST_BEGIN("unsupported schemas are errors naming the keyword");
    {
        static const char *const cases[][2] = {
            {"{\"type\":\"object\",\"anyOf\":[]}", "anyOf"},
            {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":\"x\"}}}", "pattern"},
            {"{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#/x\"}}}", "$ref"},
            {"{\"type\":\"object\",\"properties\":{\"a\":{\"minimum\":1}}}", "minimum"},
            {"{\"type\":\"array\"}", "root"},
            {"{\"type\":\"object\",\"additionalProperties\":true}", "additionalProperties"},
            {"{\"type\":\"object\",\"properties\":{\"a\\\"b\":{}}}", "quotes"},
            {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"b\"]}", "required"},
            {"{\"type\":\"objekt\"}", "objekt"},
        };
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
            li_json_grammar *g = NULL;
            li_status st = li_json_grammar_schema(cases[i][0], &g);
            CHECK(st == LI_ERR_UNSUPPORTED && strstr(li_last_error(), cases[i][1]),
                  "%s: status %d, '%s'", cases[i][0], st, li_last_error());
            li_json_grammar_free(g);
        }
        li_json_grammar *g = NULL;
        CHECK(li_json_grammar_schema("{\"type\":", &g) == LI_ERR_INVALID_ARG, "bad JSON");
    }
    TEST_END();

    json_decref(schema);
    li_json_grammar_free(obj);
    li_json_grammar_free(sch);
    return test_summary();
}
