// The CPU fallback policy (include/puffadv/fallback.hpp). The wording lives here
// so that the Python layer and the torch ops say the same thing.
#include <puffadv/fallback.hpp>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include <puffadv/array.hpp>

namespace puffadv {
namespace {

std::mutex stats_mutex;
fallback_stats stats;  // guarded by stats_mutex

std::string human_bytes(std::uint64_t bytes) {
    const char* units[] = {"bytes", "KB", "MB", "GB", "TB"};
    double value = static_cast<double>(bytes);
    int unit = 0;
    while (value >= 1000.0 && unit < 4) {
        value /= 1000.0;
        ++unit;
    }
    char text[32];
    std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.1f %s", value, units[unit]);
    return text;
}

}  // namespace

fallback_mode current_fallback_mode() {
    const char* env = std::getenv("PUFFADV_FALLBACK");
    std::string value = env ? env : "";
    for (char& c : value) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (value.empty() || value == "warn") return fallback_mode::warn;
    if (value == "error") return fallback_mode::error;
    throw value_error("PUFFADV_FALLBACK='" + std::string(env) + "': expected 'warn' or 'error'");
}

std::string fallback_warning_message(const std::string& reason, std::uint64_t bytes) {
    return "puffadv computed on the CPU instead: " + reason +
           ". Each such call copies its inputs to the host and its results back (two host round "
           "trips, " + human_bytes(bytes) + " in this call) and waits for the GPU. "
           "Set PUFFADV_FALLBACK=error or call puffadv.set_fallback('error') to make this an "
           "error. Shown once per process; puffadv.backend() counts the fallbacks.";
}

std::string fallback_error_message(const std::string& reason) {
    return reason +
           ". puffadv did not compute on the CPU because PUFFADV_FALLBACK=error; set "
           "PUFFADV_FALLBACK=warn or call puffadv.set_fallback('warn') to allow it.";
}

bool record_fallback(std::uint64_t bytes, const std::string& reason) {
    std::lock_guard<std::mutex> lock(stats_mutex);
    stats.bytes += bytes;
    stats.last_reason = reason;
    return ++stats.calls == 1;
}

fallback_stats get_fallback_stats() {
    std::lock_guard<std::mutex> lock(stats_mutex);
    return stats;
}

}  // namespace puffadv
