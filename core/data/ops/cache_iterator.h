// cache(filename=''): the first complete pass over the input is kept; later passes read it
// instead of the input, as tf.data.Dataset.cache.
//
// In memory (empty filename): a CacheStore shared by the iterators of one executor graph (every
// epoch of a repeat() above the cache, say). A pass that stops early (the iterator is destroyed
// before the end) leaves the cache empty; the next pass reads the input again.
//
// To a file: the pass writes `<filename>.tmp-<pid>-<n>` and renames it to `filename` when the
// input ends, so a partially written cache is never read, and a cache survives the process:
// another run of the same pipeline reads the file without touching its input. The file records
// the fingerprint of the graph upstream of the cache; a file written by another graph, or one
// that is truncated or not a cache file, is ignored and rewritten. A record that fails its
// checksum while reading is DATA_LOSS naming the file and byte offset.
//
// File format (little-endian): "SLUICECACHE1\n\0\0\0", u32 fingerprint length, fingerprint;
// then per element u64 length, a serialized proto::ElementProto, u64 FNV-1a of it; then
// u64 0xFFFFFFFFFFFFFFFF, u64 element count, "SLUICECACHEEND\0\0".
//
// Element errors (core/data/op_iterator.h) pass through and are not cached, as TF's cache skips
// nothing: the cached pass is the elements that were produced.
#ifndef SLUICE_CORE_CACHE_ITERATOR_H_
#define SLUICE_CORE_CACHE_ITERATOR_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/data/iterator.h"
#include "core/data/memory_budget.h"
#include "sluice/element.h"

namespace sluice {

// A completed in-memory cache. Thread-safe.
class CacheStore {
 public:
  // The cached elements once a pass has completed, else null.
  std::shared_ptr<const std::vector<Element>> Get() const ABSL_LOCKS_EXCLUDED(mu_);
  // Publishes a completed pass; the first one wins. `held` is their bytes in the process's
  // memory budget (core/data/memory_budget.h), kept as long as the cache is.
  void Complete(std::vector<Element> elements, std::unique_ptr<MemoryReservation> held)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  std::shared_ptr<const std::vector<Element>> elements_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<MemoryReservation> held_ ABSL_GUARDED_BY(mu_);
};

// `input` is only called when the cache is not complete (so a complete cache never opens the
// input's files). The elements a pass gathers count against the process's memory budget: a
// cache() of more than it allows is RESOURCE_EXHAUSTED naming the op.
std::unique_ptr<Iterator> NewMemoryCacheIterator(std::string label,
                                                 std::shared_ptr<CacheStore> store,
                                                 std::function<std::unique_ptr<Iterator>()> input);

// `fingerprint` identifies the upstream graph (Dataset::Fingerprint of the graph up to the
// cache op).
std::unique_ptr<Iterator> NewFileCacheIterator(std::string label, std::string filename,
                                               std::string fingerprint,
                                               std::function<std::unique_ptr<Iterator>()> input);

// True if `filename` holds a complete cache for `fingerprint` (a test and tooling hook).
bool IsCompleteCacheFile(const std::string& filename, const std::string& fingerprint);

}  // namespace sluice

#endif  // SLUICE_CORE_CACHE_ITERATOR_H_
