// nfc.c — Unicode NFC of UTF-8 text (UAX #15): full canonical decomposition (tables plus the
// Hangul arithmetic), canonical ordering of combining marks, then canonical composition.
//
// Not here: NFD/NFKC/NFKD, the tables themselves (nfc-tables.c, generated), where the tokenizer
// applies NFC (tokenizer.c: each segment between added tokens, before pre-tokenization, as HF).
// Tested by tests/test-tokenizer.c (HF tokenizers' ids on a Qwen2-style tokenizer.json) and by
// scripts/gen_unicode_nfc.py --check (this algorithm over the tables against unicodedata).
// Cost: a binary search per code point for the quick check; text that needs no change (all of
// ASCII, most CJK, precomposed Latin) is left as it is and not copied.
#include <stdlib.h>
#include <string.h>

#include "nfc.h"

// Hangul syllables: S = SBASE + (L·VCOUNT + V)·TCOUNT + T (Unicode §3.12).
enum {
    SBASE = 0xAC00, LBASE = 0x1100, VBASE = 0x1161, TBASE = 0x11A7,
    LCOUNT = 19, VCOUNT = 21, TCOUNT = 28, SCOUNT = LCOUNT * VCOUNT * TCOUNT,
};

static bool in_ranges(const li_nfc_range *r, int n, uint32_t c, uint32_t *value) {
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int m = (lo + hi) / 2;
        if (c < r[m].lo) hi = m - 1;
        else if (c > r[m].hi) lo = m + 1;
        else {
            if (value) *value = r[m].value;
            return true;
        }
    }
    return false;
}

static uint8_t ccc(uint32_t c) {
    uint32_t v = 0;
    if (c < 0x300) return 0;
    in_ranges(li_nfc_ccc, li_nfc_n_ccc, c, &v);
    return (uint8_t)v;
}

static const li_nfc_decomp_entry *find_decomp(uint32_t c) {
    int lo = 0, hi = li_nfc_n_decomp - 1;
    while (lo <= hi) {
        int m = (lo + hi) / 2;
        if (c < li_nfc_decomp[m].cp) hi = m - 1;
        else if (c > li_nfc_decomp[m].cp) lo = m + 1;
        else return &li_nfc_decomp[m];
    }
    return NULL;
}

// The primary composite of the pair (a, b), or 0.
static uint32_t compose_pair(uint32_t a, uint32_t b) {
    if (a >= LBASE && a < LBASE + LCOUNT && b >= VBASE && b < VBASE + VCOUNT)
        return SBASE + ((a - LBASE) * VCOUNT + (b - VBASE)) * TCOUNT;
    if (a >= SBASE && a < SBASE + SCOUNT && (a - SBASE) % TCOUNT == 0 && b > TBASE &&
        b < TBASE + TCOUNT)
        return a + (b - TBASE);
    int lo = 0, hi = li_nfc_n_comp - 1;
    while (lo <= hi) {
        int m = (lo + hi) / 2;
        const li_nfc_decomp_entry *e = &li_nfc_decomp[li_nfc_comp[m]];
        if (a < e->a || (a == e->a && b < e->b)) hi = m - 1;
        else if (a > e->a || b > e->b) lo = m + 1;
        else return e->cp;
    }
    return 0;
}

// Decodes one character of valid UTF-8 at s; returns its length.
static int decode(const uint8_t *s, uint32_t *cp) {
    if (s[0] < 0x80) { *cp = s[0]; return 1; }
    if (s[0] < 0xE0) { *cp = (uint32_t)(s[0] & 0x1F) << 6 | (s[1] & 0x3F); return 2; }
    if (s[0] < 0xF0) {
        *cp = (uint32_t)(s[0] & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
        return 3;
    }
    *cp = (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3F) << 12 |
          (uint32_t)(s[2] & 0x3F) << 6 | (s[3] & 0x3F);
    return 4;
}

int li_utf8_put(char *o, uint32_t cp) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

bool li_nfc_needed(const char *s, size_t n) {
    const uint8_t *u = (const uint8_t *)s;
    for (size_t i = 0; i < n;) {
        if (u[i] < 0xCC) {  // below U+0300 (lead byte 0xCC): nothing combines or decomposes
            i += u[i] < 0x80 ? 1 : 2;
            continue;
        }
        uint32_t c;
        i += (size_t)decode(u + i, &c);
        if (in_ranges(li_nfc_unsafe, li_nfc_n_unsafe, c, NULL)) return true;
    }
    return false;
}

// Appends the full canonical decomposition of c to d (capacity checked by the caller: one
// character decomposes into at most 4 code points in Unicode 14, Hangul into 3).
static int decompose(uint32_t c, uint32_t *d) {
    if (c >= SBASE && c < SBASE + SCOUNT) {
        uint32_t s = c - SBASE, t = s % TCOUNT;
        d[0] = LBASE + s / (VCOUNT * TCOUNT);
        d[1] = VBASE + (s % (VCOUNT * TCOUNT)) / TCOUNT;
        if (t) d[2] = TBASE + t;
        return t ? 3 : 2;
    }
    const li_nfc_decomp_entry *e = c >= 0xC0 ? find_decomp(c) : NULL;
    if (!e) {
        d[0] = c;
        return 1;
    }
    int k = decompose(e->a, d);
    if (e->b) k += decompose(e->b, d + k);
    return k;
}

li_status li_nfc_append(li_buf *out, const char *s, size_t n) {
    if (!li_nfc_needed(s, n)) return li_buf_append(out, s, n);
    // n bytes hold at most n code points, each decomposing into at most 4.
    uint32_t *d = malloc((n * 4 + 4) * sizeof *d);
    char *o = malloc(n * 4 + 4);
    li_status st = LI_OK;
    if (!d || !o) {
        st = li_error_set(LI_ERR_OOM, "tokenize: out of memory for NFC of %zu bytes", n);
        goto done;
    }
    size_t nd = 0;
    for (size_t i = 0; i < n;) {
        uint32_t c;
        i += (size_t)decode((const uint8_t *)s + i, &c);
        nd += (size_t)decompose(c, d + nd);
    }
    // Canonical ordering: a stable insertion sort of each run of non-starters by class.
    for (size_t i = 1; i < nd; i++) {
        uint8_t k = ccc(d[i]);
        if (!k) continue;
        for (size_t j = i; j > 0 && ccc(d[j - 1]) > k; j--) {
            uint32_t tmp = d[j - 1];
            d[j - 1] = d[j];
            d[j] = tmp;
        }
    }
    // Canonical composition: a character joins the last starter unless blocked, i.e. unless a
    // character between them has class 0 or a class >= its own.
    size_t m = 0, starter = SIZE_MAX;
    int last = -1;  // class of the last character kept after the starter (-1: none yet)
    for (size_t i = 0; i < nd; i++) {
        uint32_t c = d[i];
        int k = ccc(c);
        if (starter != SIZE_MAX && (last < 0 ? true : (last != 0 && last < k))) {
            uint32_t p = compose_pair(d[starter], c);
            if (p) {
                d[starter] = p;
                continue;
            }
        }
        if (k == 0) {
            starter = m;
            last = -1;
        } else {
            last = k;
        }
        d[m++] = c;
    }
    size_t len = 0;
    for (size_t i = 0; i < m; i++) len += (size_t)li_utf8_put(o + len, d[i]);
    st = li_buf_append(out, o, len);
done:
    free(d);
    free(o);
    return st;
}
