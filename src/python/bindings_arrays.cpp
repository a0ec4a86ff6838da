// See bindings_arrays.hpp. The DLPack consumer: export (obj.__dlpack__()),
// check every field of the capsule, consume it, and describe it as a matrix.
// What a producer's refusal means is worded in bindings_export_errors.cpp.
#include "python/bindings_arrays.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "python/bindings_exchange.hpp"
#include "python/bindings_export_errors.hpp"
#include "core/checks.hpp"

namespace nb = nanobind;

namespace puffadv::bindings {
namespace {

// The DLPack ABI (dlpack.h, stable since 0.x for the unversioned struct, 1.x
// for the versioned one), spelled out so every field can be checked.
struct dl_tensor {
    void* data;
    std::int32_t device_type, device_id;
    std::int32_t ndim;
    std::uint8_t code, bits;
    std::uint16_t lanes;
    std::int64_t* shape;
    std::int64_t* strides;  // NULL: compact row-major
    std::uint64_t byte_offset;
};
struct dl_managed {
    dl_tensor tensor;
    void* manager_ctx;
    void (*deleter)(dl_managed*);
};
struct dl_managed_versioned {
    std::uint32_t major, minor;
    void* manager_ctx;
    void (*deleter)(dl_managed_versioned*);
    std::uint64_t flags;
    dl_tensor tensor;
};
constexpr std::uint64_t kReadOnly = 1, kIsCopied = 2;  // DLPACK_FLAG_BITMASK_*
constexpr int kMaxDims = 64;  // more is a corrupt capsule, not an array

// DLDataTypeCode and DLDeviceType values.
enum : std::uint8_t { kInt = 0, kUInt = 1, kFloat = 2, kOpaque = 3, kBfloat = 4, kComplex = 5, kBool = 6 };
enum : std::int32_t { kCPU = 1, kCUDA = 2, kCUDAHost = 3, kROCM = 10, kCUDAManaged = 13 };

dtype dtype_of(const dl_tensor& t, const char* name) {
    if (t.lanes == 1) {
        if (t.code == kFloat && t.bits == 32) return dtype::float32;
        if (t.code == kFloat && t.bits == 64) return dtype::float64;
        if (t.code == kFloat && t.bits == 16) return dtype::float16;
        if (t.code == kBfloat && t.bits == 16) return dtype::bfloat16;
        if (t.code == kUInt && t.bits == 8) return dtype::uint8;
        if (t.code == kBool && t.bits == 8) return dtype::boolean;
    }
    static const char* kinds[] = {"int", "uint", "float", "opaque", "bfloat", "complex", "bool"};
    std::string described = t.code < 7 ? kinds[t.code] : "code " + std::to_string(t.code) + " of ";
    described += std::to_string(t.bits);
    if (t.lanes != 1)  // a vector type: DLPack's lanes, e.g. float32x2
        described += "x" + std::to_string(t.lanes) + " (" + std::to_string(t.lanes) + " lanes per element)";
    throw type_error(unreadable_dtype_message(name, described));
}

device device_of(const dl_tensor& t, const char* name) {
    switch (t.device_type) {
        case kCPU:
        case kCUDAHost:  // pinned host memory: the CPU reads it directly
            return {device_type::cpu, 0};
        case kCUDA:
        case kCUDAManaged:
            return {device_type::cuda, t.device_id};
        case kROCM:
            return {device_type::rocm, t.device_id};
    }
    throw type_error(std::string(name) + " lives on DLPack device type " + std::to_string(t.device_type) +
                     "; puffadv reads CPU, CUDA and ROCm memory");
}

// The fields a producer could get wrong, checked before any is read through.
void check_tensor(const dl_tensor& t, const char* name) {
    using detail::join;
    if (t.ndim < 0 || t.ndim > kMaxDims)
        throw value_error(join(name, " has ndim ", t.ndim, " in its DLPack tensor; expected a 2-D array "
                                     "(1-D for last_value and the row sums)"));
    if (t.ndim > 0 && t.shape == nullptr)
        throw value_error(join(name, " has ndim ", t.ndim, " but no shape in its DLPack tensor "
                                     "(a NULL shape pointer)"));
    if (t.ndim != 1 && t.ndim != 2) return;  // the core names the wrong ndim; nothing else is read
    // Elements and the span of memory the view reaches, overflow-checked: the
    // core's own checks do 64-bit arithmetic on them.
    std::int64_t elements = 1, lo = 0, hi = 0;
    bool overflow = false;
    for (int i = 0; i < t.ndim; ++i) {
        const std::int64_t n = t.shape[i];
        if (n < 0)
            throw value_error(join(name, " has a negative extent ", n, " in dimension ", i,
                                   " of its DLPack tensor"));
        overflow |= __builtin_mul_overflow(elements, n, &elements);
        // NULL strides: compact row-major
        const std::int64_t stride = t.strides ? t.strides[i] : i + 1 < t.ndim ? t.shape[i + 1] : 1;
        std::int64_t reach = 0;  // stride * (n - 1), towards lower or higher addresses
        if (n > 0) overflow |= __builtin_mul_overflow(stride, n - 1, &reach);
        overflow |= __builtin_add_overflow(reach < 0 ? lo : hi, reach, reach < 0 ? &lo : &hi);
    }
    std::int64_t span = 0, bytes = 0;
    overflow |= __builtin_sub_overflow(hi, lo, &span);
    overflow |= __builtin_add_overflow(span, std::int64_t{1}, &span);
    overflow |= __builtin_mul_overflow(span, std::max<std::int64_t>(1, t.bits * t.lanes / 8), &bytes);
    if (overflow)
        throw value_error(join(name, " has a shape or strides beyond 64-bit sizes in its DLPack tensor"));
    if (elements == 0) return;
    if (t.data == nullptr)
        throw value_error(join(name, " has no data in its DLPack tensor (a NULL data pointer) for ", elements,
                               " elements"));
    std::uintptr_t first = 0;
    if (__builtin_add_overflow(reinterpret_cast<std::uintptr_t>(t.data), t.byte_offset, &first))
        throw value_error(join(name, " has a byte_offset (", t.byte_offset,
                               ") in its DLPack tensor that wraps around the address space"));
}

// The matrix view of a DLTensor, every field checked before it is read.
matrix view_of(const dl_tensor& t, const char* name, std::uint64_t flags) {
    check_tensor(t, name);
    matrix m;
    m.ndim = t.ndim;
    m.type = dtype_of(t, name);
    m.device = device_of(t, name);
    m.writable = !(flags & kReadOnly);
    // As integers: DLPack allows a NULL data pointer for an empty tensor, with any offset.
    m.data = reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(t.data) + t.byte_offset);
    if (m.ndim == 2) {
        m.rows = t.shape[0];
        m.cols = t.shape[1];
        m.row_stride = t.strides ? t.strides[0] : t.shape[1];
        m.col_stride = t.strides ? t.strides[1] : 1;
    } else if (m.ndim == 1) {
        m.rows = t.shape[0];
        m.cols = 1;
        m.row_stride = t.strides ? t.strides[0] : 1;
        m.col_stride = 1;
    }
    return m;
}

// The same for a tensor described through torch's exchange API (no capsule, no flags).
matrix view_of(const nb::dlpack::dltensor& exchanged, const char* name) {
    static_assert(sizeof(dl_tensor) == sizeof(nb::dlpack::dltensor), "both are DLPack's DLTensor");
    dl_tensor t;
    std::memcpy(&t, &exchanged, sizeof t);
    return view_of(t, name, 0);
}

// Checks and consumes the capsule (DLPack: rename it "used_..." and own the
// tensor, whose deleter the holder calls), and describes the tensor.
matrix consume(PyObject* capsule, const char* name, bool from_producer, bool output, array_holder& keep) {
    const char* capsule_name = PyCapsule_GetName(capsule);  // NULL: an unnamed capsule
    if (capsule_name == nullptr && PyErr_Occurred()) throw nb::python_error();
    const char* named = capsule_name ? capsule_name : "";
    const bool versioned = std::strcmp(named, "dltensor_versioned") == 0;
    if (!versioned && std::strcmp(named, "dltensor") != 0) throw_foreign_capsule(name, capsule_name, from_producer);
    void* pointer = PyCapsule_GetPointer(capsule, capsule_name);
    if (pointer == nullptr) throw nb::python_error();

    std::uint64_t flags = 0;
    const dl_tensor* t = &static_cast<dl_managed*>(pointer)->tensor;
    if (versioned) {
        auto* v = static_cast<dl_managed_versioned*>(pointer);
        if (v->major != 1)  // another major version changes the struct: not ours to read
            throw type_error(detail::join(name, " came as a DLPack ", v->major, ".", v->minor,
                                          " capsule; puffadv reads DLPack 1.x"));
        flags = v->flags;
        t = &v->tensor;
    }
    if (output && (flags & kIsCopied))
        throw value_error(std::string(name) + " was exported as a copy (DLPack's IS_COPIED flag): results "
                          "written there would not reach it; pass an array that exports its own memory");
    const matrix m = view_of(*t, name, flags);
    // From here on the tensor is ours: the producer's capsule destructor must not free it.
    if (PyCapsule_SetDestructor(capsule, nullptr) != 0 ||
        PyCapsule_SetName(capsule, versioned ? "used_dltensor_versioned" : "used_dltensor") != 0)
        throw nb::python_error();
    keep.own(pointer, versioned);
    return m;
}

// obj.__dlpack__(max_version=(1, 1)), or obj.__dlpack__() for producers that
// predate max_version. An invalid object: obj has no __dlpack__.
nb::object export_capsule(nb::handle obj, const char* name) {
    static PyObject* method_name = PyUnicode_InternFromString("__dlpack__");
    static PyObject* keywords = Py_BuildValue("(s)", "max_version");
    static PyObject* version = Py_BuildValue("(ii)", 1, 1);
    // The type's plain method, called with obj as its first argument (as nanobind
    // does: no bound method per call); anything else through getattr.
#if PY_VERSION_HEX >= 0x030D0000
    nb::object method = nb::steal(_PyType_LookupRef(Py_TYPE(obj.ptr()), method_name));
#else
    nb::object method = nb::borrow(_PyType_Lookup(Py_TYPE(obj.ptr()), method_name));
#endif
    PyObject* args[3] = {nullptr, obj.ptr(), version};
    PyObject** first = args + 1;  // obj, then the keyword's value
    std::size_t positional = 1;
    if (!method.is_valid() || !(PyFunction_Check(method.ptr()) || Py_IS_TYPE(method.ptr(), &PyMethodDescr_Type))) {
        method = nb::steal(PyObject_GetAttr(obj.ptr(), method_name));
        if (!method.is_valid()) {
            if (!PyErr_ExceptionMatches(PyExc_AttributeError)) throw nb::python_error();
            PyErr_Clear();
            return {};
        }
        first = args + 2;  // a bound callable: only the keyword's value
        positional = 0;
    }
    const std::size_t nargs = positional | PY_VECTORCALL_ARGUMENTS_OFFSET;
    PyObject* capsule = PyObject_Vectorcall(method.ptr(), first, nargs, keywords);
    if (capsule == nullptr && PyErr_ExceptionMatches(PyExc_TypeError)) {
        PyErr_Clear();
        capsule = PyObject_Vectorcall(method.ptr(), first, nargs, nullptr);
    }
    if (capsule == nullptr) {
        nb::python_error refusal;
        throw_refused_export(obj, name, refusal);
    }
    nb::object result = nb::steal(capsule);
    if (!PyCapsule_CheckExact(capsule))
        throw type_error(std::string(name) + ".__dlpack__() returned " + nb::type_name(result.type()).c_str() +
                         ", not a DLPack capsule");
    return result;
}

}  // namespace

array_holder::~array_holder() {
    if (managed_ == nullptr) return;
    if (versioned_) {
        auto* m = static_cast<dl_managed_versioned*>(managed_);
        if (m->deleter) m->deleter(m);
    } else {
        auto* m = static_cast<dl_managed*>(managed_);
        if (m->deleter) m->deleter(m);
    }
}

std::optional<matrix> import_array(nb::handle obj, const char* name, array_holder& keep, bool optional,
                                   bool output) {
    if (optional && obj.is_none()) return std::nullopt;
    // torch tensors: described by torch's C function, with no capsule (bindings_exchange.hpp).
    if (exchanged_array exchanged; exchanged.import(obj)) return view_of(exchanged.tensor(), name);
    if (PyCapsule_CheckExact(obj.ptr())) return consume(obj.ptr(), name, false, output, keep);
    nb::object capsule = export_capsule(obj, name);
    if (!capsule.is_valid()) {
        throw type_error(std::string(name) + " must be an array (NumPy, PyTorch, CuPy, JAX or any "
                         "DLPack producer)" + (optional ? " or None" : "") + ", got " +
                         nb::type_name(obj.type()).c_str());
    }
    return consume(capsule.ptr(), name, true, output, keep);
}

std::uintptr_t stream_handle(nb::handle stream) {
    nb::object number = nb::steal(PyNumber_Index(stream.ptr()));
    if (!number.is_valid()) {
        PyErr_Clear();
        throw type_error(std::string("stream must be an int handle, a torch.cuda.Stream or a cupy Stream "
                                     "(an object whose .cuda_stream or .ptr is an int), got ") +
                         nb::type_name(stream.type()).c_str());
    }
    const unsigned long long handle = PyLong_AsUnsignedLongLong(number.ptr());
    if (PyErr_Occurred()) {  // negative, or 2**64 and beyond
        PyErr_Clear();
        throw value_error(std::string("stream must be a handle in [0, 2**64), got ") +
                          nb::str(number).c_str());
    }
    return static_cast<std::uintptr_t>(handle);
}

}  // namespace puffadv::bindings
