// backend-cuda-profile.c — LI_CUDA_PROFILE=1: an event after every op (cu_fail / lt_fail call
// li_cu_prof_mark), the intervals summed per op name, the table printed on stderr at teardown.
//
// Not here: what turns it on (li_backend_cuda_init reads the switch), cuDNN's own counts
// (backend-cuda.c prints them at teardown). Not tested by a program: its output is read by people
// (bench/gpu-run.sh's `profile` step).
#include "backend-cuda-internal.h"

// ---- LI_CUDA_PROFILE ----------------------------------------------------------------------------

// Waits for the recorded events and adds each interval to its op's row; the last event stays as
// the start of the next interval.
static void prof_flush(li_cuda_impl *im) {
    if (im->n_prof_ev < 2) return;
    cudaEventSynchronize(im->prof_ev[im->n_prof_ev - 1]);
    for (int i = 1; i < im->n_prof_ev; i++) {
        float ms = 0;
        if (cudaEventElapsedTime(&ms, im->prof_ev[i - 1], im->prof_ev[i]) != cudaSuccess) continue;
        int r = 0;
        while (r < im->n_prof_rows && strncmp(im->prof_rows[r].op, im->prof_op[i],
                                              sizeof im->prof_rows[r].op - 1))
            r++;
        if (r == im->n_prof_rows) {
            if (r == LI_PROF_ROWS) continue;
            im->n_prof_rows++;
            snprintf(im->prof_rows[r].op, sizeof im->prof_rows[r].op, "%s", im->prof_op[i]);
        }
        im->prof_rows[r].ms += ms;
        im->prof_rows[r].calls++;
    }
    cudaEvent_t last = im->prof_ev[im->n_prof_ev - 1];
    im->prof_ev[im->n_prof_ev - 1] = im->prof_ev[0];
    im->prof_ev[0] = last;
    im->n_prof_ev = 1;
}

void li_cu_prof_mark(li_cuda_impl *im, const char *op) {
    if (!im->prof) return;
    if (im->n_prof_ev == LI_PROF_EVENTS) prof_flush(im);
    if (cudaEventRecord(im->prof_ev[im->n_prof_ev], im->stream) == cudaSuccess)
        im->prof_op[im->n_prof_ev++] = op;
}

void li_cu_prof_report(li_cuda_impl *im) {
    prof_flush(im);
    double total = 0;
    for (int r = 0; r < im->n_prof_rows; r++) total += im->prof_rows[r].ms;
    fprintf(stderr, "cuda profile (LI_CUDA_PROFILE): %.1f ms in all\n%-44s %9s %10s %6s\n",
            total, "op", "calls", "ms", "%");
    for (int k = 0; k < im->n_prof_rows; k++) {  // largest first
        int b = k;
        for (int r = k + 1; r < im->n_prof_rows; r++)
            if (im->prof_rows[r].ms > im->prof_rows[b].ms) b = r;
        prof_row t = im->prof_rows[k];
        im->prof_rows[k] = im->prof_rows[b];
        im->prof_rows[b] = t;
        fprintf(stderr, "%-44s %9lld %10.2f %6.1f\n", im->prof_rows[k].op,
                (long long)im->prof_rows[k].calls, im->prof_rows[k].ms,
                total > 0 ? 100 * im->prof_rows[k].ms / total : 0);
    }
}
