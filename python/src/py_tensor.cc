#include "python/src/py_tensor.h"

#include <pybind11/stl.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/device/device_memory.h"
#include "core/format/python_literal.h"
#include "core/format/tensor_format.h"
#include "python/src/dlpack.h"
#include "python/src/py_registration.h"
#include "python/src/status_exception.h"

namespace sluice::python {

namespace py = pybind11;
using namespace pybind11::literals;

namespace {

// numpy's spelling of a dtype: the array-interface typestr and the buffer-protocol format.
struct NumpyType {
  const char* typestr = nullptr;  // nullptr: no numpy equivalent (string, bfloat16)
  const char* format = nullptr;
};

NumpyType NumpyTypeOf(DType dtype) {
  switch (dtype) {
    case DType::kBool: return {"|b1", "?"};
    case DType::kInt8: return {"|i1", "b"};
    case DType::kInt16: return {"<i2", "h"};
    case DType::kInt32: return {"<i4", "i"};
    case DType::kInt64: return {"<i8", "q"};
    case DType::kUInt8: return {"|u1", "B"};
    case DType::kUInt16: return {"<u2", "H"};
    case DType::kUInt32: return {"<u4", "I"};
    case DType::kUInt64: return {"<u8", "Q"};
    case DType::kFloat16: return {"<f2", "e"};
    case DType::kFloat32: return {"<f4", "f"};
    case DType::kFloat64: return {"<f8", "d"};
    default: return {};
  }
}

bool InHostMemory(const Tensor& t) {
  return t.buffer() == nullptr || t.buffer()->space() != MemorySpace::kDevice;
}

// Where the first byte of a numeric tensor is (host or device).
void* DataPointer(const Tensor& t) {
  if (t.buffer() == nullptr) return nullptr;
  return static_cast<char*>(t.buffer()->data()) + t.buffer_offset();
}

std::vector<py::ssize_t> RowMajorStrides(const Tensor& t) {
  std::vector<py::ssize_t> strides(t.shape().rank());
  py::ssize_t stride = static_cast<py::ssize_t>(DTypeSize(t.dtype()));
  for (int i = t.shape().rank() - 1; i >= 0; --i) {
    strides[i] = stride;
    stride *= static_cast<py::ssize_t>(t.shape().dim(i));
  }
  return strides;
}

py::tuple ShapeTuple(const Tensor& t) {
  py::tuple shape(t.shape().rank());
  for (int i = 0; i < t.shape().rank(); ++i) shape[i] = py::int_(t.shape().dim(i));
  return shape;
}

// Why `t` has no zero-copy host view, or "" when it has one.
std::string NoHostViewReason(const Tensor& t) {
  if (t.dtype() == DType::kString) {
    return "a string tensor has no buffer; use numpy() for an object array of bytes";
  }
  if (NumpyTypeOf(t.dtype()).typestr == nullptr) {
    return absl::StrCat("numpy has no ", DTypeName(t.dtype()),
                        " dtype; use __dlpack__, or numpy() for a float32 copy");
  }
  if (!InHostMemory(t)) {
    return "the tensor is in device memory; use __dlpack__ (torch.from_dlpack) or numpy() for "
           "a host copy";
  }
  return "";
}

// A valid pointer for size-0 tensors, whose buffer may be empty.
char kEmpty[8];

// The buffer protocol, written as CPython's slots rather than pybind11's def_buffer, whose
// callback may not fail (string and device tensors must raise BufferError, not abort).
// view->internal holds the shape and strides arrays; view->obj the Tensor object.
int TensorGetBuffer(PyObject* obj, Py_buffer* view, int flags) {
  view->obj = nullptr;
  const Tensor* t = nullptr;
  try {
    t = py::handle(obj).cast<const Tensor*>();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_BufferError, e.what());
    return -1;
  }
  const std::string why = NoHostViewReason(*t);
  if (!why.empty()) {
    PyErr_SetString(PyExc_BufferError, why.c_str());
    return -1;
  }
  if ((flags & PyBUF_WRITABLE) == PyBUF_WRITABLE) {
    PyErr_SetString(PyExc_BufferError, "a sluice.Tensor is read-only");
    return -1;
  }
  const int ndim = t->shape().rank();
  auto* dims = new Py_ssize_t[2 * static_cast<size_t>(ndim) + 1];
  const std::vector<py::ssize_t> strides = RowMajorStrides(*t);
  for (int i = 0; i < ndim; ++i) {
    dims[i] = static_cast<Py_ssize_t>(t->shape().dim(i));
    dims[ndim + i] = strides[i];
  }
  void* data = DataPointer(*t);
  view->buf = data != nullptr ? data : kEmpty;
  view->obj = obj;
  Py_INCREF(obj);
  view->len = static_cast<Py_ssize_t>(t->byte_size());
  view->readonly = 1;
  view->itemsize = static_cast<Py_ssize_t>(DTypeSize(t->dtype()));
  view->format = (flags & PyBUF_FORMAT) ? const_cast<char*>(NumpyTypeOf(t->dtype()).format)
                                        : nullptr;
  view->ndim = ndim;
  view->shape = (flags & PyBUF_ND) == PyBUF_ND ? dims : nullptr;
  view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? dims + ndim : nullptr;
  view->suboffsets = nullptr;
  view->internal = dims;
  return 0;
}

void TensorReleaseBuffer(PyObject* /*obj*/, Py_buffer* view) {
  delete[] static_cast<Py_ssize_t*>(view->internal);
}

py::dict ArrayInterface(const Tensor& t) {
  const std::string why = NoHostViewReason(t);
  if (!why.empty()) throw py::attribute_error(why);
  void* data = DataPointer(t);
  if (data == nullptr) data = kEmpty;
  py::dict d;
  d["shape"] = ShapeTuple(t);
  d["typestr"] = NumpyTypeOf(t.dtype()).typestr;
  d["data"] = py::make_tuple(reinterpret_cast<uintptr_t>(data), true);
  d["strides"] = py::none();
  d["version"] = 3;
  return d;
}

py::module_ Numpy() { return py::module_::import("numpy"); }

// numpy(): a zero-copy view when there is one, else a host copy.
py::object ToNumpy(py::object self, const Tensor& t) {
  if (t.dtype() == DType::kString) {
    py::object np = Numpy();
    py::object flat = np.attr("empty")(t.num_elements(), "dtype"_a = np.attr("object_"));
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      flat[py::int_(i)] = py::bytes(t.string_at(i));
    }
    return flat.attr("reshape")(ShapeTuple(t));
  }
  Tensor host = t;
  if (!InHostMemory(t)) host = ValueOrThrow(CopyTensorToHost(t));
  if (host.dtype() == DType::kBFloat16) {
    Tensor wide = Tensor::Allocate(DType::kFloat32, host.shape());
    const uint16_t* in = host.data<uint16_t>();
    float* out = wide.mutable_data<float>();
    for (int64_t i = 0; i < host.num_elements(); ++i) out[i] = BFloat16ToFloat(in[i]);
    host = wide;
  }
  if (host.buffer() == t.buffer()) return Numpy().attr("asarray")(self);
  return Numpy().attr("asarray")(py::cast(host));
}

// DLPack: the managed tensor owns a reference to the sluice::Tensor (its buffer stays alive
// until the consumer calls the deleter) and the shape array the DLTensor points into. For a
// device tensor it also knows the consumer's stream: when the consumer lets go (the deleter),
// the buffer is fenced on that stream, so that its ring slot is refilled only after the
// kernels the consumer queued there before letting go have run.
struct DLPackContext {
  Tensor tensor;
  std::vector<int64_t> shape;
  SluiceDLManagedTensor managed{};
  bool fence = false;
  void* stream = nullptr;
};

void DeleteDLPack(SluiceDLManagedTensor* self) {
  auto* ctx = static_cast<DLPackContext*>(self->manager_ctx);
  if (ctx->fence) {
    if (const DeviceTensorBuffer* d = DeviceBufferOf(ctx->tensor)) {
      // Fails only when the device refuses an event on that stream, which then has failed too.
      d->ReleaseAfter(ctx->stream).IgnoreError();
    }
  }
  delete ctx;
}

// The consumer's stream of __dlpack__(stream=) for a CUDA tensor, as DLPack numbers it: None
// is the legacy default stream (1), 2 the per-thread default stream, -1 "no synchronization"
// (the consumer orders its work itself: no fence), any other value a cudaStream_t; 0 is
// ambiguous and refused.
void ConsumerStream(const py::object& stream, bool* fence, void** out) {
  *fence = true;
  if (stream.is_none()) {
    *out = reinterpret_cast<void*>(uintptr_t{1});
    return;
  }
  const long long value = stream.cast<long long>();
  if (value == 0) {
    throw py::buffer_error("__dlpack__: stream=0 is ambiguous for CUDA; pass 1 (legacy default "
                           "stream), 2 (per-thread default stream) or a cudaStream_t");
  }
  if (value == -1) {
    *fence = false;
    return;
  }
  *out = reinterpret_cast<void*>(static_cast<uintptr_t>(value));
}

void DLPackCapsuleDestructor(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, "used_dltensor")) return;  // the consumer owns it now
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  auto* managed = static_cast<SluiceDLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
  if (managed != nullptr) {
    managed->deleter(managed);
  } else {
    PyErr_Clear();
  }
  PyErr_Restore(type, value, traceback);
}

SluiceDLDataType DLDataTypeOf(DType dtype) {
  const uint8_t bits = static_cast<uint8_t>(DTypeSize(dtype) * 8);
  switch (dtype) {
    case DType::kBool: return {kSluiceDLBool, 8, 1};
    case DType::kInt8: case DType::kInt16: case DType::kInt32: case DType::kInt64:
      return {kSluiceDLInt, bits, 1};
    case DType::kUInt8: case DType::kUInt16: case DType::kUInt32: case DType::kUInt64:
      return {kSluiceDLUInt, bits, 1};
    case DType::kBFloat16: return {kSluiceDLBfloat, 16, 1};
    case DType::kFloat16: case DType::kFloat32: case DType::kFloat64:
      return {kSluiceDLFloat, bits, 1};
    default: throw py::buffer_error(absl::StrCat("DLPack has no ", DTypeName(dtype), " dtype"));
  }
}

SluiceDLDevice DLDeviceOf(const Tensor& t) {
  if (!InHostMemory(t)) return {kSluiceDLCUDA, t.buffer()->device()};
  return {kSluiceDLCPU, 0};
}

py::capsule ToDLPack(const Tensor& t, py::object stream) {
  if (t.dtype() == DType::kString) {
    throw py::buffer_error("a string tensor cannot be exported with DLPack; use numpy()");
  }
  if (InHostMemory(t) && !stream.is_none()) {
    throw py::buffer_error("__dlpack__: stream must be None for a tensor in host memory");
  }
  // Device tensors are complete when the iterator returns them (the prefetcher waits for each
  // copy's event first), so the consumer's stream needs no wait before reading; what needs
  // ordering is the release (DeleteDLPack).
  bool fence = false;
  void* consumer_stream = nullptr;
  if (!InHostMemory(t)) ConsumerStream(stream, &fence, &consumer_stream);
  auto* ctx = new DLPackContext;
  ctx->fence = fence;
  ctx->stream = consumer_stream;
  ctx->tensor = t;
  ctx->shape = t.shape().dims();
  SluiceDLTensor& dl = ctx->managed.dl_tensor;
  dl.data = DataPointer(t) != nullptr ? DataPointer(t) : kEmpty;
  dl.device = DLDeviceOf(t);
  dl.ndim = t.shape().rank();
  dl.dtype = DLDataTypeOf(t.dtype());
  dl.shape = ctx->shape.empty() ? nullptr : ctx->shape.data();
  dl.strides = nullptr;  // compact row-major
  dl.byte_offset = 0;
  ctx->managed.manager_ctx = ctx;
  ctx->managed.deleter = &DeleteDLPack;
  return py::capsule(&ctx->managed, "dltensor", &DLPackCapsuleDestructor);
}

// numpy's dtype through its Python attributes (kind, itemsize): pybind11 2.10's py::dtype
// accessors read numpy 1.x's descriptor struct, whose layout numpy 2 changed.
DType DTypeFromNumpy(const py::object& dt) {
  const std::string kind = dt.attr("kind").cast<std::string>();
  const size_t size = dt.attr("itemsize").cast<size_t>();
  switch (kind.empty() ? '?' : kind[0]) {
    case 'b': return DType::kBool;
    case 'i':
      return size == 1 ? DType::kInt8 : size == 2 ? DType::kInt16 : size == 4 ? DType::kInt32
                                                                          : DType::kInt64;
    case 'u':
      return size == 1 ? DType::kUInt8 : size == 2 ? DType::kUInt16 : size == 4 ? DType::kUInt32
                                                                           : DType::kUInt64;
    case 'f':
      if (size == 2) return DType::kFloat16;
      if (size == 4) return DType::kFloat32;
      if (size == 8) return DType::kFloat64;
      break;
    case 'S': case 'U': case 'O': return DType::kString;
    default: break;
  }
  ThrowStatus(absl::InvalidArgumentError(
      absl::StrCat("numpy dtype ", py::repr(dt).cast<std::string>(), " has no Sluice dtype")));
}

Tensor TensorFromNumpy(py::handle value) {
  py::object np = Numpy();
  // asarray(order="C"), not ascontiguousarray, which makes 0-d arrays 1-d.
  py::object array = np.attr("asarray")(value, "order"_a = "C");
  const DType dtype = DTypeFromNumpy(array.attr("dtype"));
  const Shape shape(array.attr("shape").cast<std::vector<int64_t>>());
  if (dtype == DType::kString) {
    std::vector<std::string> values;
    values.reserve(static_cast<size_t>(shape.num_elements()));
    py::list flat = array.attr("ravel")().attr("tolist")();
    for (py::handle item : flat) {
      if (PyBytes_Check(item.ptr())) {
        values.push_back(item.cast<std::string>());
      } else if (PyUnicode_Check(item.ptr())) {
        values.push_back(py::str(item).cast<std::string>());  // UTF-8
      } else {
        ThrowStatus(absl::InvalidArgumentError(absl::StrCat(
            "a string tensor's items must be bytes or str, got ",
            std::string(py::str(item.get_type().attr("__name__"))))));
      }
    }
    return Tensor::FromStrings(std::move(values), shape);
  }
  Tensor t = Tensor::Allocate(dtype, shape);
  if (t.byte_size() > 0) {
    // The C-contiguous bytes through the buffer protocol (numpy 1 and 2 alike).
    py::buffer_info info = py::reinterpret_borrow<py::buffer>(array).request();
    std::memcpy(t.mutable_raw_data(), info.ptr, t.byte_size());
  }
  return t;
}

}  // namespace

Tensor TensorFromPython(py::handle value) {
  if (py::isinstance<Tensor>(value)) return value.cast<Tensor>();
  py::object np = Numpy();
  if (py::isinstance(value, np.attr("ndarray")) || py::isinstance(value, np.attr("generic"))) {
    return TensorFromNumpy(value);
  }
  // Other objects that export an array (torch tensors, ...).
  if (py::hasattr(value, "__array__") || py::hasattr(value, "__array_interface__")) {
    return TensorFromNumpy(np.attr("asarray")(value));
  }
  if (PyBool_Check(value.ptr()) || PyLong_Check(value.ptr()) || PyFloat_Check(value.ptr()) ||
      PyUnicode_Check(value.ptr()) || PyBytes_Check(value.ptr()) || PyList_Check(value.ptr()) ||
      PyTuple_Check(value.ptr())) {
    // TensorFlow's conversion rules, through the same literal reader pipeline expressions use.
    const std::string text = py::repr(value).cast<std::string>();
    absl::StatusOr<PyValue> literal = ParsePythonLiteral(text);
    if (literal.ok()) return ValueOrThrow(PyValueToTensor(*literal));
    // float('inf'), numpy values inside lists, ...: numpy's conversion.
    return TensorFromNumpy(np.attr("asarray")(value));
  }
  ThrowStatus(absl::InvalidArgumentError(
      absl::StrCat("cannot convert a ", std::string(py::str(value.get_type().attr("__name__"))),
                   " to a tensor")));
}

void RegisterTensor(py::module_& m) {
  py::class_<Tensor> cls(m, "Tensor", py::buffer_protocol(), R"doc(
A tensor a Sluice iterator returned: immutable, and viewed without a copy.

numpy.asarray(t) and memoryview(t) see the tensor's own bytes (host memory, numeric dtypes);
torch.from_dlpack(t), jax.dlpack.from_dlpack(t) and tf.experimental.dlpack.from_dlpack(
t.__dlpack__()) take host and CUDA tensors without a copy. The memory stays valid as long as any
view of it lives. String tensors convert to numpy object arrays of bytes (numpy(), a copy).
str() and repr() print as TensorFlow prints a tf.Tensor.)doc");
  // py::buffer_protocol() gave the type its buffer slots; these replace pybind11's handlers.
  auto* heap_type = reinterpret_cast<PyHeapTypeObject*>(cls.ptr());
  heap_type->as_buffer.bf_getbuffer = &TensorGetBuffer;
  heap_type->as_buffer.bf_releasebuffer = &TensorReleaseBuffer;
  cls.def_property_readonly("shape", &ShapeTuple, "The shape, a tuple of ints.")
      .def_property_readonly(
          "dtype", [](const Tensor& t) { return std::string(DTypeName(t.dtype())); },
          "TensorFlow's name of the dtype: 'float32', 'int64', 'string', ...")
      .def_property_readonly("ndim", [](const Tensor& t) { return t.shape().rank(); })
      .def_property_readonly("size", [](const Tensor& t) { return t.num_elements(); })
      .def_property_readonly("nbytes", [](const Tensor& t) { return t.payload_bytes(); })
      .def_property_readonly(
          "device",
          [](const Tensor& t) -> std::string {
            if (InHostMemory(t)) return "CPU:0";
            return absl::StrCat("GPU:", t.buffer()->device());
          },
          "'CPU:0' for host memory, 'GPU:i' for CUDA device i.")
      .def_property_readonly(
          "_data_ptr", [](const Tensor& t) { return reinterpret_cast<uintptr_t>(DataPointer(t)); },
          "Address of the first byte (numeric tensors); for tests of zero-copy views.")
      .def_property_readonly(
          "_buffer_refs",
          [](const Tensor& t) { return t.buffer() == nullptr ? 0 : t.buffer().use_count(); },
          "References to the underlying buffer (this tensor's included); for tests.")
      .def_property_readonly("__array_interface__", &ArrayInterface)
      .def(
          "numpy", [](py::object self) { return ToNumpy(self, self.cast<const Tensor&>()); },
          "A numpy array: a read-only view of the tensor's bytes when it is a numeric host "
          "tensor, else a copy (strings: an object array of bytes; device: a host copy; "
          "bfloat16: float32).")
      .def(
          "__array__",
          [](py::object self, py::object dtype, py::object copy) {
            // numpy 2's protocol: copy=None views when it can, True always copies, False
            // raises ValueError when a view is impossible (strings, bfloat16, device memory,
            // or a dtype change).
            const Tensor& t = self.cast<const Tensor&>();
            const bool must_copy = !copy.is_none() && copy.cast<bool>();
            const bool no_copy = !copy.is_none() && !copy.cast<bool>();
            if (no_copy) {
              const std::string why = NoHostViewReason(t);
              if (!why.empty()) throw py::value_error("__array__(copy=False): " + why);
            }
            py::object a = ToNumpy(self, t);
            if (!dtype.is_none()) {
              py::object want = Numpy().attr("dtype")(dtype);
              if (!want.equal(a.attr("dtype"))) {
                if (no_copy) {
                  throw py::value_error("__array__(copy=False): a dtype change needs a copy");
                }
                return a.attr("astype")(want);
              }
            }
            return must_copy ? a.attr("copy")() : a;
          },
          py::arg("dtype") = py::none(), py::kw_only(), py::arg("copy") = py::none())
      .def(
          "__dlpack__",
          [](const Tensor& t, py::object stream, py::object /*max_version*/,
             py::object /*dl_device*/, py::object copy) {
            if (!copy.is_none() && copy.cast<bool>()) {
              throw py::buffer_error("__dlpack__(copy=True) is not supported: views are free");
            }
            return ToDLPack(t, stream);
          },
          py::kw_only(), py::arg("stream") = py::none(), py::arg("max_version") = py::none(),
          py::arg("dl_device") = py::none(), py::arg("copy") = py::none(),
          "A DLPack capsule viewing this tensor (host or CUDA memory), no copy. For a CUDA "
          "tensor, `stream` is the consumer's stream (DLPack's numbering; None: the legacy "
          "default stream): the buffer returns to the prefetch ring only after the work "
          "queued there before the view is released has run.")
      .def("__dlpack_device__",
           [](const Tensor& t) {
             SluiceDLDevice d = DLDeviceOf(t);
             return py::make_tuple(d.device_type, d.device_id);
           })
      .def("__len__",
           [](const Tensor& t) {
             if (t.shape().rank() == 0) throw py::type_error("len() of a 0-d tensor");
             return t.shape().dim(0);
           })
      .def("__str__", [](const Tensor& t) { return FormatTensor(t); })
      .def("__repr__", [](const Tensor& t) { return FormatTensorRepr(t); });

  m.def(
      "_bfloat16_for_tests",
      [](const Tensor& t) {
        if (t.dtype() != DType::kFloat32 || !InHostMemory(t)) {
          ThrowStatus(absl::InvalidArgumentError("_bfloat16_for_tests takes a float32 tensor"));
        }
        Tensor out = Tensor::Allocate(DType::kBFloat16, t.shape());
        for (int64_t i = 0; i < t.num_elements(); ++i) {
          out.mutable_data<uint16_t>()[i] = FloatToBFloat16(t.data<float>()[i]);
        }
        return out;
      },
      "A bfloat16 copy of a float32 tensor (no pipeline op makes bfloat16 yet); for tests.");
  m.def(
      "constant", [](py::handle value) { return TensorFromPython(value); }, py::arg("value"),
      R"doc(tf.constant(value): a Tensor from a numpy array (its dtype), a Python scalar or nested
list (int -> int32, float -> float32, str/bytes -> string, as TensorFlow converts them).)doc");
}

}  // namespace sluice::python
