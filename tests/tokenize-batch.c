// tokenize-batch.c — test driver for tests/test_tokenizer_parity.py: loads one tokenizer, then
// encodes and decodes many strings in one process.
//
//   tokenize-batch json TOKENIZER_JSON [CONFIG_JSON|-] < records > results
//   tokenize-batch gguf MODEL.gguf < records > results
//   tokenize-batch chat json|gguf PATH [CONFIG|-] < records > results   (chat rendering)
//
// Input records: u32 flags (bit 0 add_bos, bit 1 parse_special), u32 length, bytes (UTF-8).
// Chat input: u32 add_generation_prompt, u32 n_messages, then per message two length-prefixed
// strings (role, content).
// Output per record: i32 n (−1 on error), then n × i32 ids and u32 length + decoded bytes (or,
// on error, u32 length + the error message). Chat output: i32 status (0 ok) + u32 length + text.
// On stderr at the end: "load_ms X encode_bytes N encode_ms Y": process CPU time (clock()), so
// that other work on a shared machine does not make the figures flaky; wall time is also printed.
// Not a test by itself (it is not named test-*.c); the pytest fixture compiles it.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tokenizer/tokenizer.h"

static int read_u32(uint32_t *v) { return fread(v, 4, 1, stdin) == 1; }

static char *read_str(uint32_t *len) {
    if (!read_u32(len)) return NULL;
    char *s = malloc((size_t)*len + 1);
    if (!s || fread(s, 1, *len, stdin) != *len) {
        free(s);
        return NULL;
    }
    s[*len] = 0;
    return s;
}

static void write_blob(int32_t head, const void *p, uint32_t n) {
    fwrite(&head, 4, 1, stdout);
    fwrite(&n, 4, 1, stdout);
    fwrite(p, 1, n, stdout);
}

int main(int argc, char **argv) {
    int a = 1;
    bool chat = argc > 1 && strcmp(argv[1], "chat") == 0;
    if (chat) a++;
    if (argc < a + 2) {
        fprintf(stderr, "usage: %s [chat] json TOKENIZER_JSON [CONFIG|-] | gguf MODEL.gguf\n",
                argv[0]);
        return 2;
    }
    li_tokenizer *t = NULL;
    li_gguf *g = NULL;
    double t0 = li_time_ms();
    clock_t c0 = clock();
    li_status st;
    if (strcmp(argv[a], "json") == 0) {
        const char *cfg = argc > a + 2 && strcmp(argv[a + 2], "-") != 0 ? argv[a + 2] : NULL;
        st = li_tokenizer_load_json(&t, argv[a + 1], cfg);
    } else {
        st = li_gguf_open(&g, argv[a + 1]);
        if (st == LI_OK) st = li_tokenizer_load_gguf(&t, g);
    }
    double load_wall_ms = li_time_ms() - t0;
    double load_ms = (double)(clock() - c0) * 1e3 / CLOCKS_PER_SEC;
    if (st != LI_OK) {
        fprintf(stderr, "load failed: %s\n", li_error_msg());
        return 1;
    }
    double enc_ms = 0, enc_wall_ms = 0;
    size_t enc_bytes = 0;
    uint32_t flags, len;
    while (read_u32(&flags)) {
        if (chat) {
            uint32_t n;
            if (!read_u32(&n) || n > 1000) return 3;
            li_chat_message *m = calloc(n + 1, sizeof *m);
            for (uint32_t i = 0; i < n; i++) {
                m[i].role = read_str(&len);
                m[i].content = read_str(&len);
                if (!m[i].role || !m[i].content) return 3;
            }
            li_buf b = {0};
            st = li_chat_render_messages(t, m, (int)n, flags & 1, &b);
            if (st == LI_OK) write_blob(0, b.data ? b.data : "", (uint32_t)b.len);
            else write_blob(-1, li_error_msg(), (uint32_t)strlen(li_error_msg()));
            li_buf_free(&b);
            for (uint32_t i = 0; i < n; i++) {
                free((void *)m[i].role);
                free((void *)m[i].content);
            }
            free(m);
            continue;
        }
        char *s = read_str(&len);
        if (!s) return 3;
        int32_t *ids = NULL;
        int n = 0;
        double t1 = li_time_ms();
        clock_t c1 = clock();
        st = li_tokenizer_encode(t, s, len, flags & 1, flags & 2, &ids, &n);
        enc_ms += (double)(clock() - c1) * 1e3 / CLOCKS_PER_SEC;
        enc_wall_ms += li_time_ms() - t1;
        enc_bytes += len;
        if (st != LI_OK) {
            write_blob(-1, li_error_msg(), (uint32_t)strlen(li_error_msg()));
        } else {
            li_buf b = {0};
            fwrite(&n, 4, 1, stdout);
            fwrite(ids, 4, (size_t)n, stdout);
            st = li_tokenizer_decode(t, ids, n, &b);
            uint32_t bl = st == LI_OK ? (uint32_t)b.len : 0;
            fwrite(&bl, 4, 1, stdout);
            fwrite(b.data, 1, bl, stdout);
            li_buf_free(&b);
        }
        free(ids);
        free(s);
    }
    fflush(stdout);
    fprintf(stderr, "wall: load %.1f ms, encode %.1f ms\n", load_wall_ms, enc_wall_ms);
    fprintf(stderr, "load_ms %.1f encode_bytes %zu encode_ms %.1f\n", load_ms, enc_bytes, enc_ms);
    li_tokenizer_free(t);
    li_gguf_close(g);
    return 0;
}
