// Test helpers: the float64 reference of SPEC section 1, random inputs, and
// strided host arrays (padded, time-major, reversed) described as puffadv::matrix.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <puffadv/puffadv.hpp>

namespace puff_test {

/// Row-major [rows, horizon] float64 data.
struct grid {
    std::int64_t rows = 0, horizon = 0;
    std::vector<double> data;
    grid(std::int64_t r, std::int64_t h, double fill = 0.0)
        : rows(r), horizon(h), data(static_cast<std::size_t>(r * h), fill) {}
    double& at(std::int64_t r, std::int64_t t) { return data[static_cast<std::size_t>(r * horizon + t)]; }
    double at(std::int64_t r, std::int64_t t) const { return data[static_cast<std::size_t>(r * horizon + t)]; }
};

struct inputs {
    grid values, rewards, dones, importance;
};

/// SPEC section 1, written from the spec in double: the standard the kernels are held to.
inline grid reference_puff(const inputs& in, const puffadv::puff_params& p) {
    grid out(in.values.rows, in.values.horizon);
    for (std::int64_t r = 0; r < out.rows; ++r) {
        double a = 0.0;
        for (std::int64_t t = out.horizon - 2; t >= 0; --t) {
            const double nnt = 1.0 - in.dones.at(r, t + 1);
            const double rho = std::fmin(in.importance.at(r, t), p.rho_clip);
            const double c = std::fmin(in.importance.at(r, t), p.c_clip);
            const double delta = rho * (in.rewards.at(r, t + 1) + p.gamma * in.values.at(r, t + 1) * nnt -
                                        in.values.at(r, t));
            a = delta + p.gamma * p.gae_lambda * c * a * nnt;
            out.at(r, t) = a;
        }
    }
    return out;
}

/// Fresh random inputs: normal values and rewards, ~10% dones, ratios in [0.2, 2).
/// Values are rounded to the element type so the reference sees what the kernel sees.
template <typename T>
inputs random_inputs(std::int64_t rows, std::int64_t horizon, std::mt19937_64& rng) {
    std::normal_distribution<double> normal;
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    inputs in{grid(rows, horizon), grid(rows, horizon), grid(rows, horizon), grid(rows, horizon)};
    for (std::size_t i = 0; i < in.values.data.size(); ++i) {
        in.values.data[i] = static_cast<T>(normal(rng));
        in.rewards.data[i] = static_cast<T>(normal(rng));
        in.dones.data[i] = uniform(rng) < 0.1 ? 1.0 : 0.0;
        in.importance.data[i] = static_cast<T>(0.2 + 1.8 * uniform(rng));
    }
    return in;
}

/// ||out - ref|| / ||ref|| (absolute when ref is all zeros); infinite if out has a NaN.
inline double relative_error(const std::vector<double>& out, const grid& ref) {
    double diff = 0.0, norm = 0.0;
    for (std::size_t i = 0; i < out.size(); ++i) {
        if (std::isnan(out[i])) return std::numeric_limits<double>::infinity();
        diff += (out[i] - ref.data[i]) * (out[i] - ref.data[i]);
        norm += ref.data[i] * ref.data[i];
    }
    return norm > 0.0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

/// How an array is laid out in memory.
enum class layout {
    row_major,  ///< contiguous [rows, horizon]
    padded,     ///< rows further apart than horizon (a column slice of a wider array)
    time_major, ///< [horizon, rows] memory viewed as [rows, horizon] (a transpose)
    reversed,   ///< time runs backwards in memory (negative col_stride)
};
inline const char* layout_name(layout l) {
    switch (l) {
        case layout::row_major: return "row_major";
        case layout::padded: return "padded";
        case layout::time_major: return "time_major";
        case layout::reversed: return "reversed";
    }
    return "?";
}

/// Host memory for one [rows, horizon] array in a given layout, with the gaps
/// (padding) poisoned so a kernel reading outside the view produces NaN.
template <typename T>
struct strided_array {
    std::vector<T> storage;
    puffadv::matrix view;

    strided_array(std::int64_t rows, std::int64_t horizon, layout l) {
        const std::int64_t pad = l == layout::padded ? 3 : 0;
        storage.assign(static_cast<std::size_t>(rows * (horizon + pad)) + 1,
                       std::numeric_limits<T>::quiet_NaN());
        view.data = storage.data();
        view.type = sizeof(T) == 4 ? puffadv::dtype::float32 : puffadv::dtype::float64;
        view.rows = rows;
        view.cols = horizon;
        switch (l) {
            case layout::row_major: view.row_stride = horizon, view.col_stride = 1; break;
            case layout::padded: view.row_stride = horizon + pad, view.col_stride = 1; break;
            case layout::time_major: view.row_stride = 1, view.col_stride = rows; break;
            case layout::reversed:
                view.row_stride = horizon, view.col_stride = -1;
                view.data = storage.data() + (horizon - 1);
                break;
        }
    }
    T& at(std::int64_t r, std::int64_t t) {
        return static_cast<T*>(view.data)[r * view.row_stride + t * view.col_stride];
    }
    void fill_from(const grid& g) {
        for (std::int64_t r = 0; r < g.rows; ++r)
            for (std::int64_t t = 0; t < g.horizon; ++t) at(r, t) = static_cast<T>(g.at(r, t));
    }
    void poison() {
        for (std::int64_t r = 0; r < view.rows; ++r)
            for (std::int64_t t = 0; t < view.cols; ++t) at(r, t) = std::numeric_limits<T>::quiet_NaN();
    }
    std::vector<double> to_vector() {
        std::vector<double> out;
        for (std::int64_t r = 0; r < view.rows; ++r)
            for (std::int64_t t = 0; t < view.cols; ++t) out.push_back(static_cast<double>(at(r, t)));
        return out;
    }
};

}  // namespace puff_test
