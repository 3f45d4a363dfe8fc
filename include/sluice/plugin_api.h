/* The custom-op plugin interface: a small, versioned C ABI.
 *
 * A plugin is a shared library that exports one C function,
 *
 *     const SluicePlugin* sluice_plugin_init(void);
 *
 * returning a static table of ops. Sluice loads it with --plugin=PATH (sluicectl, workers) or
 * PluginRegistry::Load (core/data/plugin_loader.h) and runs an op in a pipeline as
 *
 *     map(plugin('scale', factor=2.0), key='image')
 *
 * Each op turns one input tensor into one output tensor. The plugin sees the input through a
 * SluiceTensorView (borrowed for the duration of the call) and makes its output through the
 * SluiceHost callbacks, so no memory crosses the boundary in either direction and the plugin
 * needs no Sluice headers other than this one, and no C++ runtime compatibility.
 *
 * Versioning: SluicePlugin.api_version must equal the SLUICE_PLUGIN_API_VERSION of the loading
 * Sluice; a mismatch is refused with FAILED_PRECONDITION naming the file. Any change to these
 * structs or to the meaning of a field bumps the version.
 *
 * Threading: `transform` and `output_spec` may be called from many threads at once with the
 * same state (map(num_parallel_calls=N)); `create` and `destroy` are not concurrent with other
 * calls on the same state. A plugin is never unloaded while Sluice runs.
 *
 * dtypes are Sluice's DType values (proto/tensor.proto DataType): SLUICE_DT_* below. Numeric
 * data is packed, row-major, native-endian (little-endian on every supported platform).
 *
 * A complete example: examples/plugins/example_plugin.cc.
 */
#ifndef SLUICE_CORE_PLUGIN_API_H_
#define SLUICE_CORE_PLUGIN_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SLUICE_PLUGIN_API_VERSION 1
#define SLUICE_PLUGIN_INIT_SYMBOL "sluice_plugin_init"
/* Output ranks are at most this. */
#define SLUICE_PLUGIN_MAX_RANK 16

enum {
  SLUICE_DT_INVALID = 0,
  SLUICE_DT_BOOL = 1,
  SLUICE_DT_INT8 = 2,
  SLUICE_DT_INT16 = 3,
  SLUICE_DT_INT32 = 4,
  SLUICE_DT_INT64 = 5,
  SLUICE_DT_UINT8 = 6,
  SLUICE_DT_UINT16 = 7,
  SLUICE_DT_UINT32 = 8,
  SLUICE_DT_UINT64 = 9,
  SLUICE_DT_FLOAT16 = 10,
  SLUICE_DT_BFLOAT16 = 11,
  SLUICE_DT_FLOAT32 = 12,
  SLUICE_DT_FLOAT64 = 13,
  SLUICE_DT_STRING = 14
};

/* One input tensor, borrowed for the duration of the call. */
typedef struct SluiceTensorView {
  int32_t dtype;
  int32_t rank;
  const int64_t* dims;          /* rank entries */
  int64_t num_elements;
  const void* data;             /* numeric dtypes; NULL for strings */
  const char* const* strings;   /* SLUICE_DT_STRING: num_elements pointers ... */
  const size_t* string_lengths; /* ... and their lengths (strings may hold NUL bytes) */
} SluiceTensorView;

/* The host's output slot for one call; opaque to the plugin. */
typedef struct SluiceOutput SluiceOutput;

/* What the host offers a transform call. */
typedef struct SluiceHost {
  /* Creates the output tensor (once per call) and returns its zero-filled numeric buffer, or
   * NULL for a string dtype (fill it with set_string) and on a bad dtype or rank (the call then
   * fails with that error). */
  void* (*allocate_output)(SluiceOutput* out, int32_t dtype, int32_t rank, const int64_t* dims);
  /* Sets element `index` of a string output. Returns 0, or -1 when out of range. */
  int (*set_string)(SluiceOutput* out, int64_t index, const char* data, size_t length);
  /* Records why the call fails (copied); the transform then returns non-zero. */
  void (*set_error)(SluiceOutput* out, const char* message);
} SluiceHost;

enum { SLUICE_ARG_INT = 1, SLUICE_ARG_FLOAT = 2, SLUICE_ARG_STRING = 3, SLUICE_ARG_BOOL = 4 };

/* One keyword argument from the pipeline: plugin('op', key=value). */
typedef struct SluiceArg {
  const char* key;
  int32_t kind;               /* SLUICE_ARG_* */
  int64_t int_value;          /* INT, and BOOL as 0/1 */
  double float_value;         /* FLOAT, and INT as a double */
  const char* string_value;   /* STRING (NUL-terminated) */
} SluiceArg;

typedef struct SluiceOpDef {
  const char* name; /* unique across loaded plugins */
  /* Makes the op's state from its arguments (borrowed for the call). On bad arguments returns
   * NULL and writes a NUL-terminated reason into error[0..error_size). A stateless op may
   * return any non-NULL pointer. */
  void* (*create)(const SluiceArg* args, int32_t num_args, char* error, size_t error_size);
  void (*destroy)(void* state);
  /* The static output spec for an input spec: dims may be -1 (unknown). Writes the output's
   * dtype, rank (<= SLUICE_PLUGIN_MAX_RANK) and dims (-1 allowed). Returns 0, or non-zero with a
   * reason in `error` when the op cannot take such an input. */
  int (*output_spec)(void* state, int32_t in_dtype, int32_t in_rank, const int64_t* in_dims,
                     int32_t* out_dtype, int32_t* out_rank, int64_t* out_dims, char* error,
                     size_t error_size);
  /* Computes the output for one input through `host`. Returns 0, or non-zero after
   * host->set_error. Must be thread-safe. */
  int (*transform)(void* state, const SluiceTensorView* input, const SluiceHost* host,
                   SluiceOutput* out);
} SluiceOpDef;

typedef struct SluicePlugin {
  uint32_t api_version; /* SLUICE_PLUGIN_API_VERSION the plugin was built against */
  const char* name;     /* for messages */
  int32_t num_ops;
  const SluiceOpDef* ops;
} SluicePlugin;

/* The entry point every plugin exports. */
typedef const SluicePlugin* (*SluicePluginInitFn)(void);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* SLUICE_CORE_PLUGIN_API_H_ */
