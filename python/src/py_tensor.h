// sluice.Tensor: a sluice::Tensor seen from Python, without a copy.
//
// Host tensors (numeric dtypes) expose the buffer protocol and __array_interface__ (read-only:
// tensors are immutable), so numpy.asarray(t) views the tensor's own bytes; host and CUDA
// tensors expose __dlpack__ / __dlpack_device__ for torch.from_dlpack, jax.dlpack and
// tf.experimental.dlpack. Every view holds a reference to the tensor's buffer (a shared_ptr),
// so the memory outlives the iterator and the step it came from, and a device buffer goes back
// to the device prefetcher's ring only when the last view of it dies and the work its DLPack
// consumers queued on their streams before letting go (__dlpack__(stream=)) has run. DLPack
// views are writable (torch cannot honour read-only): a step's tensors are never memory another
// step is handed (py_element.h, UnsharedStep), so in-place ops change that step alone.
//
// String tensors have no buffer: numpy() and numpy.asarray give an object array of bytes (a
// copy). bfloat16 tensors have no numpy dtype: use __dlpack__ (or numpy(), which widens them to
// float32). Device tensors: numpy() copies to the host; the buffer protocol refuses them.
//
// str() and repr() print as TensorFlow prints a tf.Tensor (core/format/tensor_format.h).
//
// Thread safety: a sluice.Tensor is immutable; Python's GIL serialises the rest.
#ifndef SLUICE_PYTHON_SRC_PY_TENSOR_H_
#define SLUICE_PYTHON_SRC_PY_TENSOR_H_

#include <pybind11/pybind11.h>

#include "sluice/tensor.h"

namespace sluice::python {

// tf.constant(value) without a dtype: a sluice.Tensor as it is (no copy); a numpy array or
// numpy scalar with its dtype (copied); Python scalars and (nested) lists with TensorFlow's
// rules (int -> int32, float -> float32, str/bytes -> string; core/format/python_literal.h).
// INVALID_ARGUMENT (raised) for anything else, naming its type.
Tensor TensorFromPython(pybind11::handle value);

}  // namespace sluice::python

#endif  // SLUICE_PYTHON_SRC_PY_TENSOR_H_
