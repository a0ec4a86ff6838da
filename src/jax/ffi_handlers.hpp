// XLA FFI handlers of puffadv, seen from the nanobind module: plain function
// addresses, so that no XLA header leaks into bindings.cpp.
#pragma once

#include <vector>

namespace puffadv::jax {

/// One handler: the custom-call target `name` for XLA platform `platform`
/// ("cpu", "CUDA" or "ROCM", as XLA spells them).
struct ffi_target {
    const char* name;
    const char* platform;
    void* handler;  ///< an XLA_FFI_Handler*, i.e. XLA_FFI_Error* (*)(XLA_FFI_CallFrame*)
};

/// Every handler this build contains: CPU always, CUDA / ROCm when compiled.
std::vector<ffi_target> ffi_targets();

/// XLA_FFI_API_MAJOR / MINOR of the headers the handlers were compiled with.
int ffi_api_major();
int ffi_api_minor();

}  // namespace puffadv::jax
