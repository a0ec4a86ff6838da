// See bindings_exchange.hpp.
#include "python/bindings_exchange.hpp"

#include <array>

namespace puffadv::bindings {
namespace {

// dlpack.h's DLPackExchangeAPI (DLPack 1.3), which nanobind does not declare. Only
// dltensor_from_py_object_no_sync is called; the other members keep the layout.
struct exchange_api {
    struct {
        std::uint32_t major, minor;   // DLPackVersion
        const exchange_api* prev_api;  // the same table for an older major version
    } header;
    void* managed_tensor_allocator;
    void* managed_tensor_from_py_object_no_sync;
    void* managed_tensor_to_py_object_no_sync;
    int (*dltensor_from_py_object_no_sync)(void* py_object, nanobind::dlpack::dltensor* out);
    void* current_work_stream;
};

constexpr std::uint32_t supported_major = 1;  // DLTensor's layout is fixed within a major version

const exchange_api* published_api(PyTypeObject* type) {
#if PY_VERSION_HEX >= 0x030C0000
    PyObject* dict = PyType_GetDict(type);  // new reference
#else
    PyObject* dict = type->tp_dict;
    Py_XINCREF(dict);
#endif
    // The type's own dict, not its bases': a subclass inherits the attribute but
    // may override __dlpack__ (torch.nn.Parameter, tensor subclasses).
    PyObject* capsule = dict ? PyDict_GetItemString(dict, "__dlpack_c_exchange_api__") : nullptr;
    const exchange_api* api = nullptr;
    if (capsule && PyCapsule_IsValid(capsule, "dlpack_exchange_api"))
        api = static_cast<const exchange_api*>(PyCapsule_GetPointer(capsule, "dlpack_exchange_api"));
    Py_XDECREF(dict);
    while (api && api->header.major > supported_major) api = api->header.prev_api;
    if (!api || api->header.major != supported_major || !api->dltensor_from_py_object_no_sync)
        return nullptr;
    return api;
}

/// published_api() per type, remembered (absence too: NumPy arrays pay one
/// pointer comparison). The cache holds a reference to each type, so a cached
/// address never comes to name another type; the GIL serialises it.
const exchange_api* api_of(PyTypeObject* type) {
    struct entry {
        PyTypeObject* type;
        const exchange_api* api;
    };
    static std::array<entry, 8> cache;
    static std::size_t used = 0;
    for (std::size_t i = 0; i < used; ++i)
        if (cache[i].type == type) return cache[i].api;
    const exchange_api* api = published_api(type);
    if (used < cache.size()) {
        Py_INCREF(type);
        cache[used++] = {type, api};
    }
    return api;
}

}  // namespace

bool exchanged_array::import(nanobind::handle obj) {
    const exchange_api* api = api_of(Py_TYPE(obj.ptr()));
    if (!api) return false;
    if (api->dltensor_from_py_object_no_sync(obj.ptr(), &t_) != 0) {
        PyErr_Clear();
        return false;
    }
    return true;
}

}  // namespace puffadv::bindings
