// DLPack's C exchange API (dlpack.h >= 1.3, DLPackExchangeAPI): an array type
// publishes C functions, as the capsule type(x).__dlpack_c_exchange_api__, that
// describe one of its objects without a Python call or a capsule. torch's
// Tensor does (torch >= 2.10): its Python-level __dlpack__ costs ~2 us per
// tensor, this well under 0.1 us. bindings_arrays.cpp tries it before nanobind's
// import, which stays the path for every other array.
#pragma once

#include <cstddef>
#include <cstdint>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

namespace puffadv::bindings {

/// One array as its producer describes it through the exchange API, with the
/// accessors of nb::ndarray that import_array reads. Non-owning: valid while the
/// object is alive and not resized, which the caller's argument guarantees for
/// the call (as it does for the tensors of any torch operator that releases the GIL).
class exchanged_array {
public:
    /// Fills the description through the exchange API of obj's exact type (not
    /// a subclass's: a subclass may override __dlpack__). False, with no Python
    /// error set, when that type has none or the producer declines (e.g. a
    /// sparse tensor): nanobind's import then gives the usual answer.
    bool import(nanobind::handle obj);

    std::size_t ndim() const { return static_cast<std::size_t>(t_.ndim); }
    nanobind::dlpack::dtype dtype() const { return t_.dtype; }
    std::int32_t device_type() const { return t_.device.device_type; }
    std::int32_t device_id() const { return t_.device.device_id; }
    const void* data() const { return static_cast<const char*>(t_.data) + t_.byte_offset; }
    std::int64_t shape(std::size_t i) const { return t_.shape[i]; }
    /// In elements; DLPack allows no strides for a row-major array.
    std::int64_t stride(std::size_t i) const;

private:
    nanobind::dlpack::dltensor t_;  // DLTensor's layout
};

}  // namespace puffadv::bindings
