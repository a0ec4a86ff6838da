// Leaving Python for a computation, shared by the nanobind functions that compute.
#pragma once

#include <nanobind/nanobind.h>

#include <puffadv/puffadv.hpp>

namespace puffadv::bindings {

/// For its scope: the GIL released, and the CPU thread count read beforehand.
/// The kernels would otherwise read PUFFADV_NUM_THREADS with getenv while another
/// Python thread may change os.environ (setenv), which changes it under the GIL.
class released_gil {
public:
    released_gil() { pin_cpu_thread_count(true); }
    ~released_gil() { pin_cpu_thread_count(false); }  // after `release` reacquired the GIL
    released_gil(const released_gil&) = delete;
    released_gil& operator=(const released_gil&) = delete;

private:
    nanobind::gil_scoped_release release;  // constructed after the pin, destroyed before the unpin
};

}  // namespace puffadv::bindings
