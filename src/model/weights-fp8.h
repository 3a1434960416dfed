// weights-fp8.h — FP8 (e4m3) copies of weight matrices per 128 x 128 block (weights-fp8.c), for the
// FP8 FFN of Llama (arch-llama.c) and LLaDA (llada-load.c). Internal to src/model/.
#ifndef LI_WEIGHTS_FP8_H
#define LI_WEIGHTS_FP8_H

#include "../backend/backend.h"

// FP8 copy of W (f32 or bf16, host memory) per 128 x 128 block (backend.h li_fp8_weight): scale
// = li_fp8_scale(block amax), q = li_f32_to_e4m3(w / scale) (fp32 division). Work is spread over
// tp (may be NULL). li_fp8_weight_free releases what it allocated (zeroed struct: no-op).
li_status li_fp8_weight_quantize(li_fp8_weight *out, const li_weight *W, li_threadpool *tp);
void li_fp8_weight_free(li_fp8_weight *w);
// The same with W and the copy in be's memory: on a device, the backend's fp8_quant_weight op
// where it has one (bit for bit the host's result), else W downloaded, quantised by the host code
// and uploaded; on the host, li_fp8_weight_quantize over be's workers. Free with
// li_fp8_weight_free_be on the same backend.
li_status li_fp8_weight_quantize_be(li_backend *be, li_fp8_weight *out, const li_weight *W);
void li_fp8_weight_free_be(li_backend *be, li_fp8_weight *w);

#endif
