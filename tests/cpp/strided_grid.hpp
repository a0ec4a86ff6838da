// A [rows, horizon] array for the C++ API tests in one of three storages: row-major,
// time-major, or every other element of a wider row (a strided view).
#pragma once

#include <cstdint>
#include <vector>

#include <puffadv/conventions.hpp>

namespace puffadv_test {

template <typename T>
constexpr puffadv::dtype dtype_of = sizeof(T) == 8 ? puffadv::dtype::float64 : puffadv::dtype::float32;

enum class layout { row_major, time_major, strided };

template <typename T>
struct grid {
    std::vector<T> data;
    puffadv::matrix view;
    grid(std::int64_t rows, std::int64_t horizon, layout l, puffadv::dtype type = dtype_of<T>)
        : data(std::size_t(rows * horizon * 2), T(0)) {
        view.data = data.data();
        view.type = type;
        view.rows = rows, view.cols = horizon;
        if (l == layout::time_major) view.row_stride = 1, view.col_stride = rows;
        else if (l == layout::strided) view.row_stride = 2 * horizon, view.col_stride = 2;
        else view.row_stride = horizon, view.col_stride = 1;
    }
    T& at(std::int64_t r, std::int64_t t) { return data[std::size_t(r * view.row_stride + t * view.col_stride)]; }
};

}  // namespace puffadv_test
