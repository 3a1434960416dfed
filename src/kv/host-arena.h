// host-arena.h — one host region for the host tier (L1), carved into documents' blobs.
//
// Why: pinning host memory is slow and serialising. On the H200 machine a 256 MiB cudaMallocHost
// (plus first touch) costs tens of ms on the engine thread and cudaFreeHost synchronises the
// device; allocated per demoted document, that put ~80 ms on the request path per prefilled
// document (bench rag, 2G pool + 32G host tier: lazy TTFT p50 1832 → 3021 ms). So the host tier
// pins its whole budget once, at start (as vLLM's swap space and LMCache's pinned buffer do), and
// hands out extents of it.
//
// The allocator: first fit over the free extents, kept sorted by offset, neighbours merged on
// release; sizes in units of LI_HOST_ARENA_UNIT bytes (a blob is a 128-byte header plus whole KV
// pages of MiBs, so the rounding costs < 0.1 % there). Not thread-safe: the engine thread owns it.
#ifndef LAZYINFER_KV_HOST_ARENA_H
#define LAZYINFER_KV_HOST_ARENA_H

#include <stddef.h>

#include "../core/core.h"

#define LI_HOST_ARENA_UNIT ((size_t)64 << 10)

typedef struct li_host_arena li_host_arena;

// An arena over [base, base + bytes) (memory the caller owns and frees after li_host_arena_free).
// bytes is rounded down to whole units; LI_ERR_INVALID_ARG when that leaves none.
li_status li_host_arena_init(li_host_arena **out, void *base, size_t bytes);
void li_host_arena_free(li_host_arena *a);

// n bytes (n >= 1), LI_HOST_ARENA_UNIT-aligned relative to base; NULL when no free extent fits
// (no error set: the caller evicts and retries, or does without).
void *li_host_arena_alloc(li_host_arena *a, size_t n);
// Gives back what li_host_arena_alloc(a, n) returned (the same n).
void li_host_arena_release(li_host_arena *a, void *p, size_t n);

size_t li_host_arena_capacity(const li_host_arena *a);
size_t li_host_arena_free_bytes(const li_host_arena *a);
size_t li_host_arena_largest_free(const li_host_arena *a);  // the largest n that fits now

#endif
