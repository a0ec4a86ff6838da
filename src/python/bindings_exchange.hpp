// DLPack's C exchange API (dlpack.h >= 1.3, DLPackExchangeAPI): an array type
// publishes C functions, as the capsule type(x).__dlpack_c_exchange_api__, that
// describe one of its objects without a Python call or a capsule. torch's
// Tensor does (torch >= 2.10): its Python-level __dlpack__ costs ~2 us per
// tensor, this well under 0.1 us. bindings_arrays.cpp tries it before its own
// DLPack import (__dlpack__ and a capsule), which stays the path for every other array.
#pragma once

#include <cstddef>
#include <cstdint>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

namespace puffadv::bindings {

/// One array as its producer describes it through the exchange API. Non-owning:
/// valid while the object is alive and not resized, which the caller's argument
/// guarantees for the call (as it does for the tensors of any torch operator that
/// releases the GIL).
class exchanged_array {
public:
    /// Fills the description through the exchange API of obj's exact type (not
    /// a subclass's: a subclass may override __dlpack__). False, with no Python
    /// error set, when that type has none or the producer declines (e.g. a
    /// sparse tensor): the DLPack import then gives the usual answer.
    bool import(nanobind::handle obj);

    /// The DLTensor as the producer filled it (bindings_arrays.cpp checks every field).
    const nanobind::dlpack::dltensor& tensor() const { return t_; }

private:
    nanobind::dlpack::dltensor t_;  // DLTensor's layout
};

}  // namespace puffadv::bindings
