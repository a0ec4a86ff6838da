// GAE and V-trace in the forms of issue 29 on the CPU engine: next_values (V'_t
// at every step), rlax's sample_mask and leaky V-trace's alpha. Each form is a
// compile-time variant of standard_producer (estimators_advantage.hpp), so
// that the calls without them keep today's code (advantage_cpu.cpp). Calls the
// engine does not walk (16-bit floats, flags of mixed types, other strides)
// run on contiguous copies in the arithmetic type: the old general kernels
// (conventions_cpu*.cpp) know none of these forms, and one copy costs less
// than a second implementation of each.
#include <cstdint>
#include <vector>

#include "cpu/conventions_cpu_lines.hpp"
#include "cpu/engine_run.hpp"
#include "cpu/estimators_advantage.hpp"
#include "cpu/standard_forms.hpp"

namespace puffadv::detail {
namespace {

using runner = void (*)(const engine::arrays&, const standard_params&);

template <typename C, typename F, bool kImp, bool kPg, bool kNext, bool kExtra>
void run_form(const engine::arrays& a, const standard_params& p) {
    const engine::advantage_scalars<C> s{C(p.gamma), C(p.gamma) * C(p.lambda), C(p.rho_clip),
                                         C(p.c_clip),  C(p.rho_pg_clip),          C(p.alpha)};
    engine::run_engine(engine::standard_producer<C, F, kImp, kPg, kNext, kExtra>(a, s), a);
}

bool leaky(const engine::arrays& a, const standard_params& p) { return a.importance.present && p.alpha != 1.0; }

template <typename C, typename F, bool kImp>
runner form_of(const engine::arrays& a, const standard_params& p) {
    const bool next = a.next_values.present;
    if (p.kind == estimator::vtrace) {
        if (a.sample_mask.present || leaky(a, p))
            return next ? run_form<C, F, kImp, true, true, true> : run_form<C, F, kImp, true, false, true>;
        return next ? run_form<C, F, kImp, true, true, false> : nullptr;
    }
    return next ? run_form<C, F, kImp, false, true, false> : nullptr;
}

template <typename C>
runner typed_form(const engine::arrays& a, const standard_params& p) {
    const bool imp = a.importance.present;
    if (engine::byte_flags(a.terminated.type))
        return imp ? form_of<C, std::uint8_t, true>(a, p) : form_of<C, std::uint8_t, false>(a, p);
    return imp ? form_of<C, C, true>(a, p) : form_of<C, C, false>(a, p);
}

// The view of `rows` rows of `horizon` C's at `data`, one after the other.
template <typename C>
view contiguous(C* data, std::int64_t horizon) {
    view c;
    c.base = reinterpret_cast<char*>(data);
    c.type = dtype_of<C>;
    c.row_stride = horizon;
    c.col_stride = 1;
    c.size = sizeof(C);
    c.present = true;
    return c;
}

// A contiguous [rows, horizon] copy of `v` in C (flags as 0/1), kept in `keep`.
template <typename C>
view copy_of(const view& v, std::int64_t rows, std::int64_t horizon, bool flag, std::vector<C>& keep) {
    if (!v.present) return v;
    keep.resize(static_cast<std::size_t>(rows * horizon));
    for (std::int64_t r = 0; r < rows; ++r)
        load<C>(v.type, v.at(r, 0), v.col_stride, static_cast<int>(horizon), keep.data() + r * horizon, flag);
    return contiguous(keep.data(), horizon);
}

template <typename C>
void run_on_copies(const engine::arrays& a, const standard_params& p) {
    const std::int64_t rows = a.rows, T = a.horizon;
    std::vector<C> keep[12];
    engine::arrays c = a;
    c.stream = false;
    int k = 0;
    for (view engine::arrays::*m : {&engine::arrays::rewards, &engine::arrays::values, &engine::arrays::importance,
                                   &engine::arrays::next_values, &engine::arrays::bootstrap})
        c.*m = copy_of<C>(a.*m, rows, T, false, keep[k++]);
    for (view engine::arrays::*m : {&engine::arrays::terminated, &engine::arrays::truncated,
                                   &engine::arrays::sample_mask})
        c.*m = copy_of<C>(a.*m, rows, T, true, keep[k++]);
    c.last_value = copy_of<C>(a.last_value, rows, 1, false, keep[k++]);  // [rows]: one step per row
    // The outputs into scratch, stored back in their own dtype after the run.
    view engine::arrays::*const outs[2] = {&engine::arrays::advantages, &engine::arrays::returns};
    for (view engine::arrays::*m : outs) {
        if (!(a.*m).present) continue;
        std::vector<C>& out = keep[k++];
        out.assign(static_cast<std::size_t>(rows * T), C(0));
        c.*m = contiguous(out.data(), T);
    }
    typed_form<C>(c, p)(c, p);
    for (view engine::arrays::*m : outs) {
        const view& to = a.*m;
        if (!to.present) continue;
        const C* from = reinterpret_cast<const C*>((c.*m).base);
        for (std::int64_t r = 0; r < rows; ++r)
            store<C>(to.type, to.at(r, 0), to.col_stride, static_cast<int>(T), from + r * T);
    }
}

}  // namespace

bool is_standard_form(const engine::arrays& a, const standard_params& p) {
    if (p.kind != estimator::gae && p.kind != estimator::vtrace) return false;
    return a.next_values.present || (p.kind == estimator::vtrace && (a.sample_mask.present || leaky(a, p)));
}

void standard_form_cpu(engine::arrays a, const standard_params& p) {
    if (engine::serves<double>(a)) {
        a.stream = engine::streams(a);
        return typed_form<double>(a, p)(a, p);
    }
    if (engine::serves<float>(a)) {
        a.stream = engine::streams(a);
        return typed_form<float>(a, p)(a, p);
    }
    if (a.rewards.type == dtype::float64) return run_on_copies<double>(a, p);
    run_on_copies<float>(a, p);
}

}  // namespace puffadv::detail
