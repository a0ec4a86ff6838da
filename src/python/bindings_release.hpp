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
    released_gil() = default;
    released_gil(const released_gil&) = delete;
    released_gil& operator=(const released_gil&) = delete;

private:
    // Members, not constructor/destructor bodies: members are built before a
    // constructor body runs and destroyed after a destructor body, so only their
    // order puts the pin (getenv) under the GIL. Built in declaration order,
    // destroyed in reverse: pin, release ... reacquire, unpin.
    struct thread_count_pin {
        thread_count_pin() { pin_cpu_thread_count(true); }
        ~thread_count_pin() { pin_cpu_thread_count(false); }
    } pin;
    nanobind::gil_scoped_release release;
};

}  // namespace puffadv::bindings
