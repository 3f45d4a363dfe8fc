// The DLPack C ABI (the unversioned DLManagedTensor of DLPack 0.x, which __dlpack__() returns
// when the consumer asks for no max_version), written from the specification at
// https://dmlc.github.io/dlpack/latest/c_api.html. Only what Sluice produces is declared.
//
// The exchange: __dlpack__() returns a PyCapsule named "dltensor" holding a DLManagedTensor*;
// the consumer renames the capsule "used_dltensor" and, when it is done with the memory, calls
// the tensor's deleter. A capsule that was never consumed calls the deleter itself when it dies.
#ifndef SLUICE_PYTHON_SRC_DLPACK_H_
#define SLUICE_PYTHON_SRC_DLPACK_H_

#include <cstdint>

extern "C" {

// DLDeviceType values used here (the specification numbers them; the numbers are the ABI).
enum SluiceDLDeviceType : int32_t {
  kSluiceDLCPU = 1,
  kSluiceDLCUDA = 2,
  kSluiceDLCUDAHost = 3,
};

// DLDataTypeCode values.
enum SluiceDLDataTypeCode : uint8_t {
  kSluiceDLInt = 0,
  kSluiceDLUInt = 1,
  kSluiceDLFloat = 2,
  kSluiceDLBfloat = 4,
  kSluiceDLBool = 6,
};

struct SluiceDLDevice {
  int32_t device_type;  // SluiceDLDeviceType
  int32_t device_id;
};

struct SluiceDLDataType {
  uint8_t code;  // SluiceDLDataTypeCode
  uint8_t bits;
  uint16_t lanes;
};

struct SluiceDLTensor {
  void* data;
  SluiceDLDevice device;
  int32_t ndim;
  SluiceDLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // null: compact row-major
  uint64_t byte_offset;
};

struct SluiceDLManagedTensor {
  SluiceDLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(SluiceDLManagedTensor* self);
};

}  // extern "C"

#endif  // SLUICE_PYTHON_SRC_DLPACK_H_
