// rng-jump.h — jumping the engine's PRNG (xoshiro256**, rng.c) ahead by any number of draws.
//
// xoshiro256**'s state update is linear over GF(2): the state after n draws is M^n s for one fixed
// 256 x 256 bit matrix M. li_rng_jump_table holds M^(2^k) for k = 0..63, so n draws cost one
// matrix-vector product per set bit of n. A GPU kernel that must consume the same stream as the
// CPU (LLaDA's Gumbel-max sampling, dllm-sample.cu) uses a device copy of this table to start
// each thread at its own draw offset.
//
// Not here: xoshiro's published jump()/long_jump() polynomials (fixed 2^128 / 2^192 strides).
// Tested by tests/test-rng-jump.c.
#ifndef LI_RNG_JUMP_H
#define LI_RNG_JUMP_H

#include "core.h"

// Words per matrix: 256 columns x 4 state words (8 KiB); the table holds 64 matrices (512 KiB).
#define LI_RNG_JUMP_WORDS (256 * 4)
#define LI_RNG_JUMP_MATRICES 64

// table (64, 256, 4): table[k][j][w] = word w of M^(2^k) e_j, e_j the state whose only set bit is
// bit j (bit j % 64 of s[j / 64]). "Column form": M x = XOR of the columns j where x has bit j.
// Built on the first call (thread-safe, ~10 ms), then valid for the life of the process.
const uint64_t *li_rng_jump_table(void);

// s = matrix s, matrix (256, 4) one of the table's (or any column-form matrix). ~128 set bits x
// 4 XORs: about a microsecond.
void li_rng_apply_jump(uint64_t s[4], const uint64_t *matrix);

// r advanced by n draws: the same state as n calls of li_rng_u64. popcount(n) matrix products,
// at most 64 (tens of microseconds for any n; n = B V ~ 4M draws of a LLaDA step: ~11).
void li_rng_jump(li_rng *r, uint64_t n);

#endif
