// See bindings_export_errors.hpp. The common refusals are recognised from the
// argument's own attributes (NumPy's dtype, torch's layout and device, JAX's
// deleted state); anything else quotes the producer's exception.
#include "python/bindings_export_errors.hpp"

#include <string>

#include <puffadv/array.hpp>

namespace nb = nanobind;

namespace puffadv::bindings {
namespace {

// obj.<attr>, or an invalid object; never raises.
nb::object attribute(nb::handle obj, const char* attr) {
    if (!obj.is_valid()) return {};
    PyObject* found = PyObject_GetAttrString(obj.ptr(), attr);
    if (found == nullptr) PyErr_Clear();
    return nb::steal(found);
}

// str(obj), or "" when it fails.
std::string text(nb::handle obj) {
    if (!obj.is_valid()) return "";
    nb::object s = nb::steal(PyObject_Str(obj.ptr()));
    const char* utf8 = s.is_valid() ? PyUnicode_AsUTF8(s.ptr()) : nullptr;
    if (utf8 == nullptr) PyErr_Clear();
    return utf8 ? utf8 : "";
}

// int(obj), or 0 when it is not an int.
long integer(nb::handle obj) {
    if (!obj.is_valid()) return 0;
    const long value = PyLong_AsLong(obj.ptr());
    if (value == -1 && PyErr_Occurred()) PyErr_Clear();
    return value;
}

bool is_true(nb::handle obj) {
    if (!obj.is_valid()) return false;
    const int truth = PyObject_IsTrue(obj.ptr());
    if (truth < 0) PyErr_Clear();
    return truth > 0;
}

// obj.<method>() is true.
bool says_true(nb::handle obj, const char* method) {
    nb::object bound = attribute(obj, method);
    if (!bound.is_valid() || !PyCallable_Check(bound.ptr())) return false;
    nb::object result = nb::steal(PyObject_CallNoArgs(bound.ptr()));
    if (!result.is_valid()) PyErr_Clear();
    return is_true(result);
}

// A NumPy dtype (one with .kind and .isnative) that DLPack cannot carry.
std::string numpy_reason(nb::handle obj, const char* name) {
    nb::object dtype = attribute(obj, "dtype");
    const std::string kind = text(attribute(dtype, "kind"));
    nb::object native = attribute(dtype, "isnative");
    if (kind.size() != 1 || !native.is_valid()) return "";
    const std::string spelled = text(dtype);
    if (!is_true(native)) {
        const std::string order = text(attribute(dtype, "byteorder")) == ">" ? "big-endian" : "little-endian";
        nb::object newbyteorder = attribute(dtype, "newbyteorder");
        nb::object as_native = newbyteorder.is_valid()
                                   ? nb::steal(PyObject_CallFunction(newbyteorder.ptr(), "s", "="))
                                   : nb::object();
        if (!as_native.is_valid()) PyErr_Clear();
        return std::string(name) + " has dtype " + spelled + " in " + order +
               " byte order, which DLPack cannot carry; expected the machine's native byte order: pass " +
               name + ".astype('" + text(attribute(as_native, "name")) + "')";
    }
    std::string words;
    switch (kind[0]) {
        case 'V':
            if (text(attribute(attribute(dtype, "type"), "__module__")).rfind("ml_dtypes", 0) == 0) {
                // NumPy cannot export these through DLPack; torch, JAX and CuPy export bfloat16.
                if (spelled == "bfloat16")
                    return std::string(name) + " is a NumPy array of ml_dtypes' bfloat16, which NumPy cannot "
                           "export through DLPack; puffadv reads bfloat16 as torch, JAX or CuPy arrays (e.g. "
                           "jax.numpy.asarray(" + name + ")), and NumPy arrays of float32, float64 or float16 "
                           "(e.g. " + name + ".astype(numpy.float32))";
                words = "an ml_dtypes extension type";
                break;
            }
            words = text(attribute(dtype, "names")) == "None" ? "raw bytes" : "a structured dtype";
            break;
        case 'O': words = "Python objects"; break;
        case 'M': words = "dates"; break;
        case 'm': words = "time spans"; break;
        case 'U': case 'T': words = "text"; break;
        case 'S': words = "byte strings"; break;
        case 'f': case 'c':  // float128, complex256; narrower ones fail for other reasons
            if (integer(attribute(dtype, "itemsize")) <= (kind[0] == 'f' ? 8 : 16)) return "";
            words = "extended precision, not an IEEE type";
            break;
        default: return "";
    }
    return unreadable_dtype_message(name, spelled + " (" + words + ")");
}

// A tensor inside a torch.func transform (vmap's batched tensors, grad's wrappers):
// its data is the transform's, not a buffer DLPack can export.
bool is_functorch_wrapped(nb::handle obj) {
    nb::object functorch = nb::steal(PyImport_ImportModule("torch._C._functorch"));
    if (!functorch.is_valid()) {
        PyErr_Clear();
        return false;
    }
    nb::object test = attribute(functorch, "is_functorch_wrapped_tensor");
    if (!test.is_valid()) return false;
    nb::object result = nb::steal(PyObject_CallOneArg(test.ptr(), obj.ptr()));
    if (!result.is_valid()) PyErr_Clear();
    return is_true(result);
}

// A torch tensor DLPack cannot carry: sparse, quantized, nested, on the meta
// device, or inside a torch.func transform.
std::string torch_reason(nb::handle obj, const char* name) {
    const std::string layout = text(attribute(obj, "layout"));
    if (layout.rfind("torch.", 0) != 0) return "";
    if (is_true(attribute(obj, "is_nested")))
        return std::string(name) + " is a nested tensor (layout " + layout + "); puffadv reads dense [rows, "
               "horizon] tensors (layout torch.strided): pad it first, e.g. " + name + ".to_padded_tensor(0.0)";
    if (is_functorch_wrapped(obj))
        return std::string(name) + " is a tensor inside a torch.func transform (vmap, grad, jacrev, ...), "
               "whose data the puffadv functions cannot read; call the operator torch.ops.puffadv.<name> "
               "instead, which torch.func transforms (puffadv.torch lists them)";
    if (is_true(attribute(obj, "is_quantized")))
        return std::string(name) + " is a quantized tensor (dtype " + text(attribute(obj, "dtype")) +
               "); puffadv reads float tensors: pass " + name + ".dequantize()";
    if (layout != "torch.strided")
        return std::string(name) + " is a tensor with layout " + layout +
               "; puffadv reads dense tensors (layout torch.strided): pass " + name + ".to_dense()";
    const std::string device = text(attribute(attribute(obj, "device"), "type"));
    if (device == "meta")
        return std::string(name) + " is on the meta device, which holds no data; puffadv reads arrays "
                                   "in cpu, cuda or rocm memory";
    return "";
}

}  // namespace

std::string unreadable_reason(nb::handle obj, const char* name) {
    if (says_true(obj, "is_deleted"))
        return std::string(name) + " is a deleted JAX array (.delete() freed its buffer); pass a live array";
    std::string message = numpy_reason(obj, name);
    if (message.empty()) message = torch_reason(obj, name);
    return message;
}

void throw_refused_export(nb::handle obj, const char* name, nb::python_error& refusal) {
    std::string message = unreadable_reason(obj, name);
    if (message.empty()) {
        PyObject* error = refusal.value().ptr();
        message = std::string(name) + " (" + nb::type_name(obj.type()).c_str() +
                  ") cannot be read through DLPack: its __dlpack__() raised " + Py_TYPE(error)->tp_name +
                  ": " + text(error);
    }
    nb::raise_from(refusal, PyExc_TypeError, "%s", message.c_str());
}

void throw_foreign_capsule(const char* name, const char* capsule_name, bool from_producer) {
    const std::string named = capsule_name ? "'" + std::string(capsule_name) + "'" : "None";
    const std::string what = from_producer ? std::string(name) + ".__dlpack__() returned a capsule"
                                           : std::string(name) + " is a capsule";
    if (capsule_name && (std::string(capsule_name) == "used_dltensor" ||
                         std::string(capsule_name) == "used_dltensor_versioned"))
        throw type_error(what + " named " + named + ": a DLPack tensor that was already consumed; "
                         "export a fresh one for every call");
    throw type_error(what + " named " + named + ", not a DLPack tensor ('dltensor' or 'dltensor_versioned')");
}

}  // namespace puffadv::bindings
