// Broken plugins for plugin_loader_test: built twice, with
//   SLUICE_TEST_PLUGIN_VERSION=<n>  exports sluice_plugin_init with that api_version
//   SLUICE_TEST_PLUGIN_NO_INIT      exports no sluice_plugin_init at all
#include "sluice/plugin_api.h"

#ifdef SLUICE_TEST_PLUGIN_NO_INIT
extern "C" __attribute__((visibility("default"))) int not_a_sluice_plugin(void) { return 1; }
#else
namespace {
const SluicePlugin kPlugin = {SLUICE_TEST_PLUGIN_VERSION, "test-plugin", 0, nullptr};
}  // namespace
extern "C" __attribute__((visibility("default"))) const SluicePlugin* sluice_plugin_init(void) {
  return &kPlugin;
}
#endif
