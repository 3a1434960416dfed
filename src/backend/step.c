// step.c — the step runner (step.h): graph recording around a model's step, and the eager re-run
// when the recording could not run.
#include "step.h"

li_status li_step_run(li_backend *be, uint64_t key, bool record, li_step_fn step,
                      li_step_restore_fn restore, void *ctx) {
    bool recording = record && li_be_graph_begin(be, key), rerun = false;
    li_status rc = step(ctx);
    if (!recording) return rc;
    li_status rc_end = li_be_graph_end(be, &rerun);
    if (rc == LI_OK) rc = rc_end;
    if ((rc != LI_OK || rerun) && restore) restore(ctx);  // nothing of the recording ran
    if (rc == LI_OK && rerun) rc = step(ctx);             // not recorded: queued again, eagerly
    return rc;
}
