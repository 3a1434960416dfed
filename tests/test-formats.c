// test-formats.c — the file-format layer: GGUF, safetensors, config.json and
// generation_config.json, on good files and on bad ones.
//
// Good files: GGUF and safetensors files built here from fresh random data (every dtype, values
// recomputed here independently of core's converters), interop fixtures written by the python
// gguf and safetensors packages (tests/ref/gen_format_fixtures.py), config.json variants for
// every rope_scaling type, and the real SmolLM2 GGUF when models/ has it.
// Bad files: every truncation point, random byte corruption, and targeted lies (offsets, sizes,
// dtypes, shapes, counts, 2^63 lengths, wrong JSON types, missing shards, path traversal). Each
// must give an error status whose message names the file and the problem, and never crash (run
// it under ASan/UBSan with `make test DEBUG=1`).
//
// Seed: test_seed() (tests/test.h), fixed unless LI_TEST_SEED says otherwise; printed at the
// start and on failure.
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "format/gguf-hparams.h"
#include "format/gguf.h"
#include "format/hf-config.h"
#include "format/safetensors.h"
#include "gguf-write.h"
#include "test.h"

#define REAL_MODEL "models/SmolLM2-135M-Instruct.Q4_1.gguf"
#define FIXTURES "tests/data/formats"

static uint64_t g_seed;
static char g_tmp[256];  // scratch directory for files written by the tests

// ---- helpers --------------------------------------------------------------------------------

static uint64_t rng_state;
static uint64_t rnd(void) {  // splitmix64
    uint64_t z = (rng_state += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}
static float rnd_uniform(float lo, float hi) {
    return lo + (hi - lo) * (float)((rnd() >> 40) / 16777216.0);
}

static void patch_u32(uint8_t *p, size_t pos, uint32_t v) { memcpy(p + pos, &v, 4); }
static void patch_u64(uint8_t *p, size_t pos, uint64_t v) { memcpy(p + pos, &v, 8); }

static void write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n) {
        fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
        exit(2);
    }
    fclose(f);
}
static const char *tmp_path(const char *name) {
    static char buf[4][512];
    static int k;
    char *p = buf[k++ & 3];
    snprintf(p, 512, "%s/%s", g_tmp, name);
    return p;
}
static bool msg_has(const char *needle) { return strstr(li_error_msg(), needle) != NULL; }

// Independent decoders (not core's): the test's oracle for the converters.
static float f16_ref(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    float v = e == 0 ? ldexpf((float)m, -24) : ldexpf((float)(1024 + m), e - 25);
    return s ? -v : v;
}
// A random normal f16 with exponent in [e_lo, e_hi] (biased), random sign and mantissa.
static uint16_t rnd_f16(int e_lo, int e_hi) {
    uint16_t e = (uint16_t)(e_lo + (int)(rnd() % (uint64_t)(e_hi - e_lo + 1)));
    return (uint16_t)(((rnd() & 1) << 15) | (e << 10) | (rnd() & 1023));
}

// Relative closeness for dequantised values: d*q+m may be computed with or without a fused
// multiply-add, which changes the last bit, so allow 2^-22 relative plus a tiny absolute slack.
static bool close_to(float a, float b) { return fabsf(a - b) <= 2.4e-7f * fabsf(b) + 1e-30f; }

// ---- GGUF builder ---------------------------------------------------------------------------

typedef struct {
    const char *name;  // all the same length (7), so one can be patched into another
    uint32_t ggml_type;
    int n_dims;
    int64_t ne[4];
    // filled by make_tensor_data:
    size_t n_bytes;
    uint64_t n_el;
    uint8_t *raw;
    float *expect;  // NULL for types we do not read
} tspec;

// Byte positions of the fields the lie tests patch.
typedef struct {
    size_t n_tensors, n_kv, version;
    size_t key_u8, key_i8;        // length field of keys "test.u8" / "test.i8"
    size_t arr_u32_n;             // count of test.arr_u32
    size_t tokens_n;              // count of tokenizer.ggml.tokens
    size_t arch_val;              // bytes of the "llama" value
    size_t block_count_key;       // bytes of the key "llama.block_count"
    size_t head_count_val;        // value of llama.attention.head_count (int32)
    size_t align_val;             // value of general.alignment (0 if not written)
    struct {
        size_t name_len, name, n_dims, ne0, ne1, type, offset;
    } ti[8];
    size_t data_start;
} gguf_layout;

static tspec g_specs[] = {
    {"t.f32_a", 0, 2, {7, 3}, 0, 0, 0, 0},  {"t.f16_a", 1, 2, {10, 5}, 0, 0, 0, 0},
    {"t.bf16a", 30, 1, {9}, 0, 0, 0, 0},    {"t.q8_0a", 8, 2, {64, 3}, 0, 0, 0, 0},
    {"t.q4_0a", 2, 3, {32, 2, 2}, 0, 0, 0, 0}, {"t.q4_1a", 3, 2, {96, 2}, 0, 0, 0, 0},
    {"t.q6_ka", 14, 1, {256}, 0, 0, 0, 0},
};
#define N_SPECS (int)(sizeof g_specs / sizeof g_specs[0])
static uint32_t g_arr_u32[5];

// Fresh random bytes for each tensor and the f32 values they must convert to.
static void make_tensor_data(tspec *t) {
    t->n_el = 1;
    for (int d = 0; d < t->n_dims; d++) t->n_el *= (uint64_t)t->ne[d];
    free(t->raw);
    free(t->expect);
    uint64_t nb = t->n_el / 32;
    switch (t->ggml_type) {
    case 0: t->n_bytes = t->n_el * 4; break;
    case 1: case 30: t->n_bytes = t->n_el * 2; break;
    case 8: t->n_bytes = nb * 34; break;
    case 2: t->n_bytes = nb * 18; break;
    case 3: t->n_bytes = nb * 20; break;
    case 14: t->n_bytes = t->n_el / 256 * 210; break;
    }
    t->raw = malloc(t->n_bytes);
    t->expect = t->ggml_type == 14 ? NULL : malloc(t->n_el * sizeof(float));
    uint8_t *r = t->raw;
    float *e = t->expect;
    for (uint64_t i = 0; i < t->n_bytes; i++) r[i] = (uint8_t)rnd();
    switch (t->ggml_type) {
    case 0:
        for (uint64_t i = 0; i < t->n_el; i++) {
            e[i] = rnd_uniform(-3, 3);
            memcpy(r + 4 * i, &e[i], 4);
        }
        break;
    case 1:
        for (uint64_t i = 0; i < t->n_el; i++) {
            // mostly normals, every 7th a subnormal (exponent field 0)
            uint16_t h = i % 7 == 3 ? (uint16_t)(rnd() & 0x83ff) : rnd_f16(1, 30);
            memcpy(r + 2 * i, &h, 2);
            e[i] = f16_ref(h);
        }
        break;
    case 30:
        for (uint64_t i = 0; i < t->n_el; i++) {
            float f = rnd_uniform(-100, 100);
            uint32_t u;
            memcpy(&u, &f, 4);
            uint16_t h = (uint16_t)(u >> 16);
            u = (uint32_t)h << 16;  // bf16 is the top half of an f32
            memcpy(&e[i], &u, 4);
            memcpy(r + 2 * i, &h, 2);
        }
        break;
    case 8:  // block: f16 d, 32 × int8 q;   x = d * q
        for (uint64_t b = 0; b < nb; b++) {
            uint8_t *blk = r + b * 34;
            uint16_t d = rnd_f16(8, 18);
            memcpy(blk, &d, 2);
            for (int j = 0; j < 32; j++) e[b * 32 + j] = f16_ref(d) * (float)(int8_t)blk[2 + j];
        }
        break;
    case 2:  // block: f16 d, 16 bytes; low nibbles are elements 0..15, high 16..31; x = d(q-8)
        for (uint64_t b = 0; b < nb; b++) {
            uint8_t *blk = r + b * 18;
            uint16_t d = rnd_f16(8, 18);
            memcpy(blk, &d, 2);
            for (int j = 0; j < 16; j++) {
                e[b * 32 + j] = f16_ref(d) * (float)((blk[2 + j] & 15) - 8);
                e[b * 32 + 16 + j] = f16_ref(d) * (float)((blk[2 + j] >> 4) - 8);
            }
        }
        break;
    case 3:  // block: f16 d, f16 m, 16 bytes;   x = d q + m
        for (uint64_t b = 0; b < nb; b++) {
            uint8_t *blk = r + b * 20;
            uint16_t d = rnd_f16(8, 18), m = rnd_f16(8, 18);
            memcpy(blk, &d, 2);
            memcpy(blk + 2, &m, 2);
            for (int j = 0; j < 16; j++) {
                e[b * 32 + j] = f16_ref(d) * (float)(blk[4 + j] & 15) + f16_ref(m);
                e[b * 32 + 16 + j] = f16_ref(d) * (float)(blk[4 + j] >> 4) + f16_ref(m);
            }
        }
        break;
    }
}

static void kv_head(wbuf *b, const char *key, uint32_t type) {
    w_str(b, key);
    w_u32(b, type);
}

// A complete GGUF v3 file: llama metadata, keys of every value type (nested arrays included),
// the tensors of g_specs. alignment 0 = no general.alignment key (default 32). The last tensor
// ends exactly at the end of the file, so every truncation must be detected.
static void build_gguf(wbuf *b, gguf_layout *L, uint32_t alignment) {
    memset(L, 0, sizeof *L);
    b->n = 0;
    uint32_t al = alignment ? alignment : 32;
    w_bytes(b, "GGUF", 4);
    L->version = b->n;
    w_u32(b, 3);
    L->n_tensors = b->n;
    w_u64(b, N_SPECS);
    L->n_kv = b->n;
    w_u64(b, alignment ? 23 : 22);

    kv_head(b, "general.architecture", LI_GGUF_STRING);
    L->arch_val = b->n + 8;
    w_str(b, "llama");
    kv_head(b, "general.name", LI_GGUF_STRING);
    w_str(b, "synthetic test model");
    L->block_count_key = b->n + 8;
    kv_head(b, "llama.block_count", LI_GGUF_UINT32);
    w_u32(b, 2);
    kv_head(b, "llama.embedding_length", LI_GGUF_UINT32);
    w_u32(b, 64);
    kv_head(b, "llama.feed_forward_length", LI_GGUF_UINT64);
    w_u64(b, 96);
    kv_head(b, "llama.attention.head_count", LI_GGUF_INT32);
    L->head_count_val = b->n;
    w_u32(b, 4);
    kv_head(b, "llama.attention.head_count_kv", LI_GGUF_UINT16);
    uint16_t two = 2;
    w_bytes(b, &two, 2);
    kv_head(b, "llama.context_length", LI_GGUF_UINT32);
    w_u32(b, 128);
    kv_head(b, "llama.attention.layer_norm_rms_epsilon", LI_GGUF_FLOAT32);
    float eps = 1e-5f;
    w_bytes(b, &eps, 4);
    kv_head(b, "llama.rope.freq_base", LI_GGUF_FLOAT64);
    double theta = 500000.0;
    w_bytes(b, &theta, 8);
    L->key_u8 = b->n;
    kv_head(b, "test.u8", LI_GGUF_UINT8);
    w_u8(b, 200);
    L->key_i8 = b->n;
    kv_head(b, "test.i8", LI_GGUF_INT8);
    w_u8(b, (uint8_t)-5);
    kv_head(b, "test.i16", LI_GGUF_INT16);
    int16_t i16 = -300;
    w_bytes(b, &i16, 2);
    kv_head(b, "test.i64", LI_GGUF_INT64);
    w_u64(b, (uint64_t)-(INT64_C(1) << 40));
    kv_head(b, "test.u64", LI_GGUF_UINT64);
    w_u64(b, UINT64_C(1) << 40);
    kv_head(b, "test.bool", LI_GGUF_BOOL);
    w_u8(b, 1);
    kv_head(b, "test.arr_u32", LI_GGUF_ARRAY);
    w_u32(b, LI_GGUF_UINT32);
    L->arr_u32_n = b->n;
    w_u64(b, 5);
    for (int i = 0; i < 5; i++) w_u32(b, g_arr_u32[i] = (uint32_t)rnd());
    // [["a", "bc"], [u8 1, 2, 3], [[i32 7]]]
    kv_head(b, "test.nested", LI_GGUF_ARRAY);
    w_u32(b, LI_GGUF_ARRAY);
    w_u64(b, 3);
    w_u32(b, LI_GGUF_STRING);
    w_u64(b, 2);
    w_str(b, "a");
    w_str(b, "bc");
    w_u32(b, LI_GGUF_UINT8);
    w_u64(b, 3);
    w_u8(b, 1), w_u8(b, 2), w_u8(b, 3);
    w_u32(b, LI_GGUF_ARRAY);
    w_u64(b, 1);
    w_u32(b, LI_GGUF_INT32);
    w_u64(b, 1);
    w_u32(b, 7);
    kv_head(b, "tokenizer.ggml.tokens", LI_GGUF_ARRAY);
    w_u32(b, LI_GGUF_STRING);
    L->tokens_n = b->n;
    w_u64(b, 32);
    for (int i = 0; i < 32; i++) {
        char s[16];
        snprintf(s, sizeof s, "tok%d", i * 3);
        w_str(b, s);
    }
    kv_head(b, "test.after_nested", LI_GGUF_STRING);
    w_str(b, "still in step");
    kv_head(b, "tokenizer.ggml.bos_token_id", LI_GGUF_UINT32);
    w_u32(b, 1);
    kv_head(b, "tokenizer.ggml.eos_token_id", LI_GGUF_UINT32);
    w_u32(b, 2);
    if (alignment) {
        kv_head(b, "general.alignment", LI_GGUF_UINT32);
        L->align_val = b->n;
        w_u32(b, alignment);
    }

    uint64_t off = 0;
    for (int i = 0; i < N_SPECS; i++) {
        tspec *t = &g_specs[i];
        L->ti[i].name_len = b->n;
        L->ti[i].name = b->n + 8;
        w_str(b, t->name);
        L->ti[i].n_dims = b->n;
        w_u32(b, (uint32_t)t->n_dims);
        L->ti[i].ne0 = b->n;
        for (int d = 0; d < t->n_dims; d++) w_u64(b, (uint64_t)t->ne[d]);
        L->ti[i].ne1 = t->n_dims > 1 ? L->ti[i].ne0 + 8 : 0;
        L->ti[i].type = b->n;
        w_u32(b, t->ggml_type);
        L->ti[i].offset = b->n;
        w_u64(b, off);
        off += t->n_bytes;
        off = (off + al - 1) / al * al;
    }
    w_pad(b, al);
    L->data_start = b->n;
    for (int i = 0; i < N_SPECS; i++) {
        w_pad(b, al);
        w_bytes(b, g_specs[i].raw, g_specs[i].n_bytes);
    }
}

// Every tensor of an opened synthetic file against g_specs.
static void check_gguf_tensors(li_gguf *g, const uint8_t *base, uint32_t al) {
    CHECK(li_gguf_n_tensors(g) == N_SPECS, "n_tensors %lld", (long long)li_gguf_n_tensors(g));
    static const li_dtype want[] = {LI_DTYPE_F32,  LI_DTYPE_F16,  LI_DTYPE_BF16, LI_DTYPE_Q8_0,
                                    LI_DTYPE_Q4_0, LI_DTYPE_Q4_1, LI_DTYPE_COUNT};
    for (int i = 0; i < N_SPECS && i < li_gguf_n_tensors(g); i++) {
        tspec *s = &g_specs[i];
        const li_gguf_tensor *t = li_gguf_find_tensor(g, s->name);
        CHECK(t == li_gguf_tensor_at(g, i), "tensor %s lookup", s->name);
        if (!t) continue;
        CHECK(strcmp(t->name, s->name) == 0 && t->n_dims == s->n_dims && t->ne[0] == s->ne[0] &&
                  t->dtype == want[i] && t->ggml_type == s->ggml_type &&
                  t->n_elements == s->n_el && t->n_bytes == s->n_bytes,
              "tensor %s info (seed %llu)", s->name, (unsigned long long)g_seed);
        CHECK(memcmp(t->data, s->raw, s->n_bytes) == 0, "tensor %s bytes", s->name);
        if (base) CHECK((size_t)(t->data - base) % al == 0, "tensor %s data misaligned", s->name);
        float *f = malloc(s->n_el * sizeof(float));
        li_status st = li_gguf_tensor_to_f32(g, t, f);
        if (s->expect) {
            int bad = 0;
            for (uint64_t j = 0; j < s->n_el; j++) bad += !close_to(f[j], s->expect[j]);
            CHECK(st == LI_OK && bad == 0, "tensor %s: %d of %llu values differ, e.g. %g vs %g "
                  "(seed %llu)", s->name, bad, (unsigned long long)s->n_el, f[0], s->expect[0],
                  (unsigned long long)g_seed);
        } else {
            CHECK(st == LI_ERR_UNSUPPORTED && msg_has(s->name) && msg_has("Q6_K"),
                  "unsupported type: st %d msg %s", st, li_error_msg());
        }
        free(f);
    }
    CHECK(li_gguf_find_tensor(g, "no.such.tensor") == NULL, "absent tensor found");
}

static void check_gguf_metadata(li_gguf *g) {
    uint32_t u = 0;
    float f = 0;
    bool bl = false;
    const char *s;
    size_t len;
    li_gguf_type et;
    uint64_t n;
    const void *data;
    CHECK(li_gguf_get_u32(g, "test.u8", &u) == LI_OK && u == 200, "u8 %u", u);
    CHECK(li_gguf_get_u32(g, "llama.feed_forward_length", &u) == LI_OK && u == 96, "u64 %u", u);
    CHECK(li_gguf_get_u32(g, "llama.attention.head_count", &u) == LI_OK && u == 4, "i32 %u", u);
    CHECK(li_gguf_get_u32(g, "llama.attention.head_count_kv", &u) == LI_OK && u == 2, "u16");
    u = 77;
    CHECK(li_gguf_get_u32(g, "test.i8", &u) == LI_ERR_FORMAT && msg_has("test.i8") && u == 77,
          "negative i8 as u32: %s", li_error_msg());
    CHECK(li_gguf_get_u32(g, "test.i16", &u) == LI_ERR_FORMAT, "negative i16 as u32");
    CHECK(li_gguf_get_u32(g, "test.u64", &u) == LI_ERR_FORMAT && msg_has("test.u64"),
          "2^40 as u32: %s", li_error_msg());
    CHECK(li_gguf_get_u32(g, "test.i64", &u) == LI_ERR_FORMAT, "-2^40 as u32");
    CHECK(li_gguf_get_u32(g, "general.name", &u) == LI_ERR_FORMAT && msg_has("general.name"),
          "string as u32");
    CHECK(li_gguf_get_u32(g, "no.such.key", &u) == LI_ERR_INVALID_ARG && u == 77 &&
              msg_has("no.such.key"), "absent key");
    CHECK(!li_gguf_has(g, "no.such.key") && li_gguf_has(g, "test.nested"), "has");
    CHECK(li_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &f) == LI_OK &&
              f == 1e-5f, "f32 %g", f);
    CHECK(li_gguf_get_f32(g, "llama.rope.freq_base", &f) == LI_OK && f == 500000.0f, "f64");
    CHECK(li_gguf_get_f32(g, "test.u8", &f) == LI_ERR_FORMAT, "u8 as f32");
    CHECK(li_gguf_get_bool(g, "test.bool", &bl) == LI_OK && bl, "bool");
    CHECK(li_gguf_get_bool(g, "test.u8", &bl) == LI_ERR_FORMAT, "u8 as bool");
    CHECK(li_gguf_get_str(g, "general.architecture", &s, &len) == LI_OK && len == 5 &&
              memcmp(s, "llama", 5) == 0, "string");
    CHECK(li_gguf_get_str(g, "test.after_nested", &s, &len) == LI_OK && len == 13 &&
              memcmp(s, "still in step", 13) == 0, "key after the nested array");
    CHECK(li_gguf_get_arr(g, "test.arr_u32", &et, &n, &data) == LI_OK && et == LI_GGUF_UINT32 &&
              n == 5 && memcmp(data, g_arr_u32, sizeof g_arr_u32) == 0, "u32 array");
    CHECK(li_gguf_get_arr(g, "test.nested", &et, &n, &data) == LI_OK && et == LI_GGUF_ARRAY &&
              n == 3, "nested array header");
    CHECK(li_gguf_get_arr(g, "test.u8", &et, &n, &data) == LI_ERR_FORMAT, "u8 as array");
    for (int i = 0; i < 32; i++) {
        char want[16];
        snprintf(want, sizeof want, "tok%d", i * 3);
        CHECK(li_gguf_get_arr_str(g, "tokenizer.ggml.tokens", (uint64_t)i, &s, &len) == LI_OK &&
                  len == strlen(want) && memcmp(s, want, len) == 0, "token %d", i);
    }
    CHECK(li_gguf_get_arr_str(g, "tokenizer.ggml.tokens", 32, &s, &len) == LI_ERR_INVALID_ARG,
          "string index out of range");
    CHECK(li_gguf_get_arr_str(g, "test.arr_u32", 0, &s, &len) == LI_ERR_FORMAT,
          "u32 array as strings");
}

static void test_gguf_roundtrip(uint32_t alignment) {
    char name[64];
    snprintf(name, sizeof name, "gguf round trip, alignment %u%s", alignment ? alignment : 32,
             alignment ? "" : " (default)");
    TEST_BEGIN(name);
    for (int i = 0; i < N_SPECS; i++) make_tensor_data(&g_specs[i]);
    wbuf b = {0};
    gguf_layout L;
    build_gguf(&b, &L, alignment);
    uint32_t al = alignment ? alignment : 32;
    const char *path = tmp_path("roundtrip.gguf");
    write_file(path, b.p, b.n);

    li_gguf *g = NULL;
    li_status st = li_gguf_open(&g, path);
    CHECK(st == LI_OK, "open: %s", li_error_msg());
    if (g) {
        CHECK(strcmp(li_gguf_path(g), path) == 0, "path");
        check_gguf_metadata(g);
        check_gguf_tensors(g, NULL, al);
        li_hparams hp;
        st = li_gguf_hparams(g, &hp);
        CHECK(st == LI_OK, "hparams: %s", li_error_msg());
        CHECK(strcmp(hp.arch, "llama") == 0 && hp.n_layer == 2 && hp.n_embd == 64 &&
                  hp.n_ff == 96 && hp.n_head == 4 && hp.n_head_kv == 2 && hp.head_dim == 16 &&
                  hp.n_vocab == 32 && hp.n_ctx_train == 128 && hp.rms_eps == 1e-5f &&
                  hp.rope.theta == 500000.0f && hp.rope.n_dims == 16 &&
                  hp.rope.layout == LI_ROPE_GPTJ && hp.rope.max_pos == 128 &&
                  hp.tied_embeddings && hp.bos_id == 1 && hp.n_eos == 1 && hp.eos_ids[0] == 2 &&
                  strcmp(hp.name, "synthetic test model") == 0,
              "hparams values");
        li_gguf_close(g);
    }
    // The same bytes from memory, at an odd address when alignment is 1 (misaligned blocks).
    uint8_t *copy = malloc(b.n + 1);
    memcpy(copy + (alignment == 1), b.p, b.n);
    st = li_gguf_open_memory(&g, copy + (alignment == 1), b.n, "mem.gguf");
    CHECK(st == LI_OK, "open_memory: %s", li_error_msg());
    if (g) {
        check_gguf_tensors(g, copy + (alignment == 1), al);
        li_gguf_close(g);
    }
    free(copy);
    free(b.p);
    TEST_END();
}

// Every cut point of a valid file fails cleanly, naming the file.
static void test_gguf_truncation(void) {
    TEST_BEGIN("gguf truncated at every byte");
    wbuf b = {0};
    gguf_layout L;
    build_gguf(&b, &L, 0);
    int bad = 0;
    for (size_t cut = 0; cut < b.n; cut++) {
        uint8_t *p = malloc(cut ? cut : 1);  // exact size so ASan sees any over-read
        memcpy(p, b.p, cut);
        li_gguf *g = NULL;
        li_status st = li_gguf_open_memory(&g, p, cut, "cut.gguf");
        if (st == LI_OK || g || !msg_has("cut.gguf")) {
            if (bad++ < 5) fprintf(stderr, "  cut %zu: st %d msg %s\n", cut, st, li_error_msg());
        }
        li_gguf_close(g);
        free(p);
    }
    CHECK(bad == 0, "%d cut points not rejected", bad);
    li_gguf *gm = NULL;
    li_status sm = li_gguf_open(&gm, "/nonexistent/model.gguf");
    CHECK(sm == LI_ERR_IO && !gm && msg_has("/nonexistent/model.gguf"), "missing file: %s",
          li_error_msg());
    // A few through the mmap path.
    for (size_t cut = 0; cut < b.n; cut += b.n / 7) {
        const char *path = tmp_path("cut-file.gguf");
        write_file(path, b.p, cut);
        li_gguf *g = NULL;
        li_status st = li_gguf_open(&g, path);
        CHECK(st != LI_OK && g == NULL && msg_has("cut-file.gguf"), "file cut %zu: %s", cut,
              li_error_msg());
    }
    free(b.p);
    TEST_END();
}

typedef struct {
    const char *what;
    size_t pos;     // from the layout
    int width;      // bytes patched: 1, 2, 4 or 8
    uint64_t value;
    const char *expect;  // substring of the message
} gguf_lie;

static void test_gguf_lies(void) {
    TEST_BEGIN("gguf lying fields");
    wbuf b = {0};
    gguf_layout L;
    build_gguf(&b, &L, 64);
    const uint64_t big = UINT64_C(1) << 63;
    gguf_lie lies[] = {
        {"magic", 0, 1, 'X', "magic"},
        {"version 1", L.version, 4, 1, "version 1"},
        {"version 4", L.version, 4, 4, "version 4"},
        {"big-endian", L.version, 4, 0x03000000u, "big-endian"},
        {"n_tensors 2^63", L.n_tensors, 8, big, "tensors"},
        {"n_tensors 1000", L.n_tensors, 8, 1000, "tensor"},
        {"n_tensors fewer", L.n_tensors, 8, 3, ""},  // ok-looking, but then data misplaced?
        {"n_kv 2^63", L.n_kv, 8, big, "metadata"},
        {"n_kv + 1", L.n_kv, 8, 24, ""},
        {"key length 2^63", L.key_u8, 8, big, "metadata key"},
        {"key length 2^64-1", L.key_u8, 8, UINT64_MAX, "metadata key"},
        {"key length 0", L.key_u8, 8, 0, "empty metadata key"},
        {"value type 13", L.key_u8 + 8 + 7, 4, 13, "invalid value type 13"},
        {"value type huge", L.key_u8 + 8 + 7, 4, 0xffffffffu, "invalid value type"},
        {"array count 2^62", L.arr_u32_n, 8, UINT64_C(1) << 62, "test.arr_u32"},
        {"array count 2^31", L.arr_u32_n, 8, UINT64_C(1) << 31, "runs past the end"},
        {"array elem type 13", L.arr_u32_n - 4, 4, 13, "invalid array element type"},
        {"string array count", L.tokens_n, 8, 1u << 30, "tokenizer.ggml.tokens"},
        {"string array count 2^63", L.tokens_n, 8, big, "tokenizer.ggml.tokens"},
        {"alignment 0", L.align_val, 4, 0, "general.alignment"},
        {"alignment 3", L.align_val, 4, 3, "power of 2"},
        {"alignment type", L.align_val - 4, 4, LI_GGUF_INT32, "general.alignment"},
        {"tensor name length 2^63", L.ti[2].name_len, 8, big, "tensor name"},
        {"tensor name NUL", L.ti[2].name + 3, 1, 0, "NUL"},
        {"duplicate tensor name", L.ti[1].name + 3, 2, '3' | '2' << 8,
         "duplicate tensor name 't.f32_a'"},
        {"duplicate key", L.key_i8 + 8 + 5, 1, 'u', "duplicate metadata key 'test.u8'"},
        {"n_dims 0", L.ti[1].n_dims, 4, 0, "0 dimensions"},
        {"n_dims 5", L.ti[1].n_dims, 4, 5, "5 dimensions"},
        {"n_dims huge", L.ti[1].n_dims, 4, 0x80000000u, "dimensions"},
        {"ne 0", L.ti[1].ne0, 8, 0, "ne[0] = 0"},
        {"ne 2^63", L.ti[1].ne0, 8, big, "t.f16_a"},
        {"ne product overflow", L.ti[0].ne0, 8, UINT64_C(1) << 62, "t.f32_a"},
        {"ne1 lies (bigger)", L.ti[5].ne1, 8, 3, "before it"},
        {"ne1 lies (huge)", L.ti[5].ne1, 8, 1000, "t.q4_1a"},
        {"ne lies (last tensor)", L.ti[6].ne0, 8, 512, "past the end"},
        {"ne0 not whole blocks", L.ti[3].ne0, 8, 48, "block size 32"},
        {"type 4 (removed)", L.ti[0].type, 4, 4, "unknown ggml type 4"},
        {"type 1000", L.ti[0].type, 4, 1000, "unknown ggml type"},
        {"type lies (F32 for F16)", L.ti[1].type, 4, 0, "tensor 't.f16_a' before it"},
        {"type lies (Q8_0 for Q4_1)", L.ti[5].type, 4, 8, "tensor 't.q4_1a' before it"},
        {"type lies (F16 for F32)", L.ti[0].type, 4, 1, "tensor 't.f32_a' before it"},
        {"offset lies (aligned)", L.ti[3].offset, 8, 0, "t.q8_0a"},
        {"first offset not 0", L.ti[0].offset, 8, 64, "must be 0"},
        {"offset unaligned", L.ti[4].offset, 8, 65, "alignment"},
        {"offset past end", L.ti[6].offset, 8, 1u << 20, "'t.q6_ka' has data offset 1048576"},
        {"offset 2^64-64", L.ti[6].offset, 8, UINT64_MAX - 63, "t.q6_ka"},
        {"architecture", L.arch_val, 1, 'g', ""},
    };
    for (size_t i = 0; i < sizeof lies / sizeof lies[0]; i++) {
        gguf_lie *l = &lies[i];
        uint8_t *p = malloc(b.n);
        memcpy(p, b.p, b.n);
        if (l->width == 1) p[l->pos] = (uint8_t)l->value;
        else if (l->width == 2) memcpy(p + l->pos, &(uint16_t){(uint16_t)l->value}, 2);
        else if (l->width == 4) patch_u32(p, l->pos, (uint32_t)l->value);
        else patch_u64(p, l->pos, l->value);
        li_gguf *g = NULL;
        li_status st = li_gguf_open_memory(&g, p, b.n, "lie.gguf");
        if (l->expect[0]) {
            CHECK(st != LI_OK && !g && msg_has("lie.gguf") && msg_has(l->expect),
                  "%s: st %d, message '%s' (want '%s')", l->what, st, li_error_msg(), l->expect);
        } else if (st == LI_OK) {
            // Structurally fine lies: whatever opens must still be usable safely; hparams must
            // notice a wrong architecture.
            li_hparams hp;
            li_status hs = li_gguf_hparams(g, &hp);
            if (strcmp(l->what, "architecture") == 0)
                CHECK(hs == LI_ERR_UNSUPPORTED && msg_has("glama") && msg_has("lie.gguf"),
                      "architecture: %s", li_error_msg());
        } else {
            CHECK(msg_has("lie.gguf"), "%s: message '%s'", l->what, li_error_msg());
        }
        li_gguf_close(g);
        free(p);
    }
    free(b.p);
    TEST_END();
}

// Arrays nested deeper than the limit are refused; shallower ones are skipped correctly.
static void test_gguf_nesting(void) {
    TEST_BEGIN("gguf nested arrays");
    for (int depth = 1; depth <= 12; depth++) {
        wbuf b = {0};
        w_bytes(&b, "GGUF", 4);
        w_u32(&b, 3);
        w_u64(&b, 0);
        w_u64(&b, 2);
        kv_head(&b, "deep", LI_GGUF_ARRAY);
        for (int d = 1; d < depth; d++) {
            w_u32(&b, LI_GGUF_ARRAY);
            w_u64(&b, 1);
        }
        w_u32(&b, LI_GGUF_STRING);
        w_u64(&b, 1);
        w_str(&b, "leaf");
        kv_head(&b, "after", LI_GGUF_UINT32);
        w_u32(&b, 1234);
        li_gguf *g = NULL;
        li_status st = li_gguf_open_memory(&g, b.p, b.n, "deep.gguf");
        uint32_t v = 0;
        if (depth <= 8) {
            CHECK(st == LI_OK && li_gguf_get_u32(g, "after", &v) == LI_OK && v == 1234,
                  "depth %d: %s", depth, li_error_msg());
        } else {
            CHECK(st == LI_ERR_FORMAT && msg_has("nested") && msg_has("deep.gguf"),
                  "depth %d: %s", depth, li_error_msg());
        }
        li_gguf_close(g);
        free(b.p);
    }
    TEST_END();
}

// Random corruption: never a crash; either an error naming the file, or a file whose every
// readable tensor converts.
static void test_gguf_corruption(void) {
    TEST_BEGIN("gguf random corruption");
    wbuf b = {0};
    gguf_layout L;
    build_gguf(&b, &L, 0);
    int n_ok = 0, n_err = 0, bad_msg = 0;
    uint8_t *p = malloc(b.n);
    for (int it = 0; it < 3000; it++) {
        memcpy(p, b.p, b.n);
        int n_flips = 1 + (int)(rnd() % 4);
        for (int k = 0; k < n_flips; k++) {
            // Bias toward the header and infos, where the structure lives.
            size_t pos = rnd() % (rnd() & 1 ? L.data_start : b.n);
            switch (rnd() % 3) {
            case 0: p[pos] = (uint8_t)rnd(); break;
            case 1: p[pos] ^= (uint8_t)(1u << (rnd() % 8)); break;
            default:
                if (pos + 8 <= b.n) patch_u64(p, pos, rnd() & 1 ? UINT64_MAX : rnd());
            }
        }
        li_gguf *g = NULL;
        li_status st = li_gguf_open_memory(&g, p, b.n, "corrupt.gguf");
        if (st == LI_OK) {
            n_ok++;
            for (int64_t i = 0; i < li_gguf_n_tensors(g); i++) {
                const li_gguf_tensor *t = li_gguf_tensor_at(g, i);
                float *f = malloc(t->n_elements * sizeof(float));
                li_gguf_tensor_to_f32(g, t, f);
                free(f);
            }
            li_hparams hp;
            li_gguf_hparams(g, &hp);
            li_gguf_close(g);
        } else {
            n_err++;
            bad_msg += !msg_has("corrupt.gguf");
        }
    }
    free(p);
    free(b.p);
    CHECK(bad_msg == 0, "%d errors without the file name", bad_msg);
    CHECK(n_err > 1000, "only %d of 3000 corruptions detected (seed %llu)", n_err,
          (unsigned long long)g_seed);
    fprintf(stderr, "  gguf corruption: %d opened, %d rejected\n", n_ok, n_err);
    TEST_END();
}

// Interop: a file written by gguf-py, values from gguf.quants.dequantize.
static void test_gguf_python_fixture(void) {
    TEST_BEGIN("gguf written by gguf-py matches gguf.quants.dequantize");
    li_gguf *g = NULL;
    li_safetensors *ref = NULL;
    li_status st = li_gguf_open(&g, FIXTURES "/tiny.gguf");
    CHECK(st == LI_OK, "%s", li_error_msg());
    st = li_safetensors_open(&ref, FIXTURES "/tiny-gguf-expected.safetensors");
    CHECK(st == LI_OK, "%s", li_error_msg());
    if (g && ref) {
        CHECK(li_gguf_n_tensors(g) == 6, "n %lld", (long long)li_gguf_n_tensors(g));
        static const li_dtype want[] = {LI_DTYPE_F32,  LI_DTYPE_F16,  LI_DTYPE_BF16,
                                        LI_DTYPE_Q8_0, LI_DTYPE_Q4_0, LI_DTYPE_Q4_1};
        for (int64_t i = 0; i < li_gguf_n_tensors(g) && i < 6; i++) {
            const li_gguf_tensor *t = li_gguf_tensor_at(g, i);
            const li_st_tensor *r = li_safetensors_find(ref, t->name);
            CHECK(r && r->n_elements == t->n_elements && t->dtype == want[i], "%s", t->name);
            if (!r || r->n_elements != t->n_elements) continue;
            // GGUF ne[0] is innermost; safetensors shape outermost first.
            CHECK(t->ne[0] == r->shape[r->n_dims - 1] && t->ne[1] == r->shape[0],
                  "%s shape", t->name);
            float *a = malloc(t->n_elements * sizeof(float));
            float *e = malloc(t->n_elements * sizeof(float));
            CHECK(li_gguf_tensor_to_f32(g, t, a) == LI_OK, "%s", li_error_msg());
            CHECK(li_st_tensor_to_f32(r, e) == LI_OK, "%s", li_error_msg());
            int bad = 0;
            for (uint64_t j = 0; j < t->n_elements; j++) bad += !close_to(a[j], e[j]);
            CHECK(bad == 0, "%s: %d values differ", t->name, bad);
            free(a);
            free(e);
        }
        li_hparams hp;
        st = li_gguf_hparams(g, &hp);
        CHECK(st == LI_OK && hp.n_layer == 2 && hp.n_embd == 64 && hp.n_ff == 128 &&
                  hp.n_head == 4 && hp.n_head_kv == 2 && hp.n_vocab == 32 &&
                  hp.rope.n_dims == 16 && hp.rope.theta == 500000.0f && hp.tied_embeddings &&
                  strcmp(hp.name, "tiny test model") == 0,
              "hparams: %s", li_error_msg());
    }
    li_gguf_close(g);
    li_safetensors_close(ref);
    TEST_END();
}

// The real model. Reference values from the python gguf package 0.19 (gguf-py):
//   r = gguf.GGUFReader("models/SmolLM2-135M-Instruct.Q4_1.gguf"); t = <tensor by name>
//   f = gguf.quants.dequantize(t.data, t.tensor_type).reshape(-1); print(f[i]) for each i below
static void test_gguf_real_model(void) {
    const char *name = "gguf real model SmolLM2-135M Q4_1";
    if (!li_path_exists(REAL_MODEL)) {
        TEST_SKIP(name, "%s not present (make setup downloads it)", REAL_MODEL);
        return;
    }
    TEST_BEGIN(name);
    li_gguf *g = NULL;
    li_status st = li_gguf_open(&g, REAL_MODEL);
    CHECK(st == LI_OK, "%s", li_error_msg());
    if (g) {
        CHECK(li_gguf_n_tensors(g) == 272, "n_tensors %lld", (long long)li_gguf_n_tensors(g));
        li_hparams hp;
        st = li_gguf_hparams(g, &hp);
        CHECK(st == LI_OK, "%s", li_error_msg());
        CHECK(hp.n_layer == 30 && hp.n_embd == 576 && hp.n_head == 9 && hp.n_head_kv == 3 &&
                  hp.n_ff == 1536 && hp.n_vocab == 49152 && hp.rope.theta == 100000.0f &&
                  hp.head_dim == 64 && hp.rope.n_dims == 64 && hp.n_ctx_train == 8192 &&
                  hp.rms_eps == 1e-5f && hp.tied_embeddings && hp.bos_id == 1 &&
                  hp.n_eos == 1 && hp.eos_ids[0] == 2,
              "hparams L%d D%d H%d/%d F%d V%d theta %g", hp.n_layer, hp.n_embd, hp.n_head,
              hp.n_head_kv, hp.n_ff, hp.n_vocab, hp.rope.theta);
        static const struct {
            const char *tensor;
            li_dtype dtype;
            int64_t ne0, ne1;
            uint64_t idx[4];
            float want[4];
        } refs[] = {
            {"token_embd.weight", LI_DTYPE_Q8_0, 576, 49152, {0, 1, 100000, 28311551},
             {-0.106544495f, 0.032978058f, 0.08395767f, -0.04170227f}},
            {"blk.0.attn_q.weight", LI_DTYPE_Q4_1, 576, 576, {0, 17, 12345, 331775},
             {-0.09631348f, 0.2841797f, 0.12109375f, -0.25585938f}},
        };
        for (int r = 0; r < 2; r++) {
            const li_gguf_tensor *t = li_gguf_find_tensor(g, refs[r].tensor);
            CHECK(t && t->dtype == refs[r].dtype && t->ne[0] == refs[r].ne0 &&
                      t->ne[1] == refs[r].ne1, "%s", refs[r].tensor);
            if (!t) continue;
            float *f = malloc(t->n_elements * sizeof(float));
            CHECK(li_gguf_tensor_to_f32(g, t, f) == LI_OK, "%s", li_error_msg());
            for (int k = 0; k < 4; k++)
                CHECK(close_to(f[refs[r].idx[k]], refs[r].want[k]), "%s[%llu] = %.9g, want %.9g",
                      refs[r].tensor, (unsigned long long)refs[r].idx[k], f[refs[r].idx[k]],
                      refs[r].want[k]);
            CHECK(!test_has_nan(f, (long)t->n_elements), "NaN in %s", refs[r].tensor);
            free(f);
        }
        const char *s;
        size_t len;
        CHECK(li_gguf_get_arr_str(g, "tokenizer.ggml.tokens", 1234, &s, &len) == LI_OK &&
                  len == 6 && memcmp(s, "\xc4\xa0redu", 6) == 0, "token 1234");
        CHECK(li_gguf_get_str(g, "tokenizer.ggml.pre", &s, &len) == LI_OK && len == 6 &&
                  memcmp(s, "smollm", 6) == 0, "pre");
        li_gguf_close(g);
    }
    TEST_END();
}

static void test_gguf_hparams_bad(void) {
    TEST_BEGIN("gguf hparams: missing and impossible keys");
    wbuf b = {0};
    gguf_layout L;
    build_gguf(&b, &L, 0);
    li_gguf *g = NULL;
    li_hparams hp;
    // "llama.block_count" -> "llama.block_counx": the required key is gone.
    b.p[L.block_count_key + strlen("llama.block_count") - 1] = 'x';
    CHECK(li_gguf_open_memory(&g, b.p, b.n, "hp.gguf") == LI_OK, "%s", li_error_msg());
    if (g) {
        CHECK(li_gguf_hparams(g, &hp) == LI_ERR_FORMAT && msg_has("hp.gguf") &&
                  msg_has("llama.block_count"), "missing block_count: %s", li_error_msg());
        li_gguf_close(g);
    }
    b.p[L.block_count_key + strlen("llama.block_count") - 1] = 't';
    patch_u32(b.p, L.block_count_key + strlen("llama.block_count") + 4, 0);  // block_count 0
    CHECK(li_gguf_open_memory(&g, b.p, b.n, "hp.gguf") == LI_OK, "%s", li_error_msg());
    if (g) {
        CHECK(li_gguf_hparams(g, &hp) == LI_ERR_FORMAT && msg_has("llama.block_count"),
              "block_count 0: %s", li_error_msg());
        li_gguf_close(g);
    }
    patch_u32(b.p, L.block_count_key + strlen("llama.block_count") + 4, 2);
    static const struct {
        int32_t heads;
        const char *expect;
    } heads[] = {{5, "not a multiple of llama.attention.head_count = 5"},
                 {1, "llama.attention.head_count_kv = 2 does not divide"},
                 {-4, "llama.attention.head_count"},
                 {4, ""}};
    for (int i = 0; i < 4; i++) {
        patch_u32(b.p, L.head_count_val, (uint32_t)heads[i].heads);
        g = NULL;
        CHECK(li_gguf_open_memory(&g, b.p, b.n, "hp.gguf") == LI_OK, "%s", li_error_msg());
        if (!g) continue;
        li_status st = li_gguf_hparams(g, &hp);
        if (heads[i].expect[0])
            CHECK(st == LI_ERR_FORMAT && msg_has("hp.gguf") && msg_has(heads[i].expect),
                  "heads %d: %s", heads[i].heads, li_error_msg());
        else
            CHECK(st == LI_OK && hp.n_head == 4, "heads 4: %s", li_error_msg());
        li_gguf_close(g);
    }
    free(b.p);
    TEST_END();
}

// ---- safetensors ----------------------------------------------------------------------------

typedef struct {
    const char *name, *dtype;
    int n_dims;
    int64_t shape[3];
    int elem;  // bytes per element
} st_spec;

static const st_spec g_st[] = {
    {"w.f32", "F32", 2, {3, 5}, 4},   {"w.f16", "F16", 2, {2, 7}, 2},
    {"w.bf16", "BF16", 1, {9}, 2},    {"w.i64", "I64", 1, {3}, 8},
    {"w.u8", "U8", 3, {2, 1, 3}, 1},  {"w.scalar", "F32", 0, {0}, 4},
    {"w.empty", "F32", 2, {0, 4}, 4},
};
#define N_ST (int)(sizeof g_st / sizeof g_st[0])

typedef struct {
    wbuf file;
    float *expect[N_ST];
    uint8_t *raw[N_ST];
    size_t nbytes[N_ST];
    uint64_t numel[N_ST];
    size_t hdr_len;
} st_built;

static void st_free(st_built *s) {
    free(s->file.p);
    for (int i = 0; i < N_ST; i++) free(s->expect[i]), free(s->raw[i]);
}

// A safetensors file with fresh random values; header padded with spaces to 8 bytes like the
// reference writer. Data in reverse order of the header, to show order does not matter.
static void build_st(st_built *s) {
    memset(s, 0, sizeof *s);
    char hdr[4096];
    size_t off = 0, hl = 0, offs[N_ST];
    for (int i = N_ST - 1; i >= 0; i--) {
        uint64_t n = 1;
        for (int d = 0; d < g_st[i].n_dims; d++) n *= (uint64_t)g_st[i].shape[d];
        s->numel[i] = n;
        s->nbytes[i] = n * (size_t)g_st[i].elem;
        offs[i] = off;
        off += s->nbytes[i];
    }
    hl += (size_t)snprintf(hdr + hl, sizeof hdr - hl, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (int i = 0; i < N_ST; i++) {
        hl += (size_t)snprintf(hdr + hl, sizeof hdr - hl, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[",
                               g_st[i].name, g_st[i].dtype);
        for (int d = 0; d < g_st[i].n_dims; d++)
            hl += (size_t)snprintf(hdr + hl, sizeof hdr - hl, "%s%lld", d ? "," : "",
                                   (long long)g_st[i].shape[d]);
        hl += (size_t)snprintf(hdr + hl, sizeof hdr - hl, "],\"data_offsets\":[%zu,%zu]}",
                               offs[i], offs[i] + s->nbytes[i]);
    }
    hl += (size_t)snprintf(hdr + hl, sizeof hdr - hl, "}");
    while (hl % 8) hdr[hl++] = ' ';
    s->hdr_len = hl;
    w_u64(&s->file, hl);
    w_bytes(&s->file, hdr, hl);
    for (int i = 0; i < N_ST; i++) {
        s->raw[i] = malloc(s->nbytes[i] + 1);
        s->expect[i] = malloc(s->numel[i] * sizeof(float) + 4);
        for (uint64_t j = 0; j < s->numel[i]; j++) {
            uint8_t *p = s->raw[i] + j * (uint64_t)g_st[i].elem;
            if (strcmp(g_st[i].dtype, "F32") == 0) {
                s->expect[i][j] = rnd_uniform(-5, 5);
                memcpy(p, &s->expect[i][j], 4);
            } else if (strcmp(g_st[i].dtype, "F16") == 0) {
                uint16_t h = rnd_f16(1, 30);
                memcpy(p, &h, 2);
                s->expect[i][j] = f16_ref(h);
            } else if (strcmp(g_st[i].dtype, "BF16") == 0) {
                uint16_t h = (uint16_t)((rnd() & 0x8000) | (0x3c00 + rnd() % 0x800));
                uint32_t u = (uint32_t)h << 16;
                memcpy(p, &h, 2);
                memcpy(&s->expect[i][j], &u, 4);
            } else {
                for (int k = 0; k < g_st[i].elem; k++) p[k] = (uint8_t)rnd();
            }
        }
    }
    for (int i = N_ST - 1; i >= 0; i--) w_bytes(&s->file, s->raw[i], s->nbytes[i]);
}

static void check_st(li_safetensors *st, st_built *s, const char *file) {
    CHECK(li_safetensors_count(st) == N_ST, "count %lld", (long long)li_safetensors_count(st));
    for (int i = 0; i < N_ST; i++) {
        const li_st_tensor *t = li_safetensors_find(st, g_st[i].name);
        CHECK(t != NULL, "find %s", g_st[i].name);
        if (!t) continue;
        li_dtype want = strcmp(g_st[i].dtype, "F32") == 0    ? LI_DTYPE_F32
                        : strcmp(g_st[i].dtype, "F16") == 0  ? LI_DTYPE_F16
                        : strcmp(g_st[i].dtype, "BF16") == 0 ? LI_DTYPE_BF16
                                                             : LI_DTYPE_COUNT;
        CHECK(t->dtype == want && strcmp(t->dtype_str, g_st[i].dtype) == 0 &&
                  t->n_dims == g_st[i].n_dims && t->n_elements == s->numel[i] &&
                  t->n_bytes == s->nbytes[i] && strcmp(t->file, file) == 0,
              "%s info", g_st[i].name);
        for (int d = 0; d < t->n_dims && d < 3; d++)
            CHECK(t->shape[d] == g_st[i].shape[d], "%s shape[%d]", g_st[i].name, d);
        CHECK(s->nbytes[i] == 0 || memcmp(t->data, s->raw[i], s->nbytes[i]) == 0, "%s bytes",
              g_st[i].name);
        float *f = malloc(t->n_elements * sizeof(float) + 4);
        li_status rc = li_st_tensor_to_f32(t, f);
        if (want == LI_DTYPE_COUNT) {
            CHECK(rc == LI_ERR_UNSUPPORTED && msg_has(g_st[i].name) && msg_has(g_st[i].dtype) &&
                      msg_has(file), "unsupported %s: %s", g_st[i].name, li_error_msg());
        } else {
            CHECK(rc == LI_OK && (t->n_elements == 0 ||
                                  memcmp(f, s->expect[i], t->n_elements * sizeof(float)) == 0),
                  "%s values (seed %llu)", g_st[i].name, (unsigned long long)g_seed);
        }
        free(f);
    }
    CHECK(li_safetensors_find(st, "__metadata__") == NULL, "metadata is not a tensor");
    CHECK(li_safetensors_find(st, "nope") == NULL, "absent tensor");
    // Ordered by data offset within the file.
    for (int64_t i = 1; i < li_safetensors_count(st); i++)
        CHECK(li_safetensors_at(st, i - 1)->data <= li_safetensors_at(st, i)->data, "order");
}

static void test_st_roundtrip(void) {
    TEST_BEGIN("safetensors round trip, every dtype");
    st_built s;
    build_st(&s);
    const char *path = tmp_path("rt.safetensors");
    write_file(path, s.file.p, s.file.n);
    li_safetensors *st = NULL;
    CHECK(li_safetensors_open(&st, path) == LI_OK, "%s", li_error_msg());
    if (st) check_st(st, &s, path);
    li_safetensors_close(st);
    st = NULL;
    CHECK(li_safetensors_open_memory(&st, s.file.p, s.file.n, "mem.safetensors") == LI_OK, "%s",
          li_error_msg());
    if (st) check_st(st, &s, "mem.safetensors");
    li_safetensors_close(st);
    // A directory holding model.safetensors.
    char dir[512];
    snprintf(dir, sizeof dir, "%s/single", g_tmp);
    mkdir(dir, 0755);
    char p2[600];
    snprintf(p2, sizeof p2, "%s/model.safetensors", dir);
    write_file(p2, s.file.p, s.file.n);
    st = NULL;
    CHECK(li_safetensors_open(&st, dir) == LI_OK, "dir: %s", li_error_msg());
    if (st) check_st(st, &s, p2);
    li_safetensors_close(st);
    st_free(&s);
    TEST_END();
}

static float st_fixture_value(int i, float scale, int offset) {
    return (float)((i * 7) % 13 - offset) * scale;  // as in gen_format_fixtures.py st_values
}

static void check_sharded_fixture(li_safetensors *st) {
    CHECK(li_safetensors_count(st) == 6, "count %lld", (long long)li_safetensors_count(st));
    static const struct {
        const char *name, *shard, *dtype;
        int n_dims;
        int64_t s0, s1;
        float scale;
        int offset;
    } want[] = {
        {"model.embed_tokens.weight", "model-00001-of-00002", "F32", 2, 6, 4, 0.125f, 6},
        {"model.layers.0.mlp.up_proj.weight", "model-00001-of-00002", "F16", 2, 3, 5, 0.25f, 3},
        {"model.layers.0.position_ids", "model-00001-of-00002", "I64", 1, 3, 0, 0, 0},
        {"model.norm.weight", "model-00002-of-00002", "F32", 1, 4, 0, 0.5f, 2},
        {"lm_head.weight", "model-00002-of-00002", "F32", 2, 2, 4, 1.0f, 5},
        {"model.scalar", "model-00002-of-00002", "F32", 0, 0, 0, 0, 0},
    };
    for (int i = 0; i < 6; i++) {
        const li_st_tensor *t = li_safetensors_find(st, want[i].name);
        CHECK(t && strstr(t->file, want[i].shard) && strcmp(t->dtype_str, want[i].dtype) == 0 &&
                  t->n_dims == want[i].n_dims && (t->n_dims < 1 || t->shape[0] == want[i].s0) &&
                  (t->n_dims < 2 || t->shape[1] == want[i].s1),
              "%s", want[i].name);
        if (!t) continue;
        float f[32];
        if (strcmp(want[i].dtype, "I64") == 0) {
            int64_t v[3];
            memcpy(v, t->data, sizeof v);
            CHECK(v[0] == 0 && v[1] == 1 && v[2] == 2, "position ids");
            CHECK(li_st_tensor_to_f32(t, f) == LI_ERR_UNSUPPORTED, "I64 to f32");
            continue;
        }
        CHECK(t->n_elements <= 32 && li_st_tensor_to_f32(t, f) == LI_OK, "%s", li_error_msg());
        if (t->n_dims == 0) {
            CHECK(t->n_elements == 1 && f[0] == 2.5f, "scalar %g", f[0]);
            continue;
        }
        for (uint64_t j = 0; j < t->n_elements && j < 32; j++)
            CHECK(f[j] == st_fixture_value((int)j, want[i].scale, want[i].offset),
                  "%s[%llu] = %g", want[i].name, (unsigned long long)j, f[j]);
    }
}

// Interop: shards + index written by the python safetensors package.
static void test_st_python_sharded(void) {
    TEST_BEGIN("safetensors sharded directory written by python safetensors");
    li_safetensors *st = NULL;
    CHECK(li_safetensors_open(&st, FIXTURES "/st-sharded") == LI_OK, "%s", li_error_msg());
    if (st) check_sharded_fixture(st);
    li_safetensors_close(st);
    st = NULL;
    CHECK(li_safetensors_open(&st, FIXTURES "/st-sharded/model.safetensors.index.json") == LI_OK,
          "index path: %s", li_error_msg());
    if (st) check_sharded_fixture(st);
    li_safetensors_close(st);
    TEST_END();
}

static void test_st_truncation(void) {
    TEST_BEGIN("safetensors truncated at every byte");
    st_built s;
    build_st(&s);
    int bad = 0, n_ok = 0;
    // The data section ends with w.f32's bytes (reverse order), so every cut loses data.
    for (size_t cut = 0; cut < s.file.n; cut++) {
        uint8_t *p = malloc(cut ? cut : 1);
        memcpy(p, s.file.p, cut);
        li_safetensors *st = NULL;
        li_status rc = li_safetensors_open_memory(&st, p, cut, "cut.safetensors");
        if (rc == LI_OK) n_ok++;
        if (rc == LI_OK || st || !msg_has("cut.safetensors")) {
            if (bad++ < 5) fprintf(stderr, "  cut %zu: st %d msg %s\n", cut, rc, li_error_msg());
        }
        li_safetensors_close(st);
        free(p);
    }
    CHECK(bad == 0, "%d cut points not rejected", bad);
    st_free(&s);
    TEST_END();
}

static void test_st_lies(void) {
    TEST_BEGIN("safetensors lying headers");
    static const struct {
        const char *header;
        size_t data_len;
        const char *expect;
    } cases[] = {
        {"[1,2]", 0, "must be a JSON object"},
        {"{\"a\":", 0, "invalid JSON"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"a\":{}}", 8,
         "invalid JSON"},  // duplicate key
        {"{\"a\":5}", 0, "'a' must be an object"},
        {"{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "'dtype'"},
        {"{\"a\":{\"dtype\":7,\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "'dtype'"},
        {"{\"a\":{\"dtype\":\"Q9\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":\"2\",\"data_offsets\":[0,8]}}", 8, "'shape'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "shape[0]"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8, "shape[0]"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,\"x\"],\"data_offsets\":[0,8]}}", 8, "shape[1]"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
         "9 dimensions"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4],\"data_offsets\":[0,4]}}",
         4, "overflows"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[9223372036854775807,2],\"data_offsets\":[0,4]}}", 4,
         "overflows"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2305843009213693952],\"data_offsets\":[0,4]}}", 4,
         "whole number of bytes"},  // 2^61 × 32 bits overflows
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, "data_offsets"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,16]}}", 16,
         "data_offsets"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, "not inside"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}}", 8, "data_offsets[0]"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,16]}}", 8, "not inside"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,9223372036854775807]}}", 8,
         "not inside"},
        {"{\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "need 4"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "need 12"},
        {"{\"a\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", 8,
         "whole number of bytes"},
        {"{\"\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "empty name"},
        {"{\"__metadata__\":[1]}", 0, "__metadata__"},
        {"{\"__metadata__\":{\"k\":1}}", 0, "__metadata__"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        wbuf b = {0};
        size_t hl = strlen(cases[i].header);
        w_u64(&b, hl);
        w_bytes(&b, cases[i].header, hl);
        for (size_t j = 0; j < cases[i].data_len; j++) w_u8(&b, (uint8_t)rnd());
        li_safetensors *st = NULL;
        li_status rc = li_safetensors_open_memory(&st, b.p, b.n, "lie.safetensors");
        CHECK(rc == LI_ERR_FORMAT && !st && msg_has("lie.safetensors") &&
                  msg_has(cases[i].expect), "case %zu: st %d msg '%s' (want '%s')", i, rc,
              li_error_msg(), cases[i].expect);
        li_safetensors_close(st);
        free(b.p);
    }
    // Header lengths that lie.
    static const uint64_t lens[] = {UINT64_C(1) << 63, UINT64_MAX, 200u << 20, 41, 9};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        uint8_t buf[48] = {0};
        memcpy(buf, &lens[i], 8);
        memcpy(buf + 8, "{}      ", 8);
        li_safetensors *st = NULL;
        li_status rc = li_safetensors_open_memory(&st, buf, sizeof buf, "len.safetensors");
        CHECK(rc == LI_ERR_FORMAT && msg_has("len.safetensors") &&
                  (msg_has("header length") || msg_has("invalid JSON")),
              "header length %llu: %s", (unsigned long long)lens[i], li_error_msg());
        li_safetensors_close(st);
    }
    // An empty header is a valid file with no tensors.
    uint8_t empty[16] = {8};
    memcpy(empty + 8, "{}      ", 8);
    li_safetensors *st = NULL;
    CHECK(li_safetensors_open_memory(&st, empty, 16, "empty.safetensors") == LI_OK &&
              li_safetensors_count(st) == 0, "empty header: %s", li_error_msg());
    li_safetensors_close(st);
    TEST_END();
}

static void test_st_corruption(void) {
    TEST_BEGIN("safetensors random corruption");
    st_built s;
    build_st(&s);
    uint8_t *p = malloc(s.file.n);
    int n_err = 0, bad_msg = 0;
    static const char junk[] = "{}[],:\"-019eE.\\ ";
    for (int it = 0; it < 3000; it++) {
        memcpy(p, s.file.p, s.file.n);
        int n_flips = 1 + (int)(rnd() % 3);
        for (int k = 0; k < n_flips; k++) {
            size_t pos = rnd() % (8 + s.hdr_len);  // header bytes: where parsing happens
            p[pos] = rnd() & 1 ? (uint8_t)junk[rnd() % (sizeof junk - 1)] : (uint8_t)rnd();
        }
        li_safetensors *st = NULL;
        if (li_safetensors_open_memory(&st, p, s.file.n, "corrupt.safetensors") == LI_OK) {
            for (int64_t i = 0; i < li_safetensors_count(st); i++) {
                const li_st_tensor *t = li_safetensors_at(st, i);
                float *f = malloc(t->n_elements * sizeof(float) + 4);
                li_st_tensor_to_f32(t, f);
                free(f);
            }
            li_safetensors_close(st);
        } else {
            n_err++;
            bad_msg += !msg_has("corrupt.safetensors");
        }
    }
    free(p);
    st_free(&s);
    CHECK(bad_msg == 0, "%d errors without the file name", bad_msg);
    CHECK(n_err > 1500, "only %d of 3000 corruptions detected (seed %llu)", n_err,
          (unsigned long long)g_seed);
    fprintf(stderr, "  safetensors corruption: %d opened, %d rejected\n", 3000 - n_err, n_err);
    TEST_END();
}

// A minimal valid shard holding the named F32 tensors of 2 elements each.
static void write_shard(const char *path, const char *const *names, int n) {
    char hdr[1024];
    size_t hl = 0;
    hl += (size_t)snprintf(hdr, sizeof hdr, "{");
    for (int i = 0; i < n; i++)
        hl += (size_t)snprintf(hdr + hl, sizeof hdr - hl,
                               "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[2],"
                               "\"data_offsets\":[%d,%d]}",
                               i ? "," : "", names[i], 8 * i, 8 * i + 8);
    hl += (size_t)snprintf(hdr + hl, sizeof hdr - hl, "}");
    wbuf b = {0};
    w_u64(&b, hl);
    w_bytes(&b, hdr, hl);
    for (int i = 0; i < 2 * n; i++) {
        float f = rnd_uniform(-1, 1);
        w_bytes(&b, &f, 4);
    }
    write_file(path, b.p, b.n);
    free(b.p);
}

static void test_st_index(void) {
    TEST_BEGIN("safetensors index: good, missing shard, traversal, wrong shard");
    char dir[512], p[700];
    snprintf(dir, sizeof dir, "%s/sharded", g_tmp);
    mkdir(dir, 0755);
    const char *n1[] = {"a.weight", "b.weight"}, *n2[] = {"c.weight"};
    snprintf(p, sizeof p, "%s/s1.safetensors", dir);
    write_shard(p, n1, 2);
    snprintf(p, sizeof p, "%s/s2.safetensors", dir);
    write_shard(p, n2, 1);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    static const struct {
        const char *index;
        li_status st;
        const char *expect;
    } cases[] = {
        {"{\"weight_map\":{\"a.weight\":\"s1.safetensors\",\"b.weight\":\"s1.safetensors\","
         "\"c.weight\":\"s2.safetensors\"}}", LI_OK, ""},
        {"{\"weight_map\":{\"a.weight\":\"s1.safetensors\",\"c.weight\":\"s3.safetensors\"}}",
         LI_ERR_IO, "s3.safetensors"},
        {"{\"weight_map\":{\"a.weight\":\"../s1.safetensors\"}}", LI_ERR_FORMAT,
         "../s1.safetensors"},
        {"{\"weight_map\":{\"a.weight\":\"sub/s1.safetensors\"}}", LI_ERR_FORMAT, "sub/s1"},
        {"{\"weight_map\":{\"a.weight\":\"/etc/passwd\"}}", LI_ERR_FORMAT, "/etc/passwd"},
        {"{\"weight_map\":{\"a.weight\":\"..\"}}", LI_ERR_FORMAT, "'..'"},
        {"{\"weight_map\":{\"a.weight\":\"\"}}", LI_ERR_FORMAT, "a.weight"},
        {"{\"weight_map\":{\"a.weight\":\"s2.safetensors\",\"c.weight\":\"s2.safetensors\"}}",
         LI_ERR_FORMAT, "'a.weight' is listed in shard"},
        {"{\"weight_map\":{\"a.weight\":\"s1.safetensors\",\"x.weight\":\"s1.safetensors\"}}",
         LI_ERR_FORMAT, "'x.weight'"},
        {"{\"weight_map\":{\"a.weight\":5}}", LI_ERR_FORMAT, "a.weight"},
        {"{\"metadata\":{}}", LI_ERR_FORMAT, "weight_map"},
        {"{\"weight_map\":{}}", LI_ERR_FORMAT, "weight_map"},
        {"[\"weight_map\"]", LI_ERR_FORMAT, "weight_map"},
        {"{\"weight_map\":{\"a.weight\":\"s1.safetensors\"", LI_ERR_FORMAT, "invalid JSON"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_file(p, cases[i].index, strlen(cases[i].index));
        li_safetensors *st = NULL;
        li_status rc = li_safetensors_open(&st, dir);
        if (cases[i].st == LI_OK) {
            CHECK(rc == LI_OK && li_safetensors_count(st) == 3 &&
                      strstr(li_safetensors_find(st, "c.weight")->file, "s2.safetensors") &&
                      strstr(li_safetensors_find(st, "b.weight")->file, "s1.safetensors"),
                  "good index: %s", li_error_msg());
        } else {
            CHECK(rc == cases[i].st && !st && msg_has("model.safetensors.index.json") &&
                      msg_has(cases[i].expect), "case %zu: st %d msg '%s' (want '%s')", i, rc,
                  li_error_msg(), cases[i].expect);
        }
        li_safetensors_close(st);
    }
    // The same tensor in two shards.
    const char *n3[] = {"a.weight"};
    snprintf(p, sizeof p, "%s/s3.safetensors", dir);
    write_shard(p, n3, 1);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    const char *dup = "{\"weight_map\":{\"a.weight\":\"s1.safetensors\","
                      "\"q.weight\":\"s3.safetensors\"}}";
    write_file(p, dup, strlen(dup));
    li_safetensors *st = NULL;
    li_status rc = li_safetensors_open(&st, dir);
    CHECK(rc == LI_ERR_FORMAT && msg_has("'a.weight' is also in") && msg_has("s3.safetensors"),
          "duplicate across shards: %s", li_error_msg());
    li_safetensors_close(st);
    // A shard that is itself corrupt names the shard.
    snprintf(p, sizeof p, "%s/s3.safetensors", dir);
    write_file(p, "\x10\0\0\0\0\0\0\0{\"a\":", 13);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    const char *idx3 = "{\"weight_map\":{\"a\":\"s3.safetensors\"}}";
    write_file(p, idx3, strlen(idx3));
    st = NULL;
    rc = li_safetensors_open(&st, dir);
    CHECK(rc == LI_ERR_FORMAT && msg_has("s3.safetensors"), "corrupt shard: %s", li_error_msg());
    li_safetensors_close(st);
    // A directory with neither file.
    snprintf(p, sizeof p, "%s/emptydir", g_tmp);
    mkdir(p, 0755);
    st = NULL;
    rc = li_safetensors_open(&st, p);
    CHECK(rc == LI_ERR_IO && msg_has("emptydir") && msg_has("model.safetensors"),
          "empty dir: %s", li_error_msg());
    st = NULL;
    rc = li_safetensors_open(&st, "/nonexistent/x.safetensors");
    CHECK(rc != LI_OK && !st && msg_has("/nonexistent/x.safetensors"), "missing file: %s",
          li_error_msg());
    TEST_END();
}

// ---- config.json ----------------------------------------------------------------------------

typedef struct {
    const char *key, *value;
} kvp;

// JSON object from pairs; `over` replaces (or with value NULL removes) one key, `extra` adds one.
static char *json_from(const kvp *pairs, int n, const char *over_key, const char *over_value,
                       const char *extra) {
    static char buf[8192];
    size_t l = 0;
    l += (size_t)snprintf(buf + l, sizeof buf - l, "{\n");
    int first = 1;
    for (int i = 0; i < n; i++) {
        const char *v = pairs[i].value;
        if (over_key && strcmp(pairs[i].key, over_key) == 0) v = over_value;
        if (!v) continue;
        l += (size_t)snprintf(buf + l, sizeof buf - l, "%s  \"%s\": %s", first ? "" : ",\n",
                              pairs[i].key, v);
        first = 0;
    }
    if (extra) l += (size_t)snprintf(buf + l, sizeof buf - l, ",\n  %s", extra);
    snprintf(buf + l, sizeof buf - l, "\n}\n");
    return buf;
}

static const kvp llama_cfg[] = {
    {"architectures", "[\"LlamaForCausalLM\"]"},
    {"model_type", "\"llama\""},
    {"hidden_size", "576"},
    {"intermediate_size", "1536"},
    {"num_hidden_layers", "30"},
    {"num_attention_heads", "9"},
    {"num_key_value_heads", "3"},
    {"vocab_size", "49152"},
    {"max_position_embeddings", "8192"},
    {"rms_norm_eps", "1e-05"},
    {"rope_theta", "100000"},
    {"tie_word_embeddings", "true"},
    {"bos_token_id", "1"},
    {"eos_token_id", "2"},
    {"torch_dtype", "\"bfloat16\""},
    {"rope_scaling", "null"},
    {"attention_bias", "false"},
};
#define N_LLAMA (int)(sizeof llama_cfg / sizeof llama_cfg[0])

static li_status load_cfg_text(const char *text, const char *file, li_hparams *hp) {
    const char *path = tmp_path(file);
    write_file(path, text, strlen(text));
    return li_hf_config_load(hp, path);
}

static void test_config_variants(void) {
    TEST_BEGIN("config.json: llama, every rope_scaling type, llada");
    li_hparams hp;
    li_status st = load_cfg_text(json_from(llama_cfg, N_LLAMA, NULL, NULL, NULL), "smol.json",
                                 &hp);
    CHECK(st == LI_OK, "%s", li_error_msg());
    CHECK(strcmp(hp.arch, "llama") == 0 && hp.n_embd == 576 && hp.n_ff == 1536 &&
              hp.n_layer == 30 && hp.n_head == 9 && hp.n_head_kv == 3 && hp.head_dim == 64 &&
              hp.n_vocab == 49152 && hp.n_ctx_train == 8192 && hp.rms_eps == 1e-5f &&
              hp.rope.theta == 100000.0f && hp.tied_embeddings && hp.bos_id == 1 &&
              hp.n_eos == 1 && hp.eos_ids[0] == 2 && strcmp(hp.torch_dtype, "bfloat16") == 0 &&
              hp.rope.scaling == LI_ROPE_SCALING_NONE && hp.rope.layout == LI_ROPE_NEOX &&
              hp.rope.n_dims == 64 && hp.rope.max_pos == 8192 && !hp.attention_bias,
          "smollm2 values");

    // Defaults when optional fields are absent.
    static const kvp minimal[] = {{"model_type", "\"llama\""}, {"hidden_size", "256"},
                                  {"intermediate_size", "512"}, {"num_hidden_layers", "2"},
                                  {"num_attention_heads", "8"}, {"vocab_size", "1000"}};
    st = load_cfg_text(json_from(minimal, 6, NULL, NULL, NULL), "minimal.json", &hp);
    CHECK(st == LI_OK && hp.n_head_kv == 8 && hp.head_dim == 32 && hp.n_ctx_train == 2048 &&
              hp.rms_eps == 1e-6f && hp.rope.theta == 10000.0f && !hp.tied_embeddings &&
              hp.bos_id == -1 && hp.n_eos == 0 && hp.torch_dtype[0] == 0,
          "defaults: %s", li_error_msg());

    // Fresh random shapes round-trip.
    for (int it = 0; it < 20; it++) {
        int hkv = 1 + (int)(rnd() % 8), group = 1 + (int)(rnd() % 4);
        int dh = 2 * (1 + (int)(rnd() % 64));
        int h = hkv * group, d = h * dh, f = 1 + (int)(rnd() % 20000), l = 1 + (int)(rnd() % 80);
        int v = 1 + (int)(rnd() % 200000), ctx = 1 + (int)(rnd() % 200000);
        char vals[8][32];
        snprintf(vals[0], 32, "%d", d), snprintf(vals[1], 32, "%d", f);
        snprintf(vals[2], 32, "%d", l), snprintf(vals[3], 32, "%d", h);
        snprintf(vals[4], 32, "%d", hkv), snprintf(vals[5], 32, "%d", v);
        snprintf(vals[6], 32, "%d", ctx);
        kvp p[] = {{"model_type", "\"llama\""}, {"hidden_size", vals[0]},
                   {"intermediate_size", vals[1]}, {"num_hidden_layers", vals[2]},
                   {"num_attention_heads", vals[3]}, {"num_key_value_heads", vals[4]},
                   {"vocab_size", vals[5]}, {"max_position_embeddings", vals[6]}};
        st = load_cfg_text(json_from(p, 8, NULL, NULL, NULL), "random.json", &hp);
        CHECK(st == LI_OK && hp.n_embd == d && hp.n_ff == f && hp.n_layer == l &&
                  hp.n_head == h && hp.n_head_kv == hkv && hp.head_dim == dh &&
                  hp.n_vocab == v && hp.n_ctx_train == ctx,
              "random shape D%d H%d/%d (seed %llu): %s", d, h, hkv, (unsigned long long)g_seed,
              li_error_msg());
    }

    // Llama 3.1 8B's rope_scaling and eos list.
    st = load_cfg_text(json_from(llama_cfg, N_LLAMA, "rope_scaling",
                                 "{\"factor\": 8.0, \"low_freq_factor\": 1.0, "
                                 "\"high_freq_factor\": 4.0, "
                                 "\"original_max_position_embeddings\": 8192, "
                                 "\"rope_type\": \"llama3\"}",
                                 "\"head_dim\": 128, \"unused\": {\"x\": [1, 2]}"),
                       "llama3.json", &hp);
    CHECK(st == LI_OK && hp.rope.scaling == LI_ROPE_SCALING_LLAMA3 && hp.rope.factor == 8.0f &&
              hp.rope.low_freq_factor == 1.0f && hp.rope.high_freq_factor == 4.0f &&
              hp.rope.original_max_pos == 8192 && hp.head_dim == 128 && hp.rope.n_dims == 128,
          "llama3: %s", li_error_msg());
    st = load_cfg_text(json_from(llama_cfg, N_LLAMA, "eos_token_id", "[128001, 128008, 128009]",
                                 NULL), "eos.json", &hp);
    CHECK(st == LI_ERR_FORMAT && msg_has("eos_token_id"), "eos beyond vocab: %s", li_error_msg());
    st = load_cfg_text(json_from(llama_cfg, N_LLAMA, "eos_token_id", "[2, 0, 49151]", NULL),
                       "eos.json", &hp);
    CHECK(st == LI_OK && hp.n_eos == 3 && hp.eos_ids[0] == 2 && hp.eos_ids[1] == 0 &&
              hp.eos_ids[2] == 49151, "eos list: %s", li_error_msg());
    st = load_cfg_text(json_from(llama_cfg, N_LLAMA, "rope_scaling",
                                 "{\"type\": \"linear\", \"factor\": 4}", NULL),
                       "linear.json", &hp);
    CHECK(st == LI_OK && hp.rope.scaling == LI_ROPE_SCALING_LINEAR && hp.rope.factor == 4.0f,
          "linear: %s", li_error_msg());
    st = load_cfg_text(json_from(llama_cfg, N_LLAMA, "rope_scaling",
                                 "{\"rope_type\": \"yarn\", \"factor\": 4.0, "
                                 "\"original_max_position_embeddings\": 2048, \"beta_fast\": 16, "
                                 "\"beta_slow\": 2, \"attention_factor\": 1.25, \"mscale\": 0.5, "
                                 "\"mscale_all_dim\": 0.75}", NULL), "yarn.json", &hp);
    CHECK(st == LI_OK && hp.rope.scaling == LI_ROPE_SCALING_YARN && hp.rope.factor == 4.0f &&
              hp.rope.original_max_pos == 2048 && hp.rope.beta_fast == 16.0f &&
              hp.rope.beta_slow == 2.0f && hp.rope.attention_factor == 1.25f &&
              hp.rope.mscale == 0.5f && hp.rope.mscale_all_dim == 0.75f,
          "yarn: %s", li_error_msg());
    st = load_cfg_text(json_from(llama_cfg, N_LLAMA, "rope_scaling",
                                 "{\"rope_type\": \"yarn\", \"factor\": 2}", NULL),
                       "yarn2.json", &hp);
    CHECK(st == LI_OK && hp.rope.beta_fast == 32.0f && hp.rope.beta_slow == 1.0f &&
              hp.rope.attention_factor == 0 && hp.rope.original_max_pos == 8192,
          "yarn defaults: %s", li_error_msg());
    st = load_cfg_text(json_from(llama_cfg, N_LLAMA, "rope_scaling",
                                 "{\"rope_type\": \"default\"}", NULL), "default.json", &hp);
    CHECK(st == LI_OK && hp.rope.scaling == LI_ROPE_SCALING_NONE, "default: %s", li_error_msg());
    st = load_cfg_text(json_from(llama_cfg, N_LLAMA, "rope_scaling", NULL,
                                 "\"rope_parameters\": {\"rope_type\": \"linear\", "
                                 "\"factor\": 2.0, \"rope_theta\": 500000.0}"),
                       "rope_parameters.json", &hp);
    CHECK(st == LI_OK && hp.rope.scaling == LI_ROPE_SCALING_LINEAR && hp.rope.factor == 2.0f &&
              hp.rope.theta == 500000.0f, "rope_parameters: %s", li_error_msg());
    st = load_cfg_text(json_from(llama_cfg, N_LLAMA, "model_type", NULL, NULL), "arch.json", &hp);
    CHECK(st == LI_OK && strcmp(hp.arch, "llama") == 0, "architectures fallback: %s",
          li_error_msg());

    // LLaDA-8B-Instruct's config.json (abridged to the fields that matter).
    static const char *llada =
        "{\"activation_type\": \"silu\", \"alibi\": false, \"architectures\": [\"LLaDAModelLM\"],"
        " \"block_type\": \"llama\", \"d_model\": 4096, \"embedding_size\": 126464,"
        " \"eos_token_id\": 126081, \"include_bias\": false, \"include_qkv_bias\": false,"
        " \"init_cutoff_factor\": null, \"layer_norm_type\": \"rms\", \"mask_token_id\": 126336,"
        " \"max_sequence_length\": 4096, \"mlp_hidden_size\": 12288, \"mlp_ratio\": 4,"
        " \"model_type\": \"llada\", \"multi_query_attention\": null, \"n_heads\": 32,"
        " \"n_kv_heads\": 32, \"n_layers\": 32, \"pad_token_id\": 126081, \"rms_norm_eps\": 1e-05,"
        " \"rope\": true, \"rope_full_precision\": true, \"rope_theta\": 500000.0,"
        " \"torch_dtype\": \"bfloat16\", \"vocab_size\": 126464, \"weight_tying\": false}";
    st = load_cfg_text(llada, "llada.json", &hp);
    CHECK(st == LI_OK && strcmp(hp.arch, "llada") == 0 && hp.n_embd == 4096 &&
              hp.n_ff == 12288 && hp.n_layer == 32 && hp.n_head == 32 && hp.n_head_kv == 32 &&
              hp.head_dim == 128 && hp.n_vocab == 126464 && hp.n_ctx_train == 4096 &&
              hp.rms_eps == 1e-5f && hp.rope.theta == 500000.0f && !hp.tied_embeddings &&
              hp.rope.layout == LI_ROPE_NEOX && hp.n_eos == 1 && hp.eos_ids[0] == 126081 &&
              hp.bos_id == -1 && !hp.attention_bias && !hp.mlp_bias,
          "llada: %s", li_error_msg());
    TEST_END();
}

// config.json of llama_cfg with key set to value (NULL: removed): loads with st (LI_OK), or
// fails with st and a message naming the file and containing expect.
static void check_bad_config(const char *key, const char *value, li_status st, const char *expect) {
    static int n; // file names bad-config-N.json, one per case
    char file[64];
    snprintf(file, sizeof file, "bad-config-%d.json", n++);
    li_hparams hp;
    li_status got = load_cfg_text(json_from(llama_cfg, N_LLAMA, key, value, NULL), file, &hp);
    if (st == LI_OK) {
        CHECK(got == LI_OK, "%s: %s", key, li_error_msg());
    } else {
        CHECK(got == st && msg_has(file) && msg_has(expect), "%s = %s: st %d msg '%s' (want '%s')",
              key, value ? value : "<removed>", got, li_error_msg(), expect);
    }
}

static void test_config_bad(void) {
    TEST_BEGIN("config.json: wrong types and impossible values");
    // Values of a field refused with LI_ERR_FORMAT and a message naming the field.
    static const struct {
        const char *key, *values[8];
    } bad_fields[] = {
        {"hidden_size", {"\"576\"", "0", "-576", "576.5", "4294967872", "2097152", "[576]"}},
        {"intermediate_size", {"{}"}},
        {"num_hidden_layers", {"100000"}},
        {"num_attention_heads", {"7", "0"}},
        {"num_key_value_heads", {"2", "0", "18"}},
        {"vocab_size", {"true"}},
        {"max_position_embeddings", {"0"}},
        {"rms_norm_eps", {"0", "\"1e-5\"", "1e300"}},
        {"rope_theta", {"-1", "0"}},
        {"tie_word_embeddings", {"1"}},
        {"attention_bias", {"\"no\""}},
        {"bos_token_id", {"1.5", "49152"}},
        {"eos_token_id", {"-1", "[1,2,3,4,5,6,7,8,9]", "[1,\"2\"]", "{}"}},
        {"torch_dtype", {"5", "\"a-very-long-dtype-name\""}},
        {"model_type", {"7"}},
    };
    for (size_t i = 0; i < sizeof bad_fields / sizeof bad_fields[0]; i++)
        for (int v = 0; bad_fields[i].values[v]; v++)
            check_bad_config(bad_fields[i].key, bad_fields[i].values[v], LI_ERR_FORMAT,
                             bad_fields[i].key);
    // The rest: removed fields (value NULL), other statuses, messages naming something else.
    static const struct {
        const char *key, *value;
        li_status st;
        const char *expect;
    } cases[] = {
        {"hidden_size", NULL, LI_ERR_FORMAT, "missing required field 'hidden_size'"},
        {"num_hidden_layers", NULL, LI_ERR_FORMAT, "num_hidden_layers"},
        {"vocab_size", NULL, LI_ERR_FORMAT, "vocab_size"},
        {"hidden_size", "1e999", LI_ERR_FORMAT, "invalid JSON"},
        {"model_type", "\"mistral\"", LI_ERR_UNSUPPORTED, "mistral"},
        {"architectures", "[\"GPT2LMHeadModel\"]", LI_OK, ""}, // model_type wins
        {"rope_scaling", "{\"rope_type\": \"dynamic\", \"factor\": 2}", LI_ERR_UNSUPPORTED,
         "dynamic"},
        {"rope_scaling", "{\"rope_type\": \"longrope\"}", LI_ERR_UNSUPPORTED, "longrope"},
        {"rope_scaling", "{\"factor\": 2}", LI_ERR_FORMAT, "rope_scaling.rope_type"},
        {"rope_scaling", "{\"rope_type\": 3}", LI_ERR_FORMAT, "rope_scaling.rope_type"},
        {"rope_scaling", "[\"linear\"]", LI_ERR_FORMAT, "rope_scaling"},
        {"rope_scaling", "\"linear\"", LI_ERR_FORMAT, "rope_scaling"},
        {"rope_scaling", "{\"rope_type\": \"linear\"}", LI_ERR_FORMAT, "rope_scaling.factor"},
        {"rope_scaling", "{\"rope_type\": \"linear\", \"factor\": \"4\"}", LI_ERR_FORMAT,
         "rope_scaling.factor"},
        {"rope_scaling", "{\"rope_type\": \"linear\", \"factor\": -4}", LI_ERR_FORMAT,
         "rope_scaling"},
        {"rope_scaling", "{\"rope_type\": \"llama3\", \"factor\": 8}", LI_ERR_FORMAT,
         "rope_scaling.low_freq_factor"},
        {"rope_scaling",
         "{\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 1,"
         " \"high_freq_factor\": 4}",
         LI_ERR_FORMAT, "rope_scaling.original_max_position_embeddings"},
        {"rope_scaling",
         "{\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 4,"
         " \"high_freq_factor\": 1, \"original_max_position_embeddings\": 8192}",
         LI_ERR_FORMAT, "low_freq_factor"},
        {"rope_scaling",
         "{\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 1,"
         " \"high_freq_factor\": 4, \"original_max_position_embeddings\": -1}",
         LI_ERR_FORMAT, "original_max_position_embeddings"},
        {"rope_scaling", "{\"rope_type\": \"yarn\", \"factor\": 4, \"beta_fast\": \"x\"}",
         LI_ERR_FORMAT, "rope_scaling.beta_fast"},
        {"rope_scaling", "{\"rope_type\": \"yarn\", \"factor\": 4, \"beta_slow\": 0}",
         LI_ERR_FORMAT, "beta_slow"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_bad_config(cases[i].key, cases[i].value, cases[i].st, cases[i].expect);
    // head_dim odd or absurd; the hidden size need not be heads × head_dim when it is given.
    li_hparams hp;
    li_status st = load_cfg_text(json_from(llama_cfg, N_LLAMA, NULL, NULL, "\"head_dim\": 63"),
                                 "odd-head.json", &hp);
    CHECK(st == LI_ERR_FORMAT && msg_has("odd-head.json") && msg_has("head_dim"), "odd: %s",
          li_error_msg());
    st = load_cfg_text(json_from(llama_cfg, N_LLAMA, NULL, NULL, "\"head_dim\": 4096"),
                       "big-head.json", &hp);
    CHECK(st == LI_ERR_FORMAT && msg_has("head_dim"), "huge head_dim: %s", li_error_msg());
    st = load_cfg_text(json_from(llama_cfg, N_LLAMA, "num_attention_heads", "7",
                                 "\"head_dim\": 64"), "explicit-head.json", &hp);
    CHECK(st == LI_ERR_FORMAT && msg_has("num_key_value_heads"), "7 heads / 3 kv: %s",
          li_error_msg());
    // Whole-document problems, under what the message says.
    static const struct {
        const char *expect, *texts[4];
    } docs[] = {
        {"invalid JSON",
         {"", "{\"model_type\": \"llama\", \"model_type\": \"llama\"}",
          "{\"model_type\": \"llama\"} trailing"}},
        {"JSON object", {"[1, 2]"}},
        {"model_type", {"{\"hidden_size\": 5}"}},
        {"FalconForCausalLM", {"{\"architectures\": [\"FalconForCausalLM\"]}"}},
        {"n_kv_heads",
         {"{\"model_type\": \"llada\", \"d_model\": 64, \"n_layers\": 2, \"n_heads\": 4, "
          "\"block_type\": \"llama\", \"rope\": true, \"layer_norm_type\": \"rms\", "
          "\"activation_type\": \"silu\", \"vocab_size\": 100, \"n_kv_heads\": 3}"}},
    };
    int n_doc = 0;
    for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++)
        for (int k = 0; docs[i].texts[k]; k++) {
            char file[64];
            snprintf(file, sizeof file, "bad-doc-%d.json", n_doc++);
            st = load_cfg_text(docs[i].texts[k], file, &hp);
            CHECK(st != LI_OK && msg_has(file) && msg_has(docs[i].expect),
                  "'%s': st %d msg '%s' (want '%s')", docs[i].texts[k], st, li_error_msg(),
                  docs[i].expect);
        }
    st = li_hf_config_load(&hp, tmp_path("does-not-exist.json"));
    CHECK(st == LI_ERR_IO && msg_has("does-not-exist.json"), "missing file: %s", li_error_msg());
    TEST_END();
}

// Every cut point of a valid config.json (in memory) fails cleanly.
// LLaDA's config.json as the reference's config class reads it (configuration_llada.py
// ModelConfig defaults for absent keys), and every switch the model layer cannot run refused
// with its key named.
static void test_config_llada(void) {
    TEST_BEGIN("config.json: llada defaults of the reference, switches implemented or refused");
    // What LLaDA-8B sets and the reference's defaults would not give.
#define LLADA_MIN "\"model_type\": \"llada\", \"block_type\": \"llama\", \"rope\": true, " \
                  "\"layer_norm_type\": \"rms\", \"activation_type\": \"silu\""
    li_hparams hp;
    li_status st = load_cfg_text("{" LLADA_MIN "}", "llada-min.json", &hp);
    CHECK(st == LI_OK && hp.n_embd == 768 && hp.n_head == 12 && hp.n_layer == 12 &&
              hp.n_head_kv == 12 && hp.head_dim == 64 && hp.n_ff == 4 * 768 &&
              hp.n_vocab == 50304 && hp.tied_embeddings && hp.rms_eps == 1e-5f &&
              hp.n_ctx_train == 1024 && hp.rope.theta == 10000.0f && !hp.scale_logits &&
              !hp.input_emb_norm,
          "defaults: %s (D %d H %d L %d F %d V %d tied %d)", li_error_msg(), hp.n_embd, hp.n_head,
          hp.n_layer, hp.n_ff, hp.n_vocab, hp.tied_embeddings);
    st = load_cfg_text("{" LLADA_MIN ", \"d_model\": 64, \"n_heads\": 4, \"vocab_size\": 300, "
                       "\"embedding_size\": null, \"mlp_ratio\": 3, \"multi_query_attention\": "
                       "true, \"layer_norm_eps\": 0.5, \"rope_scaling\": {\"type\": \"linear\", "
                       "\"factor\": 4.0}, \"scale_logits\": true, \"weight_tying\": false, "
                       "\"input_emb_norm\": true}",
                       "llada-switches.json", &hp);
    CHECK(st == LI_OK && hp.n_vocab == 300 && hp.n_ff == 192 && hp.n_head_kv == 1 &&
              hp.rms_eps == 1e-5f && hp.rope.scaling == LI_ROPE_SCALING_NONE &&
              hp.scale_logits && hp.input_emb_norm && !hp.tied_embeddings,
          "switches: %s (V %d F %d Hkv %d eps %g)", li_error_msg(), hp.n_vocab, hp.n_ff,
          hp.n_head_kv, hp.rms_eps);
    // Documents: the four keys of LLADA_MIN with `key` set to `value` (or added; NULL value:
    // left out), plus `more`.
    static const struct {
        const char *key, *value, *more, *want;
    } bad[] = {
        {"activation_type", "\"gelu\"", "", "activation_type 'gelu'"},
        {"activation_type", "\"relu\"", "", "activation_type 'relu'"},
        {"activation_type", "\"swiglu\"", "", "activation_type 'swiglu'"},
        {"block_type", "\"sequential\"", "", "block_type 'sequential'"},
        {"layer_norm_type", "\"default\"", "", "layer_norm_type 'default'"},
        {"layer_norm_type", "\"gemma_rms\"", "", "layer_norm_type 'gemma_rms'"},
        {"rope", "false", "", "rope = false"},
        {"alibi", "true", "", "alibi = true"},
        {"attention_layer_norm", "true", "", "attention_layer_norm = true"},
        {"layer_norm_with_affine", "false", "", "layer_norm_with_affine = false"},
        {"bias_for_layer_norm", "true", "", "bias_for_layer_norm = true"},
        {"input_emb_norm", "true", "", "weight_tying"},
        {"vocab_size", "60000", "", "embedding_size 50304 is smaller than vocab_size 60000"},
        {"n_kv_heads", "4", ", \"multi_query_attention\": true", "multi_query_attention"},
        {"d_model", "100", ", \"n_heads\": 3", "not a multiple of n_heads"},
        // absent: the reference's default, which the model layer cannot run
        {"block_type", NULL, "", "block_type 'sequential' (the reference's default"},
        {"rope", NULL, "", "rope = false (the reference's default"},
        {"layer_norm_type", NULL, "", "layer_norm_type 'default' (the reference's default"},
        {"activation_type", NULL, "", "activation_type 'swiglu' (the reference's default"},
    };
    static const char *const base[4][2] = {{"block_type", "\"llama\""}, {"rope", "true"},
                                           {"layer_norm_type", "\"rms\""},
                                           {"activation_type", "\"silu\""}};
    char text[1024], file[64];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t n = (size_t)snprintf(text, sizeof text, "{\"model_type\": \"llada\"");
        bool seen = false;
        for (int j = 0; j < 4; j++) {
            bool it = strcmp(base[j][0], bad[i].key) == 0;
            seen |= it;
            const char *v = it ? bad[i].value : base[j][1];
            if (v) n += (size_t)snprintf(text + n, sizeof text - n, ", \"%s\": %s", base[j][0], v);
        }
        if (!seen)
            n += (size_t)snprintf(text + n, sizeof text - n, ", \"%s\": %s", bad[i].key,
                                  bad[i].value);
        snprintf(text + n, sizeof text - n, "%s}", bad[i].more);
        snprintf(file, sizeof file, "llada-bad-%zu.json", i);
        st = load_cfg_text(text, file, &hp);
        CHECK(st != LI_OK && msg_has(file) && msg_has(bad[i].want), "%s: st %d msg '%s'", text,
              st, li_error_msg());
    }
#undef LLADA_MIN
    TEST_END();
}

static void test_config_truncation(void) {
    TEST_BEGIN("config.json truncated at every byte");
    const char *full = json_from(llama_cfg, N_LLAMA, NULL, NULL, NULL);
    size_t n = strlen(full);
    while (n > 0 && (full[n - 1] == '\n' || full[n - 1] == ' ')) n--;  // cut before the '}'
    int bad = 0;
    for (size_t cut = 0; cut < n; cut++) {
        char *p = malloc(cut ? cut : 1);
        memcpy(p, full, cut);
        li_hparams hp;
        li_status st = li_hf_config_parse(&hp, p, cut, "cut-config.json");
        if (st == LI_OK || !msg_has("cut-config.json")) bad++;
        li_generation_config gc;
        st = li_hf_generation_config_parse(&gc, p, cut, "cut-gen.json");
        if (st == LI_OK || !msg_has("cut-gen.json")) bad++;
        free(p);
    }
    CHECK(bad == 0, "%d cut points not rejected", bad);
    TEST_END();
}

static void test_generation_config(void) {
    TEST_BEGIN("generation_config.json");
    li_generation_config gc;
    const char *t1 = "{\"bos_token_id\": 128000, \"do_sample\": true, \"eos_token_id\": [128001, "
                     "128008, 128009], \"temperature\": 0.6, \"top_p\": 0.9, "
                     "\"transformers_version\": \"4.42.3\"}";
    li_status st = li_hf_generation_config_parse(&gc, t1, strlen(t1), "gen.json");
    CHECK(st == LI_OK && gc.has_temperature && gc.temperature == 0.6f && gc.has_top_p &&
              gc.top_p == 0.9f && !gc.has_top_k && gc.bos_id == 128000 && gc.n_eos == 3 &&
              gc.eos_ids[2] == 128009, "llama 3.1: %s", li_error_msg());
    const char *path = tmp_path("generation_config.json");
    const char *t2 = "{\"top_k\": 40, \"eos_token_id\": 2, \"temperature\": null}";
    write_file(path, t2, strlen(t2));
    st = li_hf_generation_config_load(&gc, path);
    CHECK(st == LI_OK && gc.has_top_k && gc.top_k == 40 && !gc.has_temperature &&
              !gc.has_top_p && gc.bos_id == -1 && gc.n_eos == 1 && gc.eos_ids[0] == 2,
          "file: %s", li_error_msg());
    st = li_hf_generation_config_parse(&gc, "{}", 2, "empty.json");
    CHECK(st == LI_OK && !gc.has_temperature && gc.n_eos == 0, "empty");
    // {"KEY": VALUE} refused with a message naming the key; "[]" naming what it should be.
    static const struct {
        const char *key, *values[3];
    } bad[] = {
        {"temperature", {"\"hot\"", "-1"}}, {"top_p", {"1.5"}},
        {"top_k", {"0.5", "-3"}},           {"eos_token_id", {"[1, [2]]"}},
        {"bos_token_id", {"\"<s>\""}},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        for (int k = 0; bad[i].values[k]; k++) {
            char text[64];
            int n = snprintf(text, sizeof text, "{\"%s\": %s}", bad[i].key, bad[i].values[k]);
            st = li_hf_generation_config_parse(&gc, text, (size_t)n, "bad-gen.json");
            CHECK(st == LI_ERR_FORMAT && msg_has("bad-gen.json") && msg_has(bad[i].key), "%s: %s",
                  text, li_error_msg());
        }
    st = li_hf_generation_config_parse(&gc, "[]", 2, "bad-gen.json");
    CHECK(st == LI_ERR_FORMAT && msg_has("bad-gen.json") && msg_has("JSON object"), "[]: %s",
          li_error_msg());
    TEST_END();
}

// ---- main -----------------------------------------------------------------------------------

static void rm_tree(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

int main(void) {
    g_seed = test_seed("test-formats");
    rng_state = g_seed;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/li-test-formats-XXXXXX");
    if (!mkdtemp(g_tmp)) {
        perror("mkdtemp");
        return 2;
    }

    test_gguf_roundtrip(0);
    test_gguf_roundtrip(64);
    test_gguf_roundtrip(8);
    test_gguf_roundtrip(1);
    test_gguf_truncation();
    test_gguf_lies();
    test_gguf_nesting();
    test_gguf_corruption();
    test_gguf_hparams_bad();
    test_gguf_python_fixture();
    test_gguf_real_model();
    test_st_roundtrip();
    test_st_python_sharded();
    test_st_truncation();
    test_st_lies();
    test_st_corruption();
    test_st_index();
    test_config_variants();
    test_config_bad();
    test_config_llada();
    test_config_truncation();
    test_generation_config();

    for (int i = 0; i < N_SPECS; i++) free(g_specs[i].raw), free(g_specs[i].expect);
    rm_tree(g_tmp);
    return test_summary();
}
