// fp8.c — the group scale of the block-scaled FP8 FFN (ARCHITECTURE.md §5.3). The FP8 E4M3
// conversions are inline in fp8.h, shared with the CUDA kernels. Not here: the quantise and GEMM
// ops (src/backend/cpu/ops-*.c), the weight cache (arch-llada.c). Tested by tests/test-fp8.c.
#include "core.h"

float li_fp8_scale(float amax) {
    float a = amax > LI_FP8_AMAX_MIN ? amax : LI_FP8_AMAX_MIN;
    return a / LI_E4M3_MAX;
}
