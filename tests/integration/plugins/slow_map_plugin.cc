// A heavy map for the autoscaling test (tests/integration/autoscale_test.cc): an identity op on
// int64 tensors that sleeps `us` microseconds per element, as a costly decode would take, so
// that one worker is the bottleneck of a fast trainer and more workers make the job faster
// (sleeping, not spinning: a loaded test machine's cores are not what is measured).
//
//   map(plugin('slow_identity', us=2000))   int64 tensor -> the same tensor, 2 ms later
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

#include "sluice/plugin_api.h"

namespace {

struct SlowState {
  int64_t us = 1000;
};

void* SlowCreate(const SluiceArg* args, int32_t num_args, char* error, size_t error_size) {
  auto* s = new SlowState();
  for (int32_t i = 0; i < num_args; ++i) {
    if (std::strcmp(args[i].key, "us") == 0 && args[i].kind == SLUICE_ARG_INT &&
        args[i].int_value >= 0 && args[i].int_value <= 10'000'000) {
      s->us = args[i].int_value;
    } else {
      std::snprintf(error, error_size, "slow_identity takes one argument us=0..10000000");
      delete s;
      return nullptr;
    }
  }
  return s;
}

void SlowDestroy(void* state) { delete static_cast<SlowState*>(state); }

int SlowSpec(void*, int32_t in_dtype, int32_t in_rank, const int64_t* in_dims, int32_t* out_dtype,
             int32_t* out_rank, int64_t* out_dims, char* error, size_t error_size) {
  if (in_dtype != SLUICE_DT_INT64) {
    std::snprintf(error, error_size, "slow_identity needs an int64 tensor");
    return 1;
  }
  *out_dtype = in_dtype;
  *out_rank = in_rank;
  for (int32_t i = 0; i < in_rank; ++i) out_dims[i] = in_dims[i];
  return 0;
}

int SlowTransform(void* state, const SluiceTensorView* in, const SluiceHost* host,
                  SluiceOutput* out) {
  const int64_t us = static_cast<SlowState*>(state)->us;
  timespec wait{static_cast<time_t>(us / 1'000'000), static_cast<long>((us % 1'000'000) * 1000)};
  while (nanosleep(&wait, &wait) != 0) {
  }
  void* dst = host->allocate_output(out, SLUICE_DT_INT64, in->rank, in->dims);
  if (dst == nullptr) return 1;
  std::memcpy(dst, in->data, static_cast<size_t>(in->num_elements) * sizeof(int64_t));
  return 0;
}

const SluiceOpDef kOps[] = {{"slow_identity", &SlowCreate, &SlowDestroy, &SlowSpec,
                             &SlowTransform}};

const SluicePlugin kPlugin = {SLUICE_PLUGIN_API_VERSION, "sluice-slow-map-test-plugin", 1, kOps};

}  // namespace

extern "C" __attribute__((visibility("default"))) const SluicePlugin* sluice_plugin_init(void) {
  return &kPlugin;
}
