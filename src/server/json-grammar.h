// json-grammar.h — constrained decoding for response_format: a JSON grammar (any object, or an
// object of a JSON schema) and a byte-level recogniser of it, which the server runs over the
// vocabulary before each token to forbid every token whose text would leave the language. Every
// accepted prefix can still be completed, so whatever the model samples the text stays a prefix
// of a valid document, and it is one when the recogniser says done.
//
// Schemas: a subset of JSON Schema, compiled once per request. Supported: type (a name or a list
// of object, array, string, number, integer, boolean, null), properties (generated in the
// schema's order; those not in required may be left out), required, additionalProperties (false
// or absent: no other keys are generated), items, minItems, maxItems, enum, const, and the
// annotations title, description, $schema, $id, default, examples. Any other keyword (anyOf,
// $ref, pattern, format, minLength, minimum, ...) is LI_ERR_UNSUPPORTED naming it; the root must
// be an object. Whitespace between tokens is allowed, at most LI_JSON_MAX_WS bytes in a row, so a
// model cannot fill its budget with it; nesting is at most LI_JSON_MAX_DEPTH deep.
// Not here: the vocabulary and the logits (logits.c). Tested by tests/test-json-grammar.c (random
// walks over the grammar parse with jansson and satisfy their schema; bad schemas are refused)
// and tests/test_server_api.py (SmolLM2 with response_format).
#ifndef LI_SERVER_JSON_GRAMMAR_H
#define LI_SERVER_JSON_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>

#include "../core/core.h"

#define LI_JSON_MAX_DEPTH 32
#define LI_JSON_MAX_WS 32

typedef struct li_json_grammar li_json_grammar;

// {"type": "json_object"}: any JSON object.
li_status li_json_grammar_object(li_json_grammar **out);
// {"type": "json_schema"}: schema_json is the schema's JSON text. Errors name the keyword.
li_status li_json_grammar_schema(const char *schema_json, li_json_grammar **out);
void li_json_grammar_free(li_json_grammar *g);  // NULL is a no-op

// A position in a grammar: a stack of frames (fixed size: copying it is a memcpy of its used
// part). Valid while its grammar lives.
typedef struct {
    const void *node;     // the schema node of the frame
    unsigned char kind, phase;
    unsigned short pos;   // bytes matched in a key / literal
    int i;                // object: index of the last property; array: items so far
    unsigned long long cand;  // key / literal candidates (bit k: the k-th)
} li_json_frame;

typedef struct {
    const void *any;      // the grammar's node of any value
    int depth;            // frames in use; 0 with done: a complete value
    bool done;
    int ws_run;           // whitespace bytes in a row
    li_json_frame f[LI_JSON_MAX_DEPTH];
} li_json_state;

void li_json_state_init(li_json_state *st, const li_json_grammar *g);
// Feeds n bytes: true and advanced when every byte keeps the text in the language; false and st
// unchanged otherwise.
bool li_json_state_feed(li_json_state *st, const char *bytes, size_t n);
// Whether feeding the bytes would succeed (st unchanged).
bool li_json_state_accepts(const li_json_state *st, const char *bytes, size_t n);

#endif
