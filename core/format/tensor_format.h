// Printing tensors exactly as TensorFlow 2.15 (with numpy 1.26) prints them.
//
// TF's EagerTensor.__str__ is "tf.Tensor(<str(ndarray)>, shape=..., dtype=...)" and __repr__ is
// "<tf.Tensor: shape=..., dtype=..., numpy=<repr(ndarray)>>"; in both, a numpy text that spans
// several lines starts on a new line. The numpy text follows np.array2string's defaults:
//
//  - separator ' ' (str) or ', ' (repr, inside "array(...)"), line width 75, precision 8,
//    floatmode 'maxprec', and more than 1000 elements are summarised with '...' keeping 3 items
//    at each end of every axis longer than 6.
//  - Rows wrap before column 75 under a hanging indent; rank-k arrays separate their
//    sub-arrays with k-1 newlines.
//  - Integers are right-aligned to the widest shown value; bools print as " True"/"False".
//  - Floats (float16/32/64): each value gets its shortest round-trip digits for its own type,
//    cut to 8 fractional digits (correctly rounded). Exponent notation is used for the whole
//    array when the largest finite |x| >= 1e8, or the smallest nonzero one is < 1e-4, or their
//    ratio is > 1000; then every mantissa gets as many digits as the longest and exponents are
//    zero-padded to the same width ("[1.e-05 1.e+00]"). Otherwise values are aligned on the
//    decimal point and padded with spaces ("[1.5 2. ]"). nan/inf are right-aligned.
//  - bfloat16 values print as ml_dtypes prints them: C++ ostream (%g, 6 significant digits),
//    unpadded ("[1 2.5 0.100098]").
//  - Strings (tf.string) print as Python bytes literals (b'a', b"it's", b'\xff'); the numpy
//    array is dtype=object.
//  - 0-d tensors print as numpy scalars: "1.0", "1e-05", "1", "True", "b'a'" (floats use
//    exponent notation when |x| < 1e-4 or >= 1e16).
//  - repr omits "dtype=..." for float64, int64 and bool arrays with elements, as numpy does, and
//    shows ", shape=(0, 1)" for empty arrays of a shape other than (0,).
//
// The goldens in tests/testdata/format/tensors.txt were produced by TF itself
// (tools/golden/gen_format_goldens.py).
//
// Tensors in device memory are copied to the host to be printed, as TF prints a GPU tensor
// (core/device/device_memory.h: CopyTensorToHost); device memory that cannot be read that way prints
// as "<unprintable>" in place of the numpy text (TF prints that for values it cannot convert to
// numpy).
//
// Thread safety: all functions are pure.
#ifndef SLUICE_CORE_TENSOR_FORMAT_H_
#define SLUICE_CORE_TENSOR_FORMAT_H_

#include <ostream>
#include <string>

#include "sluice/element.h"
#include "sluice/tensor.h"

namespace sluice {

// numpy's str(ndarray) of the tensor's value (for a 0-d tensor, str of the numpy scalar):
// "[1 2]", "[[0.7]\n [0.7]]", "[1.5 2. ]", "[ True False]", "[b'a' b'bb']", "1.0", "[]".
std::string FormatNumpy(const Tensor& t);

// numpy's repr(ndarray): "array([1, 2], dtype=int32)", "array([[1.],\n       [1.]],
// dtype=float32)"; for a 0-d tensor the scalar's repr ("1.0", "b'a'").
std::string FormatNumpyRepr(const Tensor& t);

// str(tf.Tensor): "tf.Tensor([1 2], shape=(2,), dtype=int32)",
// "tf.Tensor(\n[[0.7]\n [0.7]], shape=(2, 1), dtype=float32)".
std::string FormatTensor(const Tensor& t);

// repr(tf.Tensor): "<tf.Tensor: shape=(2,), dtype=int32, numpy=array([1, 2], dtype=int32)>".
std::string FormatTensorRepr(const Tensor& t);

// Python's str() of an element whose leaves are tf.Tensors: a leaf prints with str(), a
// container as Python prints it (tuple "(a, b)", "(a,)", list "[a]", dict "{'k': v}"), which
// uses repr() for what it contains.
std::string FormatElement(const Element& e);
// A composite value node (sluice/composite_tensor.h) as TF 2.15 prints it (str and repr agree):
//   SparseTensor(indices=tf.Tensor(...), values=tf.Tensor(...), dense_shape=tf.Tensor(...))
//   <tf.RaggedTensor [[1, 2], [3]]>  (np.array2string of the rows with separator ', ' and str()
//   of each scalar; numpy's wrapping at 75 columns and summarising are not reproduced)
// FormatElement prints a ragged node of ragged rank 0 as the tensor it is, as TF does.
std::string FormatComposite(const Element& node);
// Python's repr() of the same.
std::string FormatElementRepr(const Element& e);

// Python's repr() of a str / bytes value: 'a', "it's", 'a\n'; b'a', b'\xff'.
// PythonStrRepr keeps bytes >= 0x80 as they are (printable UTF-8 is shown as is by Python).
std::string PythonStrRepr(const std::string& s);
std::string PythonBytesRepr(const std::string& s);

// For GoogleTest messages: FormatTensor(t), or "<invalid Tensor>".
void PrintTo(const Tensor& t, std::ostream* os);

}  // namespace sluice

#endif  // SLUICE_CORE_TENSOR_FORMAT_H_
