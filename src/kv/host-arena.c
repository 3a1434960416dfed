// host-arena.c — first-fit extents over one host region (host-arena.h).
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "host-arena.h"

typedef struct {
    size_t off, len;  // in units
} extent;

struct li_host_arena {
    char *base;
    size_t units;
    extent *free_list;  // sorted by off, never adjacent (merged), none empty; room for the most
    size_t n_free;      // there can be (units / 2 + 1: free and used alternate), so a release
                        // never allocates (32 GiB: 256 Ki extents, 4 MiB)
};

static size_t units_of(size_t n) { return (n + LI_HOST_ARENA_UNIT - 1) / LI_HOST_ARENA_UNIT; }

li_status li_host_arena_init(li_host_arena **out, void *base, size_t bytes) {
    *out = NULL;
    size_t units = bytes / LI_HOST_ARENA_UNIT;
    if (!base || units == 0)
        return li_error_set(LI_ERR_INVALID_ARG, "host arena: %zu bytes hold no %zu-byte unit",
                            bytes, LI_HOST_ARENA_UNIT);
    li_host_arena *a = calloc(1, sizeof *a);
    if (!a || !(a->free_list = malloc((units / 2 + 1) * sizeof *a->free_list))) {
        free(a);
        return li_error_set(LI_ERR_OOM, "out of memory for the host arena");
    }
    a->base = base;
    a->units = units;
    a->free_list[0] = (extent){0, units};
    a->n_free = 1;
    *out = a;
    return LI_OK;
}

void li_host_arena_free(li_host_arena *a) {
    if (!a) return;
    free(a->free_list);
    free(a);
}

void *li_host_arena_alloc(li_host_arena *a, size_t n) {
    size_t u = units_of(n ? n : 1);
    for (size_t i = 0; i < a->n_free; i++) {
        extent *e = &a->free_list[i];
        if (e->len < u) continue;
        char *p = a->base + e->off * LI_HOST_ARENA_UNIT;
        e->off += u;
        e->len -= u;
        if (e->len == 0) {
            memmove(e, e + 1, (a->n_free - i - 1) * sizeof *e);
            a->n_free--;
        }
        return p;
    }
    return NULL;
}

void li_host_arena_release(li_host_arena *a, void *p, size_t n) {
    if (!p) return;
    size_t off = (size_t)((char *)p - a->base) / LI_HOST_ARENA_UNIT, u = units_of(n ? n : 1);
    LI_ASSERT((char *)p >= a->base && off + u <= a->units);
    // the first free extent after it
    size_t i = 0;
    while (i < a->n_free && a->free_list[i].off < off) i++;
    LI_ASSERT(i == a->n_free || off + u <= a->free_list[i].off);       // no double release
    LI_ASSERT(i == 0 || a->free_list[i - 1].off + a->free_list[i - 1].len <= off);
    bool join_prev = i > 0 && a->free_list[i - 1].off + a->free_list[i - 1].len == off;
    bool join_next = i < a->n_free && off + u == a->free_list[i].off;
    if (join_prev && join_next) {
        a->free_list[i - 1].len += u + a->free_list[i].len;
        memmove(&a->free_list[i], &a->free_list[i + 1], (a->n_free - i - 1) * sizeof(extent));
        a->n_free--;
    } else if (join_prev) {
        a->free_list[i - 1].len += u;
    } else if (join_next) {
        a->free_list[i].off = off;
        a->free_list[i].len += u;
    } else {
        LI_ASSERT(a->n_free < a->units / 2 + 1);
        memmove(&a->free_list[i + 1], &a->free_list[i], (a->n_free - i) * sizeof(extent));
        a->free_list[i] = (extent){off, u};
        a->n_free++;
    }
}

size_t li_host_arena_capacity(const li_host_arena *a) { return a->units * LI_HOST_ARENA_UNIT; }

size_t li_host_arena_free_bytes(const li_host_arena *a) {
    size_t u = 0;
    for (size_t i = 0; i < a->n_free; i++) u += a->free_list[i].len;
    return u * LI_HOST_ARENA_UNIT;
}

size_t li_host_arena_largest_free(const li_host_arena *a) {
    size_t u = 0;
    for (size_t i = 0; i < a->n_free; i++) u = a->free_list[i].len > u ? a->free_list[i].len : u;
    return u * LI_HOST_ARENA_UNIT;
}
