// DLPack arrays (through nanobind's ndarray caster) to puffadv::matrix views,
// shared by every nanobind function. Only translation: the core checks.
#pragma once

#include <optional>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <puffadv/array.hpp>

namespace puffadv::bindings {

/// Keeps an imported array (and so the caller's buffer) alive for the call.
struct array_holder {
    nanobind::ndarray<> writable;
    nanobind::ndarray<nanobind::ro> read_only;
};

/// A 2-D array becomes [rows, cols] as given; a 1-D array [n] becomes rows = n,
/// cols = 1, ndim 1; other ranks keep their ndim for the core to reject.
/// None gives nullopt when `optional`, else a TypeError like any non-array.
std::optional<matrix> import_array(nanobind::handle obj, const char* name, array_holder& keep,
                                   bool optional = false);

}  // namespace puffadv::bindings
