// sample.cu — logits -> token on the GPU, the same arithmetic as ref_sample (ops-ref.c):
//   greedy: one block, argmax with the lowest id on ties;
//   otherwise: sort (logit, id) descending with CUB's stable radix sort (ties keep id order, and
//   p = exp((l - l_max) / temperature) is monotonic in l, so this is the oracle's order: p
//   descending, ties by lower id), then one block of 1024 threads walks the sorted list in chunks
//   with fp64 block scans: top-k cut, top-p (shortest prefix whose exclusive sum stays below
//   top_p * Z), min-p (p >= min_p * p_max), and the inverse-CDF draw with u.
// Sums run in scan order rather than the oracle's id order; they differ by a few fp64 ulp, which
// moves the chosen token only when u lands within ~1e-15 of a boundary.
//
// Cost (V = 128K): the radix sort of 128K pairs (~tens of µs) dominates; the select pass reads
// the sorted list up to 3 times in one block. Faster later: a top-k pre-filter (radix select) so
// that the sort sees only candidates, and fusing the final softmax of the LM head.
// Tested by tests/gpu/gpu-check.c (greedy == oracle, same u -> same token, empirical distribution).
#include <climits>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cuda_runtime.h>

#include "cuda-device.cuh"
#include "sample.cuh"

#define SAMPLE_THREADS 1024

struct li_cuda_sampler {
    int cap;              // V capacity
    float *keys_in;       // (cap) logits, -0 canonicalised to +0 (radix order of ±0 differs)
    float *keys_out;      // (cap) sorted descending
    int32_t *ids_in;      // (cap) 0..V-1
    int32_t *ids_out;     // (cap) ids in sorted order
    void *tmp;            // CUB temporary storage
    size_t tmp_bytes;
    int32_t *d_tok;       // (1) the result
};

struct min_op {
    __device__ int operator()(int a, int b) const { return a < b ? a : b; }
};
struct max_op {
    __device__ int operator()(int a, int b) const { return a > b ? a : b; }
};

// One block: (value, id) argmax, lowest id among equal maxima (the oracle's first maximum).
__global__ void sample_kernel_argmax(const float *x, int V, int32_t *tok) {
    pdl_trigger();  // launched by launch_pdl (cuda-device.cuh)
    pdl_wait();
    __shared__ float sv[32];
    __shared__ int si[32];
    float bv = -INFINITY;
    int bi = INT_MAX;
    for (int i = threadIdx.x; i < V; i += blockDim.x)
        if (bi == INT_MAX || x[i] > bv) {  // strided ascending scan: the first of equals wins
            bv = x[i];
            bi = i;
        }
    const int best = block_argmax(bv, bi, sv, si);
    if (threadIdx.x == 0) *tok = best;
}

__global__ void sample_kernel_prep(float *keys, int32_t *ids, const float *logits, int V) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < V; i += gridDim.x * blockDim.x) {
        keys[i] = logits[i] + 0.0f;  // -0 + 0 = +0
        ids[i] = i;
    }
}

// HF: softmax(logits / temperature), unnormalised (p of the first sorted token is 1).
__device__ __forceinline__ double sample_p(const float *keys, int i, double lmax, double temp) {
    return exp(((double)keys[i] - lmax) / temp);
}

typedef cub::BlockScan<double, SAMPLE_THREADS> scan_t;
typedef cub::BlockReduce<double, SAMPLE_THREADS> dred_t;
typedef cub::BlockReduce<int, SAMPLE_THREADS> ired_t;
union select_tmp {  // the select block's CUB storage, one collective at a time
    scan_t::TempStorage scan;
    dred_t::TempStorage dred;
    ired_t::TempStorage ired;
};

// The first of the n sorted tokens whose running sum of p crosses bound, walked SAMPLE_THREADS
// tokens at a time with fp64 block scans: top-p's cut (Draw false: the sum before the token
// >= bound) or the inverse-CDF draw (Draw true: the sum through the token > bound, and thread 0's
// *last_pos raised to the last token with p > 0 walked). INT_MAX if none; the same in every thread.
template <bool Draw>
__device__ __forceinline__ int first_crossing(select_tmp &tmp, int &sh_i, const float *keys, int n,
                                              double lmax, double temp, double bound,
                                              int *last_pos) {
    const int tid = threadIdx.x;
    double carry = 0;
    for (int base = 0; base < n; base += SAMPLE_THREADS) {
        int i = base + tid;
        double p = i < n ? sample_p(keys, i, lmax, temp) : 0.0, sum, agg;
        __syncthreads();
        if (Draw)
            scan_t(tmp.scan).InclusiveSum(p, sum, agg);
        else
            scan_t(tmp.scan).ExclusiveSum(p, sum, agg);
        sum += carry;
        int cand = (i < n && (Draw ? sum > bound : sum >= bound)) ? i : INT_MAX;
        __syncthreads();
        int mn = ired_t(tmp.ired).Reduce(cand, min_op());
        int lpm = 0;
        if (Draw) {
            int lp = (i < n && p > 0) ? i : 0;
            __syncthreads();
            lpm = ired_t(tmp.ired).Reduce(lp, max_op());
        }
        if (tid == 0) {
            sh_i = mn;
            if (Draw && lpm > *last_pos) *last_pos = lpm;
        }
        __syncthreads();
        carry += agg;
        if (sh_i != INT_MAX) return sh_i;
    }
    return INT_MAX;
}

// One block over the sorted list keys/ids (V). See ref_sample for each rule.
__global__ void __launch_bounds__(SAMPLE_THREADS)
    sample_kernel_select(const float *keys, const int32_t *ids, int V, float temperature,
                         int top_k, float top_p, float min_p, double u, int32_t *tok) {
    __shared__ select_tmp tmp;
    __shared__ double sh_d;
    __shared__ int sh_i;
    const int tid = threadIdx.x;
    const double temp = temperature, lmax = keys[0];

    int n = V;
    if (top_k > 0 && top_k < n) n = top_k;  // exactly k (see ops-ref.c)

    if (top_p < 1) {
        double z = 0;
        for (int i = tid; i < n; i += SAMPLE_THREADS) z += sample_p(keys, i, lmax, temp);
        z = dred_t(tmp.dred).Sum(z);
        if (tid == 0) sh_d = z;
        __syncthreads();
        const double lim = (double)top_p * sh_d;
        // keep token m while Σ_{i<m} p_i < lim: the cut is the first m with that sum >= lim
        int m = first_crossing<false>(tmp, sh_i, keys, n, lmax, temp, lim, NULL);
        if (m == INT_MAX) m = n;
        n = m > 0 ? m : 1;
    }
    if (min_p > 0) {  // sorted descending: survivors are the prefix with p >= min_p * p_first
        const double thr = (double)min_p * sample_p(keys, 0, lmax, temp);
        int m = n;
        for (int base = 0; base < n; base += SAMPLE_THREADS) {
            int i = base + tid;
            int cand = (i >= 1 && i < n && sample_p(keys, i, lmax, temp) < thr) ? i : INT_MAX;
            __syncthreads();
            int mn = ired_t(tmp.ired).Reduce(cand, min_op());
            if (tid == 0) sh_i = mn;
            __syncthreads();
            if (sh_i != INT_MAX) {
                m = sh_i;
                break;
            }
        }
        n = m;
    }
    // inverse CDF: the first survivor whose running sum exceeds u * Z
    double z = 0;
    for (int i = tid; i < n; i += SAMPLE_THREADS) z += sample_p(keys, i, lmax, temp);
    __syncthreads();
    z = dred_t(tmp.dred).Sum(z);
    if (tid == 0) sh_d = z;
    __syncthreads();
    const double target = u * sh_d;
    int last_pos = 0;
    const int found = first_crossing<true>(tmp, sh_i, keys, n, lmax, temp, target, &last_pos);
    // rounding left no survivor above the target: the last survivor with p > 0 (oracle's rule)
    if (tid == 0) *tok = ids[found != INT_MAX ? found : last_pos];
}

extern "C" void li_cuda_sampler_free(li_cuda_sampler *s) {
    if (!s) return;
    cudaFree(s->keys_in);
    cudaFree(s->keys_out);
    cudaFree(s->ids_in);
    cudaFree(s->ids_out);
    cudaFree(s->tmp);
    cudaFree(s->d_tok);
    delete s;
}

extern "C" cudaError_t li_cuda_sampler_reserve(li_cuda_sampler **ps, int V) {
    if (V < 1) return cudaErrorInvalidValue;
    if (*ps && (*ps)->cap >= V) return cudaSuccess;
    li_cuda_sampler_free(*ps);
    *ps = NULL;
    li_cuda_sampler *s = new (std::nothrow) li_cuda_sampler();
    if (!s) return cudaErrorMemoryAllocation;
    s->cap = V;
    cudaError_t e;
    if ((e = cudaMalloc(&s->keys_in, sizeof(float) * V)) != cudaSuccess ||
        (e = cudaMalloc(&s->keys_out, sizeof(float) * V)) != cudaSuccess ||
        (e = cudaMalloc(&s->ids_in, sizeof(int32_t) * V)) != cudaSuccess ||
        (e = cudaMalloc(&s->ids_out, sizeof(int32_t) * V)) != cudaSuccess ||
        (e = cudaMalloc(&s->d_tok, sizeof(int32_t))) != cudaSuccess ||
        (e = cub::DeviceRadixSort::SortPairsDescending(NULL, s->tmp_bytes, s->keys_in, s->keys_out,
                                                       s->ids_in, s->ids_out, V)) != cudaSuccess ||
        (e = cudaMalloc(&s->tmp, s->tmp_bytes)) != cudaSuccess) {
        li_cuda_sampler_free(s);
        return e;
    }
    *ps = s;
    return cudaSuccess;
}

extern "C" cudaError_t li_cuda_sample(li_cuda_sampler **ps, cudaStream_t st, const float *logits,
                                      int V, float temperature, int top_k, float top_p,
                                      float min_p, double u, int32_t *out_token) {
    cudaError_t e = li_cuda_sampler_reserve(ps, V);
    if (e != cudaSuccess) return e;
    li_cuda_sampler *s = *ps;
    if (temperature <= 0) {
        e = launch_pdl(sample_kernel_argmax, dim3(1), dim3(SAMPLE_THREADS), 0, st, (const float *)logits,
                       V, s->d_tok);
        if (e != cudaSuccess) return e;
    } else {
        int blocks = (V + 255) / 256 < 1024 ? (V + 255) / 256 : 1024;
        sample_kernel_prep<<<blocks, 256, 0, st>>>(s->keys_in, s->ids_in, logits, V);
        if ((e = cudaGetLastError()) != cudaSuccess) return e;
        size_t tb = s->tmp_bytes;
        e = cub::DeviceRadixSort::SortPairsDescending(s->tmp, tb, s->keys_in, s->keys_out,
                                                      s->ids_in, s->ids_out, V, 0, 32, st);
        if (e != cudaSuccess) return e;
        sample_kernel_select<<<1, SAMPLE_THREADS, 0, st>>>(s->keys_out, s->ids_out, V,
                                                          temperature, top_k, top_p, min_p, u,
                                                          s->d_tok);
        if ((e = cudaGetLastError()) != cudaSuccess) return e;
    }
    if ((e = cudaMemcpyAsync(out_token, s->d_tok, sizeof(int32_t), cudaMemcpyDeviceToHost, st)) !=
        cudaSuccess)
        return e;
    return cudaStreamSynchronize(st);
}
