// attention-cudnn.cpp — attention-cudnn.h over the cuDNN frontend's graph API (C++17, header
// only, pinned by scripts/setup-cuda.sh). The one C++ file of the engine: it builds one SDPA graph
// per shape class, caches it, and runs it on the backend's stream.
//
// Shapes: Q and O are (s_q, H, Dh) row-major, described to cuDNN as dims (b, H, s_q, Dh) with
// strides (s_q H Dh, Dh, H Dh, 1) ("BSHD"); K and V likewise (s_kv, Hkv, Dh). Ragged calls pack
// the entries one after another ("THD"): the same strides, each entry's start given by a ragged
// offset tensor (b + 1 element offsets), its rows and keys by seq_q / seq_kv, and the stats
// packed (rows, H) with their own offsets. Padded calls are dense ones of a size class whose real
// lengths come from seq_q / seq_kv (the padding mask), so one plan serves the whole class.
//
// Not here: choosing what to run through cuDNN (backend-cuda.c and attn-blocks.c), the query
// rotation and the merge of blocks (attention-blocks.cu). Checked by tests/gpu/gpu-check.c against
// the CPU oracle.
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#include <cudnn_frontend.h>

#include <dlfcn.h>

#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "attention-cudnn.h"

namespace fe = cudnn_frontend;

// The frontend's dynamic-loading shim reads the library handle from here.
namespace cudnn_frontend {
void *cudnn_dlhandle = nullptr;
}

#define LI_CUDNN_PLANS 64

namespace {

enum : int64_t {
    UID_Q = 1, UID_K, UID_V, UID_O, UID_LSE, UID_SEQ_Q, UID_SEQ_KV,
    UID_Q_OFF, UID_KV_OFF, UID_O_OFF, UID_V_OFF, UID_LSE_OFF
};

// What decides a graph: everything in li_sdpa_args except pointers and per-entry lengths.
struct plan_key {
    int kind, b, H, Hkv, Dh, s_q, s_kv;
    bool causal, lse;
    float scale;
    bool operator==(const plan_key &o) const {
        return kind == o.kind && b == o.b && H == o.H && Hkv == o.Hkv && Dh == o.Dh &&
               s_q == o.s_q && s_kv == o.s_kv && causal == o.causal && lse == o.lse &&
               std::memcmp(&scale, &o.scale, sizeof scale) == 0;
    }
};

struct plan {
    plan_key key;
    std::shared_ptr<fe::graph::Graph> graph;  // null: cuDNN has no engine for this key
    int64_t workspace = 0;
    uint64_t last_used = 0;
};

void say(char *err, size_t n, const char *fmt, ...) {
    if (!err || n == 0) return;
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(err, n, fmt, ap);
    va_end(ap);
}

}  // namespace

struct li_cudnn {
    cudnnHandle_t handle = nullptr;
    cudaStream_t stream = nullptr;
    std::vector<plan> plans;
    uint64_t tick = 0;
    void *workspace = nullptr;
    size_t workspace_bytes = 0;
    li_cudnn_stats stats{};
    int version = 0;
};

namespace {

// Q / O as dims (b, H, s_q, Dh) over (b, s_q, H, Dh) memory.
std::vector<int64_t> bshd_dim(int64_t b, int64_t h, int64_t s, int64_t d) { return {b, h, s, d}; }
std::vector<int64_t> bshd_stride(int64_t h, int64_t s, int64_t d) {
    return {s * h * d, d, h * d, 1};
}

// An int32 index tensor of n values: seq_q / seq_kv (b) or ragged offsets (b + 1).
std::shared_ptr<fe::graph::Tensor_attributes> int_tensor(fe::graph::Graph &g, const char *name,
                                                         int64_t uid, int64_t n) {
    return g.tensor(fe::graph::Tensor_attributes()
                        .set_name(name)
                        .set_uid(uid)
                        .set_dim({n, 1, 1, 1})
                        .set_stride({1, 1, 1, 1})
                        .set_data_type(fe::DataType_t::INT32));
}

// Builds the graph of key k; null (reason in err) when cuDNN cannot run it.
std::shared_ptr<fe::graph::Graph> build_graph(li_cudnn *c, const plan_key &k, int64_t *ws,
                                              char *err, size_t n_err) {
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    auto Q = g->tensor(fe::graph::Tensor_attributes()
                           .set_name("Q")
                           .set_uid(UID_Q)
                           .set_dim(bshd_dim(k.b, k.H, k.s_q, k.Dh))
                           .set_stride(bshd_stride(k.H, k.s_q, k.Dh)));
    const auto kv_dim = bshd_dim(k.b, k.Hkv, k.s_kv, k.Dh);
    const auto kv_stride = bshd_stride(k.Hkv, k.s_kv, k.Dh);
    auto K = g->tensor(
        fe::graph::Tensor_attributes().set_name("K").set_uid(UID_K).set_dim(kv_dim).set_stride(kv_stride));
    auto V = g->tensor(
        fe::graph::Tensor_attributes().set_name("V").set_uid(UID_V).set_dim(kv_dim).set_stride(kv_stride));
    auto opt = fe::graph::SDPA_attributes()
                   .set_name("sdpa")
                   .set_generate_stats(k.lse)
                   .set_attn_scale(k.scale);
    if (k.causal) opt.set_causal_mask_bottom_right(true);
    const bool ragged = k.kind == LI_SDPA_RAGGED;
    if (k.kind == LI_SDPA_PADDED)  // real lengths from device tensors, in the dense layout
        opt.set_padding_mask(true)
            .set_seq_len_q(int_tensor(*g, "seq_q", UID_SEQ_Q, k.b))
            .set_seq_len_kv(int_tensor(*g, "seq_kv", UID_SEQ_KV, k.b));
    if (ragged) {
        // packed entries: the offsets place each entry, so the batch stride is only checked:
        // it must be the largest stride and keep 16-byte alignment (INT32_MAX, PyTorch's
        // choice, fails the latter on cuDNN 9.19 once b > 1), hence the padded layout's
        Q->set_stride(bshd_stride(k.H, k.s_q, k.Dh));
        K->set_stride(kv_stride);
        V->set_stride(kv_stride);
        opt.set_padding_mask(true)
            .set_seq_len_q(int_tensor(*g, "seq_q", UID_SEQ_Q, k.b))
            .set_seq_len_kv(int_tensor(*g, "seq_kv", UID_SEQ_KV, k.b));
        Q->set_ragged_offset(int_tensor(*g, "q_off", UID_Q_OFF, k.b + 1));
        K->set_ragged_offset(int_tensor(*g, "k_off", UID_KV_OFF, k.b + 1));
        V->set_ragged_offset(int_tensor(*g, "v_off", UID_V_OFF, k.b + 1));
    }
    auto [O, stats] = g->sdpa(Q, K, V, opt);
    O->set_output(true)
        .set_uid(UID_O)
        .set_dim(bshd_dim(k.b, k.H, k.s_q, k.Dh))
        .set_stride(bshd_stride(k.H, k.s_q, k.Dh));
    if (ragged)
        O->set_ragged_offset(int_tensor(*g, "o_off", UID_O_OFF, k.b + 1));
    if (k.lse) {
        // (rows, H) per entry: row stride H, head stride 1
        stats->set_output(true)
            .set_uid(UID_LSE)
            .set_data_type(fe::DataType_t::FLOAT)
            .set_dim({k.b, k.H, k.s_q, 1})
            .set_stride({(int64_t)k.H * k.s_q, 1, k.H, 1});
        if (ragged) stats->set_ragged_offset(int_tensor(*g, "lse_off", UID_LSE_OFF, k.b + 1));
    }
    auto st = g->build(c->handle, {fe::HeurMode_t::A});
    if (!st.is_good()) {
        say(err, n_err, "cuDNN SDPA: no plan for this shape: %s", st.get_message().c_str());
        return nullptr;
    }
    st = g->get_workspace_size(*ws);
    if (!st.is_good()) {
        say(err, n_err, "cuDNN SDPA: workspace size: %s", st.get_message().c_str());
        return nullptr;
    }
    return g;
}

plan *find_plan(li_cudnn *c, const plan_key &k, char *err, size_t n_err) {
    c->tick++;
    for (plan &p : c->plans)
        if (p.key == k) {
            p.last_used = c->tick;
            return &p;
        }
    plan *p;
    if (c->plans.size() < LI_CUDNN_PLANS) {
        c->plans.emplace_back();
        p = &c->plans.back();
    } else {
        p = &c->plans[0];
        for (plan &q : c->plans)
            if (q.last_used < p->last_used) p = &q;
        *p = plan{};
    }
    p->key = k;
    p->last_used = c->tick;
    auto t0 = std::chrono::steady_clock::now();
    p->graph = build_graph(c, k, &p->workspace, err, n_err);
    c->stats.build_ms +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (p->graph) c->stats.plans_built++;
    else c->stats.unsupported++;
    return p;
}

}  // namespace

extern "C" li_cudnn *li_cudnn_open(cudaStream_t stream, const char *name, char *err,
                                   size_t n_err) {
    if (!fe::cudnn_dlhandle) {
        fe::cudnn_dlhandle = dlopen(name && *name ? name : "libcudnn.so.9", RTLD_NOW | RTLD_GLOBAL);
        if (!fe::cudnn_dlhandle) {
            const char *why = dlerror();
            say(err, n_err, "cannot load cuDNN (%s): %s; set LI_CUDNN_LIB or LD_LIBRARY_PATH "
                "(docs/CUDA.md)", name && *name ? name : "libcudnn.so.9", why ? why : "?");
            return nullptr;
        }
    }
    li_cudnn *c = new (std::nothrow) li_cudnn;
    if (!c) {
        say(err, n_err, "out of memory");
        return nullptr;
    }
    try {
        c->version = (int)fe::detail::get_backend_version();
        if (c->version < 90700) {
            say(err, n_err, "cuDNN %d is too old: SDPA with padding and bottom-right causal masks "
                "needs 9.7 or newer", c->version);
            delete c;
            return nullptr;
        }
        if (fe::detail::create_handle(&c->handle) != CUDNN_STATUS_SUCCESS ||
            fe::detail::set_stream(c->handle, stream) != CUDNN_STATUS_SUCCESS) {
            say(err, n_err, "cuDNN: cannot create a handle on this device");
            if (c->handle) fe::detail::destroy_handle(c->handle);
            delete c;
            return nullptr;
        }
    } catch (const std::exception &e) {
        say(err, n_err, "cuDNN: %s", e.what());
        delete c;
        return nullptr;
    }
    c->stream = stream;
    return c;
}

extern "C" void li_cudnn_close(li_cudnn *c) {
    if (!c) return;
    c->plans.clear();
    if (c->workspace) cudaFree(c->workspace);
    if (c->handle) fe::detail::destroy_handle(c->handle);
    delete c;
}

// The call's shape, in plan_key's field order.
static plan_key key_of(const li_sdpa_args *a) {
    const bool lse = a->lse != nullptr;  // whether the call wants the log-sum-exps
    return plan_key{a->kind, a->b, a->H, a->Hkv, a->Dh, a->s_q, a->s_kv, a->causal, lse, a->scale};
}

extern "C" int li_cudnn_prepare(li_cudnn *c, const li_sdpa_args *a, char *err, size_t n_err) {
    try {
        return find_plan(c, key_of(a), err, n_err)->graph ? 0 : 1;
    } catch (const std::exception &e) {
        say(err, n_err, "cuDNN SDPA: %s", e.what());
        return -1;
    }
}

extern "C" int li_cudnn_sdpa(li_cudnn *c, const li_sdpa_args *a, char *err, size_t n_err) {
    const plan_key k = key_of(a);
    try {
        plan *p = find_plan(c, k, err, n_err);
        if (!p->graph) {
            if (err && !err[0]) say(err, n_err, "cuDNN SDPA: shape not supported");
            return 1;
        }
        if ((size_t)p->workspace > c->workspace_bytes) {
            if (c->workspace) cudaFree(c->workspace);
            c->workspace = nullptr;
            c->workspace_bytes = 0;
            if (cudaMalloc(&c->workspace, (size_t)p->workspace) != cudaSuccess) {
                say(err, n_err, "cuDNN SDPA: cannot allocate %lld bytes of workspace",
                    (long long)p->workspace);
                return -1;
            }
            c->workspace_bytes = (size_t)p->workspace;
            c->stats.workspace_allocs++;
        }
        std::unordered_map<int64_t, void *> pack = {
            {UID_Q, const_cast<void *>(a->q)},
            {UID_K, const_cast<void *>(a->k)},
            {UID_V, const_cast<void *>(a->v)},
            {UID_O, a->o},
        };
        if (a->lse) pack[UID_LSE] = a->lse;
        if (a->kind != LI_SDPA_DENSE) {
            pack[UID_SEQ_Q] = const_cast<int32_t *>(a->seq_q);
            pack[UID_SEQ_KV] = const_cast<int32_t *>(a->seq_kv);
        }
        if (a->kind == LI_SDPA_RAGGED) {
            pack[UID_Q_OFF] = const_cast<int32_t *>(a->q_off);
            pack[UID_O_OFF] = const_cast<int32_t *>(a->q_off);  // O packed as Q
            pack[UID_KV_OFF] = const_cast<int32_t *>(a->kv_off);
            pack[UID_V_OFF] = const_cast<int32_t *>(a->kv_off);  // V packed as K
            if (a->lse) pack[UID_LSE_OFF] = const_cast<int32_t *>(a->lse_off);
        }
        auto st = p->graph->execute(c->handle, pack, c->workspace);
        if (!st.is_good()) {
            say(err, n_err, "cuDNN SDPA: %s", st.get_message().c_str());
            return -1;
        }
        c->stats.calls++;
        return 0;
    } catch (const std::exception &e) {
        say(err, n_err, "cuDNN SDPA: %s", e.what());
        return -1;
    }
}

extern "C" void li_cudnn_get_stats(const li_cudnn *c, li_cudnn_stats *out) {
    if (c) *out = c->stats;
    else std::memset(out, 0, sizeof *out);
}

extern "C" int li_cudnn_version(const li_cudnn *c) { return c ? c->version : 0; }
