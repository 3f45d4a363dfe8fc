// An example Sluice custom-op plugin (include/sluice/plugin_api.h), built as a shared library
// (libsluice_example_plugin.so) and loaded with --plugin=PATH:
//
//   sluicectl run --plugin=build/examples/plugins/libsluice_example_plugin.so
//     --pipeline="range(4).map(plugin('scale', factor=2.0, offset=1.0)).batch(2)"
//
// Ops:
//   scale(factor=1.0, offset=0.0)  any numeric tensor -> float32 x * factor + offset
//   upper()                        string tensor -> the same strings in ASCII upper case
//
// It uses only the C ABI header: no Sluice library, no C++ types cross the boundary.
#include <cctype>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>

#include "sluice/plugin_api.h"

namespace {

struct ScaleState {
  double factor = 1.0;
  double offset = 0.0;
};

void WriteError(char* error, size_t size, const std::string& message) {
  std::snprintf(error, size, "%s", message.c_str());
}

void* ScaleCreate(const SluiceArg* args, int32_t num_args, char* error, size_t error_size) {
  auto* state = new (std::nothrow) ScaleState();
  if (state == nullptr) return nullptr;
  for (int32_t i = 0; i < num_args; ++i) {
    const std::string key = args[i].key;
    const bool number = args[i].kind == SLUICE_ARG_FLOAT || args[i].kind == SLUICE_ARG_INT;
    if ((key != "factor" && key != "offset") || !number) {
      WriteError(error, error_size,
                 "scale takes factor=<number> and offset=<number>, got '" + key + "'");
      delete state;
      return nullptr;
    }
    (key == "factor" ? state->factor : state->offset) = args[i].float_value;
  }
  return state;
}

void ScaleDestroy(void* state) { delete static_cast<ScaleState*>(state); }

int ScaleSpec(void*, int32_t in_dtype, int32_t in_rank, const int64_t* in_dims,
              int32_t* out_dtype, int32_t* out_rank, int64_t* out_dims, char* error,
              size_t error_size) {
  if (in_dtype == SLUICE_DT_STRING || in_dtype == SLUICE_DT_FLOAT16 ||
      in_dtype == SLUICE_DT_BFLOAT16) {
    WriteError(error, error_size, "scale needs an integer, bool, float32 or float64 tensor");
    return 1;
  }
  *out_dtype = SLUICE_DT_FLOAT32;
  *out_rank = in_rank;
  for (int32_t i = 0; i < in_rank; ++i) out_dims[i] = in_dims[i];
  return 0;
}

template <typename T>
void ScaleLoop(const void* in, float* out, int64_t n, const ScaleState& s) {
  const T* x = static_cast<const T*>(in);
  for (int64_t i = 0; i < n; ++i) {
    out[i] = static_cast<float>(static_cast<double>(x[i]) * s.factor + s.offset);
  }
}

int ScaleTransform(void* state, const SluiceTensorView* in, const SluiceHost* host,
                   SluiceOutput* out) {
  const ScaleState& s = *static_cast<const ScaleState*>(state);
  float* dst = static_cast<float*>(host->allocate_output(out, SLUICE_DT_FLOAT32, in->rank,
                                                         in->dims));
  if (dst == nullptr && in->num_elements > 0) return 1;
  switch (in->dtype) {
    case SLUICE_DT_BOOL: ScaleLoop<bool>(in->data, dst, in->num_elements, s); break;
    case SLUICE_DT_INT8: ScaleLoop<int8_t>(in->data, dst, in->num_elements, s); break;
    case SLUICE_DT_INT16: ScaleLoop<int16_t>(in->data, dst, in->num_elements, s); break;
    case SLUICE_DT_INT32: ScaleLoop<int32_t>(in->data, dst, in->num_elements, s); break;
    case SLUICE_DT_INT64: ScaleLoop<int64_t>(in->data, dst, in->num_elements, s); break;
    case SLUICE_DT_UINT8: ScaleLoop<uint8_t>(in->data, dst, in->num_elements, s); break;
    case SLUICE_DT_UINT16: ScaleLoop<uint16_t>(in->data, dst, in->num_elements, s); break;
    case SLUICE_DT_UINT32: ScaleLoop<uint32_t>(in->data, dst, in->num_elements, s); break;
    case SLUICE_DT_UINT64: ScaleLoop<uint64_t>(in->data, dst, in->num_elements, s); break;
    case SLUICE_DT_FLOAT32: ScaleLoop<float>(in->data, dst, in->num_elements, s); break;
    case SLUICE_DT_FLOAT64: ScaleLoop<double>(in->data, dst, in->num_elements, s); break;
    default:
      host->set_error(out, "scale: unsupported input dtype");
      return 1;
  }
  return 0;
}

void* UpperCreate(const SluiceArg*, int32_t num_args, char* error, size_t error_size) {
  if (num_args != 0) {
    WriteError(error, error_size, "upper takes no arguments");
    return nullptr;
  }
  static int stateless;
  return &stateless;
}

void UpperDestroy(void*) {}

int UpperSpec(void*, int32_t in_dtype, int32_t in_rank, const int64_t* in_dims,
              int32_t* out_dtype, int32_t* out_rank, int64_t* out_dims, char* error,
              size_t error_size) {
  if (in_dtype != SLUICE_DT_STRING) {
    WriteError(error, error_size, "upper needs a string tensor");
    return 1;
  }
  *out_dtype = SLUICE_DT_STRING;
  *out_rank = in_rank;
  for (int32_t i = 0; i < in_rank; ++i) out_dims[i] = in_dims[i];
  return 0;
}

int UpperTransform(void*, const SluiceTensorView* in, const SluiceHost* host,
                   SluiceOutput* out) {
  if (in->dtype != SLUICE_DT_STRING) {
    host->set_error(out, "upper needs a string tensor");
    return 1;
  }
  host->allocate_output(out, SLUICE_DT_STRING, in->rank, in->dims);
  std::string s;
  for (int64_t i = 0; i < in->num_elements; ++i) {
    s.assign(in->strings[i], in->string_lengths[i]);
    for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (host->set_string(out, i, s.data(), s.size()) != 0) return 1;
  }
  return 0;
}

const SluiceOpDef kOps[] = {
    {"scale", &ScaleCreate, &ScaleDestroy, &ScaleSpec, &ScaleTransform},
    {"upper", &UpperCreate, &UpperDestroy, &UpperSpec, &UpperTransform},
};

const SluicePlugin kPlugin = {SLUICE_PLUGIN_API_VERSION, "sluice-example-plugin", 2, kOps};

}  // namespace

extern "C" __attribute__((visibility("default"))) const SluicePlugin* sluice_plugin_init(void) {
  return &kPlugin;
}
