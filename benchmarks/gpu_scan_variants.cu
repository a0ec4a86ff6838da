// Device-side timing of the row-scan kernels (src/gpu) without the Python
// layers: every float32 estimator (GAE with last_value, GAE with truncations
// and bootstrap_values, TD(lambda) returns, V-trace vs + pg, the puff
// advantage) at several occupancy targets (launch bounds), over SPEC section 5
// shapes, against a device-to-device copy. Each output is checked against a
// float64 reference on the host before it is timed. For kernel variants and Nsight
// Compute (`--profile`: one launch of each, 65536x128), in one call on the GPU machine:
//
//   nvcc -std=c++17 -O3 -arch=sm_90 --expt-relaxed-constexpr -Isrc \
//        benchmarks/gpu_scan_variants.cu -o /tmp/variants && /tmp/variants
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "gpu/launch.cuh"
#include "gpu/standard_store.cuh"  // and standard_steps.cuh, the producer it stores for

using namespace puffadv::gpu;

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            std::fprintf(stderr, "%s failed: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__); \
            std::exit(2);                                                                          \
        }                                                                                          \
    } while (0)

namespace {

constexpr float kGamma = 0.99f, kLambda = 0.95f, kRho = 1.5f, kC = 1.0f, kRhoPg = 1.2f;
enum class kind { gae_last, gae_trunc, td_lambda, vtrace, puff };
const char* name_of(kind k) {
    switch (k) {
        case kind::gae_last: return "gae last_value";
        case kind::gae_trunc: return "gae trunc+bootstrap";
        case kind::td_lambda: return "td_lambda returns";
        case kind::vtrace: return "vtrace vs+pg";
        default: return "puff";
    }
}
/// Bytes each case really reads and writes per element (float32 flags).
int bytes_of(kind k) {
    switch (k) {
        case kind::gae_last: return 16;   // r, v, term; A
        case kind::gae_trunc: return 24;  // r, v, term, trunc, bootstrap_values; A
        case kind::td_lambda: return 16;  // r, v, term; G
        case kind::vtrace: return 24;     // r, v, term, ratio; vs, pg
        default: return 20;               // v, r, d, imp; A
    }
}

struct host_set {
    std::vector<float> v, r, term, trunc, boot, ratio, last, done;
};

host_set make_host(std::int64_t rows, std::int64_t h, unsigned seed) {
    std::mt19937 g(seed);
    std::normal_distribution<float> n;
    std::uniform_real_distribution<float> u;
    const std::size_t e = std::size_t(rows * h);
    host_set s;
    s.v.resize(e), s.r.resize(e), s.term.resize(e), s.trunc.resize(e), s.boot.resize(e), s.ratio.resize(e);
    s.done.resize(e), s.last.resize(std::size_t(rows));
    for (std::size_t i = 0; i < e; ++i) {
        s.v[i] = n(g), s.r[i] = n(g), s.boot[i] = n(g), s.ratio[i] = 2 * u(g);
        const float x = u(g);
        s.term[i] = x < 0.05f, s.trunc[i] = x >= 0.05f && x < 0.06f, s.done[i] = x < 0.1f;
    }
    for (auto& x : s.last) x = n(g);
    return s;
}

/// float64 reference of docs/conventions.md (and SPEC section 1 for the puff advantage).
std::vector<double> reference(kind k, const host_set& s, std::int64_t rows, std::int64_t h, bool second) {
    std::vector<double> out(std::size_t(rows * h));
    for (std::int64_t row = 0; row < rows; ++row) {
        const std::size_t o = std::size_t(row * h);
        double a = 0;
        if (k == kind::puff) {
            out[o + h - 1] = 0;
            for (std::int64_t t = h - 2; t >= 0; --t) {
                const double nd = 1.0 - s.done[o + t + 1], imp = s.ratio[o + t];
                const double delta = std::min(imp, double(kRho)) *
                                     (s.r[o + t + 1] + double(kGamma) * s.v[o + t + 1] * nd - s.v[o + t]);
                a = delta + double(kGamma) * kLambda * std::min(imp, double(kC)) * nd * a;
                out[o + t] = a;
            }
            continue;
        }
        const bool trunc = k == kind::gae_trunc, ratio = k == kind::vtrace;
        const double lam = k == kind::vtrace ? 1.0 : kLambda;
        std::vector<double> vs(std::size_t(h) + 1, 0.0);
        for (std::int64_t t = h - 1; t >= 0; --t) {
            const std::size_t i = o + t;
            const bool term = s.term[i] != 0, tr = trunc && s.trunc[i] != 0, last = t == h - 1;
            const double vnext = last ? (trunc ? s.boot[i] : s.last[row]) : (tr ? s.boot[i] : s.v[i + 1]);
            const double w = ratio ? s.ratio[i] : 1.0;
            const double rho = std::min(w, double(kRho)), c = std::min(w, double(kC));
            const double delta = rho * (s.r[i] + (term ? 0.0 : kGamma * vnext) - s.v[i]);
            a = delta + ((term || tr || last) ? 0.0 : double(kGamma) * lam * c * a);
            vs[t] = a + s.v[i];
            if (k == kind::vtrace && second) {
                const double vsn = (last || tr) ? vnext : vs[t + 1];
                out[i] = std::min(w, double(kRhoPg)) * (s.r[i] + (term ? 0.0 : kGamma * vsn) - s.v[i]);
            } else {
                out[i] = (k == kind::td_lambda || k == kind::vtrace) ? vs[t] : a;
            }
        }
    }
    return out;
}

struct device_set {
    float *v, *r, *term, *trunc, *boot, *ratio, *last, *done, *out, *out2;
};

float* upload(const std::vector<float>& x) {
    float* p;
    CHECK(cudaMalloc(&p, x.size() * sizeof(float)));
    CHECK(cudaMemcpy(p, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
    return p;
}

device_set make_device(const host_set& s, std::size_t e) {
    device_set d{upload(s.v), upload(s.r), upload(s.term), upload(s.trunc), upload(s.boot),
                 upload(s.ratio), upload(s.last), upload(s.done), nullptr, nullptr};
    CHECK(cudaMalloc(&d.out, e * sizeof(float)));
    CHECK(cudaMalloc(&d.out2, e * sizeof(float)));
    return d;
}

void release(device_set& d) {
    for (float* p : {d.v, d.r, d.term, d.trunc, d.boot, d.ratio, d.last, d.done, d.out, d.out2}) cudaFree(p);
}

cudaStream_t g_stream = nullptr;  ///< where launches go (graph capture needs a stream of its own)

/// How a variant reads its rows: block kernels of aligned vectors (scan_rows.cuh),
/// row groups of aligned vectors (scan_row_groups.cuh), flat block kernels (one
/// packed run, any horizon). Row groups of scalar loads (any horizon) were tried
/// on 2026-12-02 and lost everywhere (docs/benchmarks.md).
enum class reads { blocks, groups, flat };

/// Known: the standard producer knows at compile time which optional inputs
/// the case reads (inputs_known), else it looks at run time.
template <typename Policy, reads How = reads::blocks, bool Known = false>
void launch(kind k, const device_set& d, std::int64_t rows, std::int64_t h, int sms) {
    constexpr bool Groups = How == reads::groups, Flat = How == reads::flat;
    using view = strided_view<const float>;
    const view none{nullptr, 0, 0};
    auto m = [&](const float* p) { return view{p, h, 1}; };
    const strided_view<float> out{d.out, h, 1}, out2{d.out2, h, 1}, nothing{nullptr, 0, 0};
    const row_scan_plan plan = plan_row_scan<Policy>(rows, h, true, sms, Flat, Groups);
    const carry_slots<float> scratch{reinterpret_cast<unsigned char*>(d.out), h * 4, 4};
    cudaError_t e = cudaSuccess;
    auto scan = [&](const auto& producer, const auto& epilogue) {
        return launch_row_scan<Policy, true, Flat>(plan, producer, epilogue, scratch, rows, h, g_stream);
    };
    if (k == kind::puff) {
        const puff_producer<float> p{m(d.v), m(d.r), m(d.done), m(d.ratio), kGamma, kGamma * kLambda, kRho, kC};
        e = scan(p, store_advantage<float>{out});
    } else {
        const bool trunc = k == kind::gae_trunc, ratio = k == kind::vtrace;
        const float lam = k == kind::vtrace ? 1.0f : kLambda;
        auto run = [&](auto inputs) {
            using Inputs = decltype(inputs);
            const standard_producer<float, view, view, Inputs> p{
                m(d.v), m(d.r), m(d.term), trunc ? m(d.trunc) : none, ratio ? m(d.ratio) : none,
                trunc ? m(d.boot) : none, view{d.last, 1, 0}, h, kGamma, kGamma * lam, kRho, kC};
            if (k == kind::vtrace) {
                const store_estimate<float, strided_view<float>, true> ep{out2, out, kGamma, kRhoPg, true, h};
                e = scan(p, ep);
            } else {
                const bool returns = k == kind::td_lambda;
                const store_estimate<float, strided_view<float>> ep{returns ? nothing : out, returns ? out : nothing};
                e = scan(p, ep);
            }
        };
        if constexpr (Known) {
            if (trunc)
                run(inputs_known<true, false>{});
            else if (ratio)
                run(inputs_known<false, true>{});
            else
                run(inputs_known<false, false>{});
        } else {
            run(inputs_at_run_time{});
        }
    }
    CHECK(e);
}

using launcher = void (*)(kind, const device_set&, std::int64_t, std::int64_t, int);
struct variant {
    const char* name;
    launcher fn;
};
/// Steps per thread x blocks per SM asked of the compiler (launch bounds);
/// "g": whole rows of up to max_group_rounds warp rounds in row groups
/// (scan_row_groups.cuh), else the block kernels (the measurements: `git show 909ec82:docs/benchmarks.md`,
/// "row groups").
const variant kVariants[] = {
    {"4x4", launch<row_scan_policy<4, 4>>}, {"8x4", launch<row_scan_policy<8, 4>>},
    {"g4x4", launch<row_scan_policy<4, 4, 4>, reads::groups>},
    {"g8x4", launch<row_scan_policy<8, 4, 4>, reads::groups>},
    // "k": the optional inputs fixed at compile time (inputs_known)
    {"gk4x4", launch<row_scan_policy<4, 4, 4>, reads::groups, true>},
    {"gk4x5", launch<row_scan_policy<4, 5, 5>, reads::groups, true>},
    {"gk8x4", launch<row_scan_policy<8, 4, 4>, reads::groups, true>},
    {"gk8x5", launch<row_scan_policy<8, 5, 5>, reads::groups, true>},
    {"gk16x2", launch<row_scan_policy<16, 2, 2>, reads::groups, true>},
    // "bk": the block kernels with the inputs fixed; "tN": N threads a block
    {"bk4x4", launch<row_scan_policy<4, 4>, reads::blocks, true>},
    {"bk4x6", launch<row_scan_policy<4, 6>, reads::blocks, true>},
    {"bk8x4", launch<row_scan_policy<8, 4>, reads::blocks, true>},
    {"bk8t128", launch<row_scan_policy<8, 8, 4, 128>, reads::blocks, true>},
    {"bk2t64", launch<row_scan_policy<2, 16, 4, 64>, reads::blocks, true>},
    {"bk4t64", launch<row_scan_policy<4, 16, 4, 64>, reads::blocks, true>},
    {"bk2t128", launch<row_scan_policy<2, 8, 4, 128>, reads::blocks, true>},
    // any horizon: "fk" flat block kernels (the library's choice for unaligned rows)
    {"fk4x6", launch<row_scan_policy<4, 6>, reads::flat, true>},
    {"fk4x4", launch<row_scan_policy<4, 4>, reads::flat, true>},
    // the library's long_row_policy (launch.cuh)
    {"long", launch<long_row_policy, reads::blocks, true>}};

double rel_error(const std::vector<float>& got, const std::vector<double>& want) {
    double num = 0, den = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
        const double d = got[i] - want[i];
        num += std::isnan(d) ? INFINITY : d * d, den += want[i] * want[i];
    }
    return std::sqrt(num / den);
}

float time_ms(cudaEvent_t a, cudaEvent_t b) {
    float ms;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    return ms;
}

/// Device time of one call as bench_conventions.py measures it: the median of 7
/// replays of a CUDA graph of `calls` calls of enqueue(i) on g_stream, per call.
template <typename Enqueue>
double graph_time_us(int calls, Enqueue&& enqueue) {
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CHECK(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < calls; ++i) enqueue(i);
    CHECK(cudaStreamEndCapture(g_stream, &graph));
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CHECK(cudaGraphLaunch(exec, g_stream));
    std::vector<float> t;
    for (int rep = 0; rep < 7; ++rep) {
        CHECK(cudaEventRecord(a, g_stream));
        CHECK(cudaGraphLaunch(exec, g_stream));
        CHECK(cudaEventRecord(b, g_stream));
        CHECK(cudaEventSynchronize(b));
        t.push_back(time_ms(a, b) * 1000.0f / calls);
    }
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
    CHECK(cudaEventDestroy(a));
    CHECK(cudaEventDestroy(b));
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    // --profile: one launch of each, untimed (for ncu), at 65536x128 unless
    // --shape RxH; --variant A,B: those only; --shape RxH[,RxH]: those shapes.
    bool profile = false;
    const char* only = nullptr;
    std::vector<std::pair<std::int64_t, std::int64_t>> asked;
    for (int i = 1; i < argc; ++i) {
        if (std::string(argv[i]) == "--profile") profile = true;
        if (std::string(argv[i]) == "--variant" && i + 1 < argc) only = argv[++i];
        if (std::string(argv[i]) == "--shape" && i + 1 < argc) {
            for (const char* p = argv[++i]; *p;) {
                char* end;
                const long long r = std::strtoll(p, &end, 10), h = std::strtoll(end + 1, &end, 10);
                asked.emplace_back(r, h);
                p = *end ? end + 1 : end;
            }
        }
    }
    int sms;
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    CHECK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));

    // Copy bandwidth: 1 GiB read + 1 GiB written, median of 10.
    double copy_gbs = 0;
    {
        const std::size_t n = std::size_t(1) << 30;
        void *src, *dst;
        CHECK(cudaMalloc(&src, n));
        CHECK(cudaMalloc(&dst, n));
        CHECK(cudaMemset(src, 1, n));
        std::vector<float> t;
        for (int i = 0; i < 11; ++i) {
            CHECK(cudaEventRecord(a));
            CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice));
            CHECK(cudaEventRecord(b));
            CHECK(cudaEventSynchronize(b));
            if (i) t.push_back(time_ms(a, b));
        }
        std::sort(t.begin(), t.end());
        copy_gbs = 2.0 * n / (t[t.size() / 2] * 1e-3) / 1e9;
        cudaFree(src), cudaFree(dst);
    }
    std::printf("copy bandwidth %.0f GB/s\n", copy_gbs);

    std::vector<std::pair<std::int64_t, std::int64_t>> shapes = {
        {65536, 128}, {1048576, 8}, {4096, 1024}, {1024, 128}, {8192, 64}, {4096, 64}, {8, 131072}};
    if (profile) shapes = {{65536, 128}};
    if (!asked.empty()) shapes = asked;
    const kind kinds[] = {kind::gae_last, kind::gae_trunc, kind::td_lambda, kind::vtrace, kind::puff};
    int failures = 0;
    std::printf("%-14s %-20s %-9s %9s %8s %7s %9s\n", "shape", "case", "variant", "us", "GB/s", "%copy", "rel err");
    for (const auto& shape : shapes) {
        const std::int64_t rows = shape.first, h = shape.second;
        const std::size_t e = std::size_t(rows * h);
        // Sets of inputs cycled so that the timed launches read past the 60 MB L2
        // (3x its size, as bench_conventions.py): small calls then wait for DRAM
        // as a user's do, not for the L2.
        const std::size_t set_bytes = e * 36;
        const int sets = profile ? 1 : int(std::min<std::size_t>(64, (std::size_t(180) << 20) / set_bytes + 1));
        std::vector<host_set> hosts;
        std::vector<device_set> devs;
        for (int i = 0; i < sets; ++i) {
            hosts.push_back(make_host(rows, h, 17 + i));
            devs.push_back(make_device(hosts.back(), e));
        }
        if (!profile) {
            // A copy of GAE's bytes (16 a step: 8 read, 8 written) in graph replays: what
            // the fixed costs of one kernel (launch, first loads, last stores) leave of
            // the large copy's bandwidth at this size.
            const std::size_t n = e * 8;
            void *src, *dst;
            CHECK(cudaMalloc(&src, n * 4));
            CHECK(cudaMalloc(&dst, n * 4));
            CHECK(cudaMemset(src, 1, n * 4));
            const int copies = std::min(2000, std::max(20, int(2e9 / (e * 16.0))));
            const double us = graph_time_us(copies, [&](int i) {  // four buffers of n bytes in turn, past the L2
                CHECK(cudaMemcpyAsync(static_cast<char*>(dst) + (i % 4) * n, static_cast<char*>(src) + (i % 4) * n,
                                      n, cudaMemcpyDeviceToDevice, g_stream));
            });
            cudaFree(src), cudaFree(dst);
            const double gbs = 2.0 * n / (us * 1e-6) / 1e9;
            std::printf("%8lldx%-5lld %-20s %-9s %9.2f %8.0f %6.1f%%\n", (long long)rows, (long long)h,
                        "copy of GAE's bytes", "memcpy", us, gbs, 100 * gbs / copy_gbs);
        }
        for (kind k : kinds) {
            const auto want = reference(k, hosts[0], rows, h, false);
            const auto want2 = k == kind::vtrace ? reference(k, hosts[0], rows, h, true) : std::vector<double>{};
            for (const variant& var : kVariants) {
                const std::string listed = std::string(",") + (only ? only : "") + ",";
                if (only && listed.find(std::string(",") + var.name + ",") == std::string::npos) continue;
                CHECK(cudaMemsetAsync(devs[0].out, 0xff, e * 4, g_stream));  // NaN: every element must be written
                CHECK(cudaMemsetAsync(devs[0].out2, 0xff, e * 4, g_stream));
                var.fn(k, devs[0], rows, h, sms);
                CHECK(cudaStreamSynchronize(g_stream));
                std::vector<float> got(e), got2(e);
                CHECK(cudaMemcpy(got.data(), devs[0].out, e * 4, cudaMemcpyDeviceToHost));
                double err = rel_error(got, want);
                if (k == kind::vtrace) {
                    CHECK(cudaMemcpy(got2.data(), devs[0].out2, e * 4, cudaMemcpyDeviceToHost));
                    err = std::max(err, rel_error(got2, want2));
                }
                if (!(err <= 1e-5)) ++failures;
                if (profile) {
                    std::printf("%8lldx%-5lld %-20s %-9s %9s %8s %7s %9.1e\n", (long long)rows, (long long)h,
                                name_of(k), var.name, "-", "-", "-", err);
                    continue;
                }
                const int launches = std::min(2000, std::max(20, int(2e9 / (e * 20.0))));
                const double us = graph_time_us(launches, [&](int i) { var.fn(k, devs[i % sets], rows, h, sms); });
                const double gbs = double(e) * bytes_of(k) / (us * 1e-6) / 1e9;
                std::printf("%8lldx%-5lld %-20s %-9s %9.2f %8.0f %6.1f%% %9.1e%s\n", (long long)rows,
                            (long long)h, name_of(k), var.name, us, gbs, 100 * gbs / copy_gbs, err,
                            err <= 1e-5 ? "" : "  MISMATCH");
            }
        }
        for (auto& d : devs) release(d);
    }
    std::printf("%s\n", failures ? "FAILED: outputs differ from the float64 reference" : "all outputs match");
    return failures ? 1 : 0;
}
