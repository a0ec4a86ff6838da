// The hip_cpu tests' harness (see hip_cpu_cases.hpp).
#include "hip_cpu_cases.hpp"

#include <hip/hip_runtime.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>

#include "core/backends.hpp"
#include "gpu/vendor.cuh"

namespace hip_cpu_test {
namespace {

using puffadv::dtype;
using puffadv::estimator;
using puffadv::matrix;

double nan() { return std::numeric_limits<double>::quiet_NaN(); }

std::uint16_t to_bf16(float f) {
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
    return static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
float from_bf16(std::uint16_t b) {
    const std::uint32_t u = std::uint32_t(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

/// One array's memory: a [rows, horizon] grid (or [rows] with ndim 1) in a layout.
class array {
public:
    array(dtype type, std::int64_t rows, std::int64_t cols, layout l, std::int64_t pad, bool vector = false)
        : type_(type), rows_(rows), cols_(cols), layout_(l), vector_(vector) {
        const std::int64_t stride = l == layout::padded ? cols + pad : cols;
        const std::int64_t elements = vector ? rows : (l == layout::padded ? rows * stride : rows * cols);
        const std::size_t size = puffadv::dtype_size(type);
        bytes_.assign(static_cast<std::size_t>(elements + 2) * size + 64, std::byte{0});
        auto address = reinterpret_cast<std::uintptr_t>(bytes_.data());
        address = (address + 63) / 64 * 64 + (l == layout::misaligned && !vector ? size : 0);
        view_.data = reinterpret_cast<void*>(address);
        view_.type = type;
        view_.rows = rows;
        view_.cols = vector ? 1 : cols;
        if (vector) {
            view_.row_stride = 1, view_.ndim = 1;
        } else if (l == layout::time_major) {
            view_.row_stride = 1, view_.col_stride = rows;
        } else {
            view_.row_stride = stride;
        }
    }
    array(const array&) = delete;

    double get(std::int64_t r, std::int64_t t) const {
        const unsigned char* p = at(r, t);
        switch (type_) {
            case dtype::float32: { float f; std::memcpy(&f, p, 4); return f; }
            case dtype::float64: { double d; std::memcpy(&d, p, 8); return d; }
            case dtype::bfloat16: { std::uint16_t b; std::memcpy(&b, p, 2); return from_bf16(b); }
            case dtype::float16: { _Float16 h; std::memcpy(&h, p, 2); return static_cast<double>(h); }
            default: return *p;
        }
    }
    void set(std::int64_t r, std::int64_t t, double x) {
        unsigned char* p = at(r, t);
        switch (type_) {
            case dtype::float32: { const float f = float(x); std::memcpy(p, &f, 4); break; }
            case dtype::float64: std::memcpy(p, &x, 8); break;
            case dtype::bfloat16: { const std::uint16_t b = to_bf16(float(x)); std::memcpy(p, &b, 2); break; }
            case dtype::float16: { const _Float16 h = static_cast<_Float16>(x); std::memcpy(p, &h, 2); break; }
            default: *p = static_cast<unsigned char>(x != 0);
        }
    }
    /// Every element of the view (padding left alone).
    template <typename F>
    void each(F&& f) {
        for (std::int64_t r = 0; r < rows_; ++r)
            for (std::int64_t t = 0; t < (vector_ ? 1 : cols_); ++t) f(r, t);
    }
    matrix on(puffadv::device_type d, bool writable) const {
        matrix m = view_;
        m.device = {d, 0};
        m.writable = writable;
        return m;
    }

private:
    unsigned char* at(std::int64_t r, std::int64_t t) const {
        const std::int64_t i = r * view_.row_stride + t * view_.col_stride;
        return static_cast<unsigned char*>(view_.data) + i * std::int64_t(puffadv::dtype_size(type_));
    }
    dtype type_;
    std::int64_t rows_, cols_;
    layout layout_;
    bool vector_;
    std::vector<std::byte> bytes_;
    matrix view_;
};

using slot = std::unique_ptr<array>;

/// The inputs of a case, shared by both calls (HIP CPU device memory is host memory).
struct inputs {
    slot rewards, values, terminated, truncated, bootstrap, last_value, importance, next_values, target, behaviour,
        greedy, decay, gamma, lambda, sample_mask;
};
/// One backend's outputs, poisoned with NaN.
struct outputs {
    slot advantages, returns, abs_sums, sums, square_sums;
};

bool takes_values(estimator k) {
    return k != estimator::discounted_returns && k != estimator::episodic_sum && k != estimator::linear_recurrence;
}
bool takes_next_values(estimator k) { return k == estimator::retrace || k == estimator::q_lambda; }

inputs make_inputs(const call_case& c) {
    std::mt19937_64 rng(c.seed);
    std::uniform_real_distribution<double> uniform(-1.0, 1.0), unit(0.0, 1.0);
    const dtype flag_type = c.byte_flags ? dtype::uint8 : c.type;
    auto grid = [&](dtype t) { return std::make_unique<array>(t, c.rows, c.horizon, c.memory, c.pad); };
    auto fill = [&](slot& a, double low, double high) {
        a->each([&](std::int64_t r, std::int64_t t) { a->set(r, t, low + (high - low) * unit(rng)); });
    };
    inputs in;
    in.rewards = grid(c.type);
    fill(in.rewards, -1, 1);
    if (takes_values(c.kind)) in.values = grid(c.type), fill(in.values, -1, 1);
    if (c.kind == estimator::linear_recurrence) {  // decays in [-1.1, 1.1]; 0 and 1 at both ends of some rows
        in.decay = grid(c.type), fill(in.decay, -1.1, 1.1);
        in.decay->each([&](std::int64_t r, std::int64_t t) {
            if ((t == 0 || t == c.horizon - 1) && r % 3 != 2) in.decay->set(r, t, r % 3 == 0 ? 0.0 : 1.0);
        });
        if (!c.no_last_value) {
            in.last_value = std::make_unique<array>(c.type, c.rows, 1, c.memory, 0, true);
            fill(in.last_value, -1, 1);
        }
        return in;  // no flags
    }
    // Episode ends at the first and the last step of some rows, and in between.
    in.terminated = grid(flag_type);
    in.terminated->each([&](std::int64_t r, std::int64_t t) {
        const bool edge = (t == 0 && r % 3 == 0) || (t == c.horizon - 1 && r % 3 == 1);
        in.terminated->set(r, t, edge || unit(rng) < 0.08);
    });
    if (c.truncations) {
        in.truncated = grid(flag_type);
        in.truncated->each([&](std::int64_t r, std::int64_t t) {
            const bool edge = (t == 0 && r % 3 == 2) || (t == c.horizon - 1 && r % 3 == 2);
            // Some terminated steps truncated too: terminated, both backends (issue 33).
            const bool also = in.terminated->get(r, t) != 0 && unit(rng) < 0.25;
            in.truncated->set(r, t, also || (in.terminated->get(r, t) == 0 && (edge || unit(rng) < 0.05)));
        });
    }
    if (c.kind == estimator::value_vjp) {
        // The backward: the cotangents in rewards' and values' places (grad_returns in
        // half of the calls), no bootstrap.
        if (c.seed % 2) in.values.reset();
    } else if (takes_next_values(c.kind) || c.next_values) {
        in.next_values = grid(c.type), fill(in.next_values, -1, 1);
    } else if (c.truncations || c.kind == estimator::n_step_returns) {
        in.bootstrap = grid(c.type), fill(in.bootstrap, -1, 1);
        if (c.truncations)  // never read where terminated, truncated or not
            in.bootstrap->each([&](std::int64_t r, std::int64_t t) {
                if (in.terminated->get(r, t) != 0 && in.truncated->get(r, t) != 0) in.bootstrap->set(r, t, nan());
            });
    } else if (!c.no_last_value && c.kind != estimator::puff_advantage) {
        in.last_value = std::make_unique<array>(c.type, c.rows, 1, c.memory, 0, true);
        fill(in.last_value, -1, 1);
    }
    if (c.importance || c.kind == estimator::puff_advantage) in.importance = grid(c.type), fill(in.importance, 0.5, 1.6);
    if (c.kind == estimator::retrace) {
        in.target = grid(c.type), in.behaviour = grid(c.type);
        fill(in.target, 0.05, 1.0), fill(in.behaviour, 0.05, 1.0);
        if (c.log_probs) {
            for (slot* s : {&in.target, &in.behaviour})
                (*s)->each([&](std::int64_t r, std::int64_t t) { (*s)->set(r, t, std::log((*s)->get(r, t))); });
        }
    }
    if (c.huge_decays) {  // every decay 1e5 (retrace: target / behaviour), every input 0
        for (slot* s : {&in.rewards, &in.values, &in.next_values, &in.bootstrap, &in.last_value})
            if (*s) fill(*s, 0, 0);
        if (in.importance) fill(in.importance, 1e5, 1e5);
        if (in.target) fill(in.target, 1, 1), fill(in.behaviour, 1e-5, 1e-5);
    }
    if (c.per_step & 1) {  // rlax's discount_t: in [0, 1], 0 at some terminations
        in.gamma = grid(c.type), fill(in.gamma, 0, 1);
        in.gamma->each([&](std::int64_t r, std::int64_t t) {
            if (in.terminated->get(r, t) != 0 && unit(rng) < 0.5) in.gamma->set(r, t, 0.0);
        });
    }
    if (c.per_step & 2) in.lambda = grid(c.type), fill(in.lambda, 0, 1);
    if (c.sample_mask) {  // unset at some first and last steps too
        in.sample_mask = grid(flag_type);
        in.sample_mask->each([&](std::int64_t r, std::int64_t t) {
            const bool edge = (t == 0 || t == c.horizon - 1) && r % 4 == 1;
            in.sample_mask->set(r, t, !edge && unit(rng) < 0.8);
        });
    }
    if (c.greedy) {
        in.greedy = grid(flag_type);
        in.greedy->each([&](std::int64_t r, std::int64_t t) { in.greedy->set(r, t, unit(rng) < 0.7); });
    }
    return in;
}

outputs make_outputs(const call_case& c) {
    const dtype out = c.float_outputs ? dtype::float32 : c.type;
    auto poisoned = [&](slot a) {
        a->each([&](std::int64_t r, std::int64_t t) { a->set(r, t, nan()); });
        return a;
    };
    outputs o;
    o.advantages = poisoned(std::make_unique<array>(out, c.rows, c.horizon, c.memory, c.pad));
    if (c.returns) o.returns = poisoned(std::make_unique<array>(out, c.rows, c.horizon, c.memory, c.pad));
    if (c.sums) {
        o.abs_sums = poisoned(std::make_unique<array>(dtype::float64, c.rows, 1, c.memory, 0, true));
        o.sums = poisoned(std::make_unique<array>(dtype::float64, c.rows, 1, c.memory, 0, true));
        o.square_sums = poisoned(std::make_unique<array>(dtype::float64, c.rows, 1, c.memory, 0, true));
    }
    return o;
}

puffadv::standard_arrays call_of(const inputs& in, const outputs& out, puffadv::device_type d) {
    auto opt = [&](const slot& s, bool writable = false) {
        return s ? std::optional<matrix>(s->on(d, writable)) : std::nullopt;
    };
    puffadv::standard_arrays a;
    a.rewards = in.rewards->on(d, false);
    a.values = opt(in.values);
    if (in.terminated) a.terminated = in.terminated->on(d, false);
    a.truncated = opt(in.truncated);
    a.bootstrap_values = opt(in.bootstrap);
    a.last_value = opt(in.last_value);
    a.importance = opt(in.importance);
    a.next_values = opt(in.next_values);
    a.target_probs = opt(in.target);
    a.behaviour_probs = opt(in.behaviour);
    a.greedy = opt(in.greedy);
    a.decay = opt(in.decay);
    a.gamma = opt(in.gamma);
    a.lambda = opt(in.lambda);
    a.sample_mask = opt(in.sample_mask);
    a.advantages = opt(out.advantages, true);
    a.fused.returns = opt(out.returns, true);
    a.fused.abs_sums = opt(out.abs_sums, true);
    a.fused.sums = opt(out.sums, true);
    a.fused.square_sums = opt(out.square_sums, true);
    return a;
}

puffadv::standard_params params_of(const call_case& c) {
    puffadv::standard_params p;
    p.kind = c.kind;
    p.gamma = 0.97;
    p.lambda = c.kind == estimator::episodic_sum && c.seed % 2 ? 1.0 : 0.9;
    p.rho_clip = 1.1, p.c_clip = 0.9, p.rho_pg_clip = 1.2;
    p.n = c.n;
    p.log_probs = c.log_probs;
    p.reset_at_start = c.reset_at_start;
    p.reverse = c.reverse;
    p.alpha = c.alpha;
    if (c.kind == estimator::puff_advantage) p.lambda_name = "gae_lambda";
    if (c.huge_decays) p.gamma = p.lambda = 1.0, p.rho_clip = p.c_clip = p.rho_pg_clip = 1e5;
    return p;
}

/// Tolerance of one output element against the CPU's, by the output's dtype,
/// relative to the row's largest magnitude (the scans' order differs).
double tolerance(dtype out) {
    if (out == dtype::float64) return 1e-11;
    if (out == dtype::float32) return 2e-5;
    return out == dtype::bfloat16 ? 1.6e-2 : 2e-3;  // about 2 units in the last place
}

std::string compare(const char* name, const array& gpu, const array& cpu, std::int64_t rows, std::int64_t cols,
                    double tol) {
    std::ostringstream why;
    for (std::int64_t r = 0; r < rows; ++r) {
        double scale = 1;
        for (std::int64_t t = 0; t < cols; ++t)
            if (std::isfinite(cpu.get(r, t))) scale = std::max(scale, std::fabs(cpu.get(r, t)));
        for (std::int64_t t = 0; t < cols; ++t) {
            const double g = gpu.get(r, t), c = cpu.get(r, t);
            const bool same = std::isnan(c) ? std::isnan(g) : std::fabs(g - c) <= tol * scale * (cols > 1 ? 1 : 4);
            if (!same) {
                why << name << "[" << r << ", " << t << "]: rocm " << g << ", cpu " << c << " (tolerance "
                    << tol * scale << ")";
                return why.str();
            }
        }
    }
    return "";
}

}  // namespace

const char* layout_name(layout l) {
    switch (l) {
        case layout::packed: return "packed";
        case layout::padded: return "padded";
        case layout::misaligned: return "misaligned";
        default: return "time-major";
    }
}

std::string call_case::label() const {
    std::ostringstream s;
    s << puffadv::estimator_name(kind) << " " << puffadv::dtype_name(type) << " " << rows << "x" << horizon << " "
      << layout_name(memory);
    if (pad) s << "+" << pad;
    if (truncations) s << " truncations";
    if (importance) s << " ratios";
    if (returns) s << " returns";
    if (sums) s << " sums";
    if (byte_flags) s << " uint8-flags";
    if (float_outputs) s << " float32-out";
    if (greedy) s << " greedy";
    if (log_probs) s << " log-probs";
    if (reset_at_start) s << " starts_at";
    if (no_last_value) s << " no-bootstrap";
    if (reverse) s << " reverse";
    if (kind == estimator::n_step_returns) s << " n=" << n;
    if (huge_decays) s << " huge-decays";
    if (next_values) s << " next_values";
    if (per_step & 1) s << " gamma_t";
    if (per_step & 2) s << " lambda_t";
    if (sample_mask) s << " sample_mask";
    if (alpha != 1.0) s << " alpha=" << alpha;
    s << " seed " << seed;
    return s.str();
}

/// Every case's stream: not the null stream, which the runtime drains from two threads at once
/// (Runtime::wait_all_streams_), out of launch order (tests/hip_cpu/README.md).
namespace {
hipStream_t ordered_stream() {
    static const hipStream_t stream = [] {
        hipStream_t s = nullptr;
        if (hipStreamCreate(&s) != hipSuccess) throw std::runtime_error("hipStreamCreate failed");
        return s;
    }();
    return stream;
}
}  // namespace

std::string run_case(const call_case& c) {
    const inputs in = make_inputs(c);
    const outputs cpu = make_outputs(c), gpu = make_outputs(c);
    const puffadv::standard_params p = params_of(c);
    const puffadv::standard_arrays on_cpu = call_of(in, cpu, puffadv::device_type::cpu);
    const puffadv::standard_arrays on_gpu = call_of(in, gpu, puffadv::device_type::rocm);
    if (c.kind == estimator::puff_advantage) {
        puffadv::compute_puff_advantage(puffadv::detail::as_puff_arrays(on_cpu), puffadv::detail::as_puff_params(p));
    } else {
        puffadv::compute_standard_estimate(on_cpu, p);
    }
    const bool puff = c.kind == estimator::puff_advantage;
    const puffadv::argument_problem problem =
        puff ? puffadv::find_puff_problem(puffadv::detail::as_puff_arrays(on_gpu), puffadv::detail::as_puff_params(p))
             : puffadv::find_standard_problem(on_gpu, p);
    if (problem) return "arguments refused: " + problem.message;
    observe_launches_as(puffadv::estimator_name(c.kind));
    const hipStream_t stream = ordered_stream();
    if (!c.public_route)
        puffadv::detail::estimate_hip(on_gpu, p, stream);  // the backend entry, as the core calls it
    else if (puff)
        puffadv::compute_puff_advantage(puffadv::detail::as_puff_arrays(on_gpu), puffadv::detail::as_puff_params(p),
                                        stream);
    else
        puffadv::compute_standard_estimate(on_gpu, p, stream);
    if (hipStreamSynchronize(stream) != hipSuccess) return "hipStreamSynchronize failed";
    puffadv::gpu::hip_cpu::launch_observer() = nullptr;

    const dtype out = c.float_outputs ? dtype::float32 : c.type;
    const bool low = puffadv::dtype_size(c.type) == 2;
    const double tol = tolerance(out);
    std::string why = compare("advantages", *gpu.advantages, *cpu.advantages, c.rows, c.horizon, tol);
    if (why.empty() && c.returns) why = compare("returns", *gpu.returns, *cpu.returns, c.rows, c.horizon, tol);
    // Sums of rounded outputs: each term within the output's rounding.
    const double sums_tol = out == dtype::float64 ? 1e-10 : (low && out != dtype::float32 ? 2e-2 : 1e-4);
    if (why.empty() && c.sums) why = compare("abs_sums", *gpu.abs_sums, *cpu.abs_sums, c.rows, 1, sums_tol * c.horizon);
    if (why.empty() && c.sums) why = compare("sums", *gpu.sums, *cpu.sums, c.rows, 1, sums_tol * c.horizon);
    if (why.empty() && c.sums)
        why = compare("square_sums", *gpu.square_sums, *cpu.square_sums, c.rows, 1, sums_tol * c.horizon);
    return why;
}

}  // namespace hip_cpu_test
