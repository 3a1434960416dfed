// test-step.c — the step runner (src/backend/step.h) on a fake backend whose graphs record or
// refuse as told: a step runs once eagerly without graph support or without `record`; recorded,
// it runs once when the graph runs; when the graph cannot run (rerun) the host state is restored
// and the step queued again; a failing step is restored and not run again; the key reaches
// graph_begin; keys mix their parts in order.
#include "backend/step.h"
#include "test.h"

typedef struct {
    bool begin_records;   // graph_begin's answer
    bool end_rerun;       // graph_end sets *rerun
    li_status end_status; // graph_end's status
    uint64_t last_key;
    int n_begin, n_end;
} fake_graphs;

static fake_graphs g_fake;

static bool fake_begin(li_backend *be, uint64_t key) {
    g_fake.n_begin++;
    g_fake.last_key = key;
    return g_fake.begin_records;
}
static li_status fake_end(li_backend *be, bool *rerun) {
    g_fake.n_end++;
    *rerun = g_fake.end_rerun;
    return g_fake.end_status;
}

typedef struct {
    int runs, restores;
    int state;       // host state the step changes (+1 a run)
    li_status fail;  // what the step returns
} step_ctx;

static li_status step(void *p) {
    step_ctx *c = p;
    c->runs++;
    c->state++;
    return c->fail;
}
static void restore(void *p) {
    step_ctx *c = p;
    c->restores++;
    c->state = 0;
}

static void run_case(const char *name, li_backend *be, bool record, bool begin_records,
                     bool end_rerun, li_status end_status, li_status fail, li_status want_rc,
                     int want_runs, int want_restores, int want_end) {
    TEST_BEGIN(name);
    g_fake = (fake_graphs){begin_records, end_rerun, end_status, 0, 0, 0};
    step_ctx c = {.fail = fail};
    uint64_t key = li_step_key(li_step_key(LI_STEP_KEY_INIT, 7), 42);
    li_status rc = li_step_run(be, key, record, step, restore, &c);
    CHECK(rc == want_rc, "status %d, want %d", rc, want_rc);
    CHECK(c.runs == want_runs, "%d runs, want %d", c.runs, want_runs);
    CHECK(c.restores == want_restores, "%d restores, want %d", c.restores, want_restores);
    CHECK(g_fake.n_end == want_end, "%d graph_end calls, want %d", g_fake.n_end, want_end);
    if (g_fake.n_begin) CHECK(g_fake.last_key == key, "graph_begin got another key");
    if (!record || !be->ops->graph_begin) CHECK(g_fake.n_begin == 0, "graph_begin called");
    // after a restore and a re-run the state is one run's, as if the recording never was
    CHECK(c.state == (c.restores ? c.runs - 1 : c.runs) || rc != LI_OK, "state %d", c.state);
    TEST_END();
}

int main(void) {
    li_rng rng;
    uint64_t seed = test_rng_init(&rng, "test-step");
    li_backend_ops graphs = {.name = "fake-graphs", .graph_begin = fake_begin,
                             .graph_end = fake_end};
    li_backend_ops none = {.name = "fake-none"};
    li_backend be_graphs = {.ops = &graphs}, be_none = {.ops = &none};

    run_case("no graph support: the step runs once, eagerly", &be_none, true, false, false,
             LI_OK, LI_OK, LI_OK, 1, 0, 0);
    run_case("record false: no graph_begin, one eager run", &be_graphs, false, true, false,
             LI_OK, LI_OK, LI_OK, 1, 0, 0);
    run_case("recorded and run as a graph: one run, no restore", &be_graphs, true, true, false,
             LI_OK, LI_OK, LI_OK, 1, 0, 1);
    run_case("first sight of a key (graph_begin false): eager, no graph_end", &be_graphs, true,
             false, false, LI_OK, LI_OK, LI_OK, 1, 0, 0);
    run_case("the recording cannot run: restored, queued again eagerly", &be_graphs, true, true,
             true, LI_OK, LI_OK, LI_OK, 2, 1, 1);
    run_case("graph_end fails: restored, not run again, its status", &be_graphs, true, true,
             false, LI_ERR_BACKEND, LI_OK, LI_ERR_BACKEND, 1, 1, 1);
    run_case("the step fails while recording: restored, the step's status", &be_graphs, true,
             true, true, LI_OK, LI_ERR_OOM, LI_ERR_OOM, 1, 1, 1);
    run_case("the step fails eagerly: its status, nothing to restore", &be_none, true, false,
             false, LI_OK, LI_ERR_OOM, LI_ERR_OOM, 1, 0, 0);

    TEST_BEGIN("step keys: parts mixed in order, any part changes the key");
    uint64_t a = li_rng_u64(&rng), b = li_rng_u64(&rng) | 1;
    uint64_t k1 = li_step_key(li_step_key(LI_STEP_KEY_INIT, a), b);
    uint64_t k2 = li_step_key(li_step_key(LI_STEP_KEY_INIT, b), a);
    uint64_t k3 = li_step_key(li_step_key(LI_STEP_KEY_INIT, a), b ^ 2);
    CHECK(k1 != k2 && k1 != k3, "keys collide; seed %llu", (unsigned long long)seed);
    CHECK(k1 == li_step_key(li_step_key(LI_STEP_KEY_INIT, a), b), "not a function of the parts");
    TEST_END();
    return test_summary();
}
