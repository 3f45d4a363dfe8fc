// Loading custom-op plugins (include/sluice/plugin_api.h) and running their ops as map fns.
//
//   RETURN_IF_ERROR(LoadPlugins({"build/examples/plugins/libsluice_example_plugin.so"}));
//   Dataset::Parse("range(4).map(cast(tf.float32)).map(plugin('scale', factor=2.0))");
//
// Thread safety: PluginRegistry is thread-safe. Plugins stay loaded for the life of the
// process (their code may run in any iterator at any time).
#ifndef SLUICE_CORE_PLUGIN_LOADER_H_
#define SLUICE_CORE_PLUGIN_LOADER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "core/data/map_fns.h"
#include "sluice/plugin_api.h"
#include "proto/dataset.pb.h"

namespace sluice {

class PluginRegistry {
 public:
  // The process-wide registry that map(plugin(...)) uses.
  static PluginRegistry& Global();

  PluginRegistry() = default;
  PluginRegistry(const PluginRegistry&) = delete;
  PluginRegistry& operator=(const PluginRegistry&) = delete;

  // Loads the shared library at `path` and registers its ops. Loading a path again is a no-op.
  // NOT_FOUND when the file does not exist; FAILED_PRECONDITION naming the file when it cannot
  // be loaded, lacks sluice_plugin_init, returns no table, or was built against another
  // SLUICE_PLUGIN_API_VERSION; ALREADY_EXISTS when an op name is already registered (nothing of
  // that plugin is registered then).
  absl::Status Load(const std::string& path) ABSL_LOCKS_EXCLUDED(mu_);

  // Registers a table directly (tests, ops linked into the binary). `source` names it in
  // messages. Same errors as Load for the table's contents.
  absl::Status Register(const SluicePlugin* plugin, const std::string& source)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The op, or nullptr when no loaded plugin provides it. The pointer stays valid for the
  // life of the process.
  const SluiceOpDef* FindOp(absl::string_view name) const ABSL_LOCKS_EXCLUDED(mu_);
  // Registered op names, sorted.
  std::vector<std::string> OpNames() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, const SluiceOpDef*> ops_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> loaded_paths_ ABSL_GUARDED_BY(mu_);
};

// Loads each path into PluginRegistry::Global(), in order; the first error stops. What
// `--plugin=PATH` does in sluicectl and the worker.
absl::Status LoadPlugins(const std::vector<std::string>& paths);

// The map fn for plugin(op, **args) from PluginRegistry::Global(): FAILED_PRECONDITION when no
// loaded plugin has the op (the message lists the loaded ops and says to pass --plugin),
// INVALID_ARGUMENT when the op refuses its arguments.
absl::StatusOr<std::unique_ptr<ComponentFn>> MakePluginComponentFn(const proto::PluginFn& fn);

}  // namespace sluice

#endif  // SLUICE_CORE_PLUGIN_LOADER_H_
