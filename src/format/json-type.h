// json-type.h — the name of a jansson value's type as error messages say it ("tensor 'x' is an
// array, not an object"), shared by the JSON readers of the format layer (hf-config.c,
// safetensors.c). Not here: parsing (jansson).
#ifndef LI_FORMAT_JSON_TYPE_H
#define LI_FORMAT_JSON_TYPE_H

#include <jansson.h>

static inline const char *li_json_type_name(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

#endif
