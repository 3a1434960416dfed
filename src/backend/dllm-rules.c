// dllm-rules.c — the diffusion decoder's rules (docs/DLLM.md steps 6-7): the transfer schedule,
// the commit selection (top-k, Fast-dLLM threshold and factor, torch.topk's order among tied
// confidences) and DPad's keep probabilities and draws. Their owner and caller is the decoder
// (src/engine/engine-dllm.c); they sit in the backend layer so that a backend running a step's
// choice on its side (ops.dllm_select / dllm_dpad, cpu-devsim) follows this same code without
// including engine headers.
//
// Not here: the decoding loop (engine-dllm.c), the device kernels (src/backend/cuda/dllm*.cu).
// Tested by tests/test-dllm.c (hand-made inputs) and tests/test-llada-generate-ref.c (torch).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dllm-rules.h"

int li_dllm_schedule(int n, int S, int i) {
    LI_ASSERT(S > 0 && n >= 0 && i >= 0 && i < S);
    return n / S + (i < n % S ? 1 : 0);
}

// The count rule of li_dllm_take over ranked values d (or, when d is NULL, w[i].v).
static int take_rule(const double *d, const li_dllm_pair *w, int nc, li_dllm_sel mode, int k,
                     double tau, double f) {
#define RV(i) (d ? d[i] : w[i].v)
    if (nc <= 0) return 0;
    int take = 0;
    switch (mode) {
    case LI_DLLM_SEL_TOPK: take = k < nc ? (k > 0 ? k : 0) : nc; break;
    case LI_DLLM_SEL_THRESHOLD:
        // Sorted descending, so "the best plus all others >= tau" is a prefix.
        take = 1;
        while (take < nc && RV(take) >= tau)
            take++;
        break;
    case LI_DLLM_SEL_FACTOR:
        // Fast-dLLM: threshs[i] = 1 - f / (i + 2), threshs[0] = -1; the loop breaks at the first
        // failing rank top_i; then `if top_i == 0 or top_i == len(threshs) - 1: top_i += 1`.
        take = 1;
        while (take < nc && !(RV(take) < 1.0 - f / (double)(take + 2)))
            take++;
        if (take == nc - 1) take = nc;
        break;
    }
    return take;
#undef RV
}

int li_dllm_take(const double *ranked, int nc, li_dllm_sel mode, int k, double tau, double f) {
    return take_rule(ranked, NULL, nc, mode, k, tau, f);
}

// ---- torch.topk's order among equal values (li_dllm_topk_torch) --------------------------------
//
// PyTorch's CPU topk sorts (value, index) pairs with the comparator "a.v > b.v" through
// libstdc++'s std::partial_sort or std::nth_element. Neither is stable, so which of several equal
// values end up among the k first is decided by the exact sequence of their swaps; the functions
// below take the same steps in the same order (stl_heap.h / stl_algo.h of GCC; unchanged in
// substance for many releases), on indices into one array. NaN never occurs here (candidates
// are finite or -inf).

static bool before(li_dllm_pair a, li_dllm_pair b) { return a.v > b.v; }

static void swap_pairs(li_dllm_pair *a, li_dllm_pair *b) {
    li_dllm_pair t = *a;
    *a = *b;
    *b = t;
}

// __adjust_heap then __push_heap: sift the hole at `hole` down to a leaf, then val up.
static void heap_adjust(li_dllm_pair *a, int hole, int len, li_dllm_pair val) {
    const int top = hole;
    int child = hole;
    while (child < (len - 1) / 2) {
        child = 2 * (child + 1);
        if (before(a[child], a[child - 1])) child--;
        a[hole] = a[child];
        hole = child;
    }
    if ((len & 1) == 0 && child == (len - 2) / 2) {
        child = 2 * (child + 1);
        a[hole] = a[child - 1];
        hole = child - 1;
    }
    int parent = (hole - 1) / 2;
    while (hole > top && before(a[parent], val)) {
        a[hole] = a[parent];
        hole = parent;
        parent = (hole - 1) / 2;
    }
    a[hole] = val;
}

// __heap_select(a, a + mid, a + len): a heap of the mid "largest" under before() in a[0, mid).
static void heap_select(li_dllm_pair *a, int mid, int len) {
    if (mid >= 2)
        for (int parent = (mid - 2) / 2;; parent--) {  // __make_heap
            heap_adjust(a, parent, mid, a[parent]);
            if (parent == 0) break;
        }
    for (int i = mid; i < len; i++)
        if (before(a[i], a[0])) {  // __pop_heap(a, a + mid, a + i)
            li_dllm_pair v = a[i];
            a[i] = a[0];
            heap_adjust(a, 0, mid, v);
        }
}

static void insertion_sort(li_dllm_pair *a, int first, int last) {
    if (first == last) return;
    for (int i = first + 1; i < last; i++) {
        li_dllm_pair v = a[i];
        if (before(v, a[first])) {
            memmove(a + first + 1, a + first, (size_t)(i - first) * sizeof *a);
            a[first] = v;
        } else {  // __unguarded_linear_insert
            int j = i;
            while (before(v, a[j - 1])) {
                a[j] = a[j - 1];
                j--;
            }
            a[j] = v;
        }
    }
}

// __unguarded_partition_pivot over [first, last): median of a[first + 1], a[mid], a[last - 1]
// moved to a[first], then the Hoare partition of [first + 1, last) around it.
static int partition_pivot(li_dllm_pair *a, int first, int last) {
    int mid = first + (last - first) / 2, x = first + 1, y = mid, z = last - 1;
    int m;  // __move_median_to_first
    if (before(a[x], a[y]))
        m = before(a[y], a[z]) ? y : before(a[x], a[z]) ? z : x;
    else
        m = before(a[x], a[z]) ? x : before(a[y], a[z]) ? z : y;
    swap_pairs(&a[first], &a[m]);
    int lo = first + 1, hi = last;
    for (;;) {
        while (before(a[lo], a[first]))
            lo++;
        hi--;
        while (before(a[first], a[hi]))
            hi--;
        if (!(lo < hi)) return lo;
        swap_pairs(&a[lo], &a[hi]);
        lo++;
    }
}

// __sort_heap over the heap a[0, len): pops the top to the end until one is left.
static void sort_heap(li_dllm_pair *a, int len) {
    while (len > 1) {
        len--;
        li_dllm_pair v = a[len];
        a[len] = a[0];
        heap_adjust(a, 0, len, v);
    }
}

// __introsort_loop(a + lo, a + hi, depth): partitions down to runs of 16, heap sort past the
// depth limit; recursion on the right part, a loop on the left one.
static void introsort_loop(li_dllm_pair *a, int lo, int hi, int depth) {
    while (hi - lo > 16) {
        if (depth == 0) {  // __partial_sort(lo, hi, hi)
            heap_select(a + lo, hi - lo, hi - lo);
            sort_heap(a + lo, hi - lo);
            return;
        }
        depth--;
        int cut = partition_pivot(a, lo, hi);
        introsort_loop(a, cut, hi, depth);
        hi = cut;
    }
}

// std::sort(a + first, a + last): __introsort_loop (depth limit 2 __lg(n)), then
// __final_insertion_sort (a guarded insertion sort of the first 16, unguarded for the rest).
static void std_sort(li_dllm_pair *a, int first, int last) {
    if (last - first < 2) return;
    int depth = 0;
    for (int m = last - first; m > 1; m >>= 1)
        depth++;
    introsort_loop(a, first, last, 2 * depth);
    if (last - first > 16) {
        insertion_sort(a, first, first + 16);
        for (int i = first + 16; i < last; i++) {  // __unguarded_linear_insert
            li_dllm_pair v = a[i];
            int j = i;
            while (before(v, a[j - 1])) {
                a[j] = a[j - 1];
                j--;
            }
            a[j] = v;
        }
    } else {
        insertion_sort(a, first, last);
    }
}

// torch.topk's choice left in a[0, k): a[i] = (conf[i], i) first.
static void topk_torch_pairs(const double *conf, int n, int k, li_dllm_pair *a) {
    LI_ASSERT(k >= 1 && k <= n);
    for (int i = 0; i < n; i++)
        a[i] = (li_dllm_pair){conf[i], i};
    if ((int64_t)k * 64 <= n) {  // std::partial_sort: __heap_select (then __sort_heap: same set)
        heap_select(a, k, n);
        return;
    }
    // std::nth_element(a, a + k - 1, a + n): __introselect, depth limit 2 __lg(n)
    int first = 0, last = n, nth = k - 1, depth = 0;
    for (int m = n; m > 1; m >>= 1)
        depth++;
    depth *= 2;
    while (last - first > 3) {
        if (depth == 0) {
            heap_select(a + first, nth + 1 - first, last - first);
            swap_pairs(&a[first], &a[nth]);
            return;
        }
        depth--;
        int cut = partition_pivot(a, first, last);
        if (cut <= nth)
            first = cut;
        else
            last = cut;
    }
    insertion_sort(a, first, last);
    // (torch then sorts a[0, k - 1) for sorted=True: the set does not change)
}

static int int_cmp(const void *pa, const void *pb) {
    int a = *(const int *)pa, b = *(const int *)pb;
    return (a > b) - (a < b);
}

void li_dllm_topk_torch(const double *conf, int n, int k, int *idx, li_dllm_pair *work) {
    topk_torch_pairs(conf, n, k, work);
    for (int i = 0; i < k; i++)
        idx[i] = work[i].i;
    qsort(idx, (size_t)k, sizeof *idx, int_cmp);
}

int li_dllm_topk_torch_first(const double *conf, int n, int k, li_dllm_pair *work) {
    topk_torch_pairs(conf, n, k, work);
    if ((int64_t)k * 64 <= n)
        sort_heap(work, k);  // the rest of std::partial_sort
    else
        std_sort(work, 0, k - 1);  // torch's sorted=True after nth_element: a[k - 1] is in place
    return work[0].i;
}

// Candidate a ranks before b: higher confidence, then lower row.
static int rank_cmp(const void *pa, const void *pb) {
    const li_dllm_pair *a = pa, *b = pb;
    if (a->v != b->v) return a->v > b->v ? -1 : 1;
    return (a->i > b->i) - (a->i < b->i);
}

int li_dllm_select(const double *conf, int n, li_dllm_sel mode, int k, double tau, double f,
                   int *rows, li_dllm_pair *work) {
    int nc = 0;
    for (int r = 0; r < n; r++)
        if (conf[r] > -INFINITY) work[nc++] = (li_dllm_pair){conf[r], r};  // (drops NaN too)
    if (nc == 0) return 0;
    // The forward that precedes each call costs orders of magnitude more than this sort.
    qsort(work, (size_t)nc, sizeof *work, rank_cmp);
    int take = take_rule(NULL, work, nc, mode, k, tau, f);
    for (int i = 0; i < take; i++)
        rows[i] = work[i].i;
    if (take == 0 || take == nc || work[take - 1].v != work[take].v) return take;
    if (mode == LI_DLLM_SEL_THRESHOLD) {
        // Only a best below tau tied with others (take 1): Fast-dLLM keeps
        // torch.topk(conf, nc).indices[0], the first of its sorted order.
        LI_ASSERT(take == 1);
        rows[0] = li_dllm_topk_torch_first(conf, n, nc, work);
        return take;
    }
    // The cut splits a run of equal confidences: those of them torch.topk returns.
    const double tie = work[take].v;
    int above = 0;  // rows[0, above) rank strictly better and stay
    while (above < take && conf[rows[above]] != tie)
        above++;
    topk_torch_pairs(conf, n, take, work);
    int m = above;
    for (int i = 0; i < take; i++)
        if (work[i].v == tie) rows[m++] = work[i].i;
    LI_ASSERT(m == take);
    qsort(rows + above, (size_t)(take - above), sizeof *rows, int_cmp);
    return take;
}

float li_dllm_conf_f32(const float *l, int V, int32_t x0) {
    float mx = -INFINITY;
    for (int v = 0; v < V; v++)
        if (l[v] > mx) mx = l[v];
    // exp(l - max) correctly rounded to float (torch: Sleef's expf, within 1 ulp of it)
#define TERM(v) ((float)exp((double)(l[v] - mx)))
    float s;
    if (V < 8) {  // reduce_all under one vector: lane 0 in index order
        s = TERM(0);
        for (int v = 1; v < V; v++) s += TERM(v);
    } else {  // 8 lane sums, the tail into the first lanes, then the AVX2 shuffle tree
        float acc[8];
        int d = 8;
        for (int j = 0; j < 8; j++) acc[j] = TERM(j);
        for (; d + 8 <= V; d += 8)
            for (int j = 0; j < 8; j++) acc[j] += TERM(d + j);
        for (int j = 0; d + j < V; j++) acc[j] += TERM(d + j);
        float h[4], q[2];
        for (int j = 0; j < 4; j++) h[j] = acc[j] + acc[j + 4];  // 128-bit halves
        for (int j = 0; j < 2; j++) q[j] = h[j] + h[j + 2];      // 64-bit
        s = q[0] + q[1];                                         // 32-bit
    }
    const float inv = 1.0f / s;
    return (float)exp((double)(l[x0] - mx)) * inv;
#undef TERM
}

void li_dllm_dpad_probs(int window, double k_sigma, double scale, double *prob) {
    // numpy linspace(0, k, w): d * (k / (w - 1)), the last element exactly k; w == 1 gives [0].
    double step = window > 1 ? k_sigma / (double)(window - 1) : 0.0;
    for (int d = 0; d < window; d++) {
        double x = (window > 1 && d == window - 1) ? k_sigma : (double)d * step;
        prob[d] = scale * (exp(-x * x / 2.0) / sqrt(2.0 * M_PI)); // scipy norm.pdf order
    }
}

int li_dllm_dpad_draw(li_rng *rng, const double *prob, int window, int n_suffix, uint8_t *keep) {
    int kept = 0;
    for (int d = 0; d < n_suffix; d++)
        keep[d] = 0;
    for (int d = 0; d < window; d++) {
        double u = li_rng_uniform(rng); // drawn for every d, even past the canvas end
        if (d < n_suffix && u < prob[d]) {
            keep[d] = 1;
            kept++;
        }
    }
    return kept;
}
