// DLPack arrays to puffadv::matrix views, shared by every nanobind function.
//
// puffadv is the DLPack consumer itself (bindings_arrays.cpp), not nanobind's
// ndarray caster: every field of a capsule is checked before it is read (a
// producer may hand a NULL shape, lanes, a foreign capsule...), and when a
// producer refuses to export, the error names the argument and says why.
#pragma once

#include <cstdint>
#include <optional>

#include <nanobind/nanobind.h>

#include <puffadv/array.hpp>

namespace puffadv::bindings {

/// Owns one imported DLPack tensor (and so the caller's buffer) for the call;
/// the producer's deleter runs when it is destroyed, with the GIL held.
class array_holder {
public:
    array_holder() = default;
    array_holder(const array_holder&) = delete;
    array_holder& operator=(const array_holder&) = delete;
    ~array_holder();

    void own(void* managed_tensor, bool versioned) noexcept {
        managed_ = managed_tensor;
        versioned_ = versioned;
    }

private:
    void* managed_ = nullptr;
    bool versioned_ = false;
};

/// A 2-D array becomes [rows, cols] as given; a 1-D array [n] becomes rows = n,
/// cols = 1, ndim 1; other ranks keep their ndim for the core to reject.
/// None gives nullopt when `optional`, else a TypeError like any non-array.
/// `output`: the call writes into it, so a producer's copy will not do.
std::optional<matrix> import_array(nanobind::handle obj, const char* name, array_holder& keep,
                                   bool optional = false, bool output = false);

/// The `stream` argument as a handle: an int in [0, 2**64) (or an object with
/// __index__); TypeError / ValueError naming `stream` otherwise.
std::uintptr_t stream_handle(nanobind::handle stream);

}  // namespace puffadv::bindings
