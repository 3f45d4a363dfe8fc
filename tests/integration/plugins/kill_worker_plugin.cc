// A poison pipeline for the failure policy's tests (tests/integration/failure_policy_test.cc):
// a custom-op plugin (include/sluice/plugin_api.h) whose one op kills the process that runs
// it, as a pipeline that crashes its worker (a native crash, the kernel's OOM killer) would.
//
//   map(plugin('kill_worker'))   any tensor -> the same tensor, never: the first element
//                                SIGKILLs the process (no core file, no handler runs)
//
// Its output spec is its input's, so that a coordinator and a client that load it can register
// and plan a pipeline using it; only a worker ever runs it.
#include <signal.h>
#include <unistd.h>

#include "sluice/plugin_api.h"

namespace {

void* KillCreate(const SluiceArg*, int32_t, char*, size_t) {
  static int stateless = 0;
  return &stateless;
}

void KillDestroy(void*) {}

int KillSpec(void*, int32_t in_dtype, int32_t in_rank, const int64_t* in_dims, int32_t* out_dtype,
             int32_t* out_rank, int64_t* out_dims, char*, size_t) {
  *out_dtype = in_dtype;
  *out_rank = in_rank;
  for (int32_t i = 0; i < in_rank; ++i) out_dims[i] = in_dims[i];
  return 0;
}

int KillTransform(void*, const SluiceTensorView*, const SluiceHost*, SluiceOutput*) {
  kill(getpid(), SIGKILL);
  pause();  // SIGKILL is delivered before this returns
  return 1;
}

const SluiceOpDef kOps[] = {{"kill_worker", &KillCreate, &KillDestroy, &KillSpec, &KillTransform}};

const SluicePlugin kPlugin = {SLUICE_PLUGIN_API_VERSION, "sluice-kill-worker-test-plugin", 1,
                              kOps};

}  // namespace

extern "C" __attribute__((visibility("default"))) const SluicePlugin* sluice_plugin_init(void) {
  return &kPlugin;
}
