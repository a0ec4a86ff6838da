// The automatic CPU fallback policy, shared by every binding (the Python layer
// and the torch ops): one setting, one wording, one count per process.
//
// A binding that catches puffadv::backend_unavailable (valid GPU arrays, but no
// backend compiled for them or no usable device) asks fallback_mode(): on
// `error` it raises fallback_error_message(); on `warn` it copies the arrays to
// the host, computes there, copies the results back, and calls
// record_fallback(), which returns true the first time in the process: that
// call shows fallback_warning_message() as a warning.
#pragma once

#include <cstdint>
#include <string>

namespace puffadv {

enum class fallback_mode { warn, error };

/// Reads PUFFADV_FALLBACK on every call, so a change made at run time (Python's
/// puffadv.set_fallback sets it) reaches every binding: unset or "warn" -> warn,
/// "error" -> error (case-insensitive). Anything else throws value_error.
fallback_mode current_fallback_mode();

/// The one-time warning: `reason` is the backend_unavailable message; `bytes`
/// what the fallback copies to the host and back in this call.
std::string fallback_warning_message(const std::string& reason, std::uint64_t bytes);

/// The error raised instead when PUFFADV_FALLBACK=error.
std::string fallback_error_message(const std::string& reason);

/// Counts a completed fallback; true for the first one in this process.
bool record_fallback(std::uint64_t bytes, const std::string& reason);

/// What backend() reports about the fallback.
struct fallback_stats {
    std::uint64_t calls = 0;  ///< fallbacks completed in this process, by any binding
    std::uint64_t bytes = 0;  ///< bytes they copied to the host and back
    std::string last_reason;  ///< why the last one happened
};
fallback_stats get_fallback_stats();

}  // namespace puffadv
