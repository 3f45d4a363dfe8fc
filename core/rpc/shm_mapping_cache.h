// ShmMappingCache: the consumer's side of warm segments (core/rpc/shm_segment_pool.h,
// docs/SERVICE.md "Warm segments"). It keeps the mappings of segments workers handed this
// process after their streams end, so that a later stream given the same segment back
// (ShmAccept.warm) uses the mapping it has (no hand-over, no page-table faults) and tells the
// worker which segments it may hand back: those no tensor views any more (IdleIds).
//
// A mapping is idle when only the cache holds it (every ring reader and tensor of it gone).
// At most `max_segments` are kept (idle ones beyond go, oldest use first); one idle for
// `idle_ttl` goes at the cache's next use, and the worker names those it no longer keeps
// (ShmAccept.dropped_segment_ids, Drop). consumer_key() is this process's random key: sent on
// every offer, it is what lets a worker hand a segment back to this process and no other.
//
//   ShmMappingCache& cache = ProcessShmMappingCache();
//   offer.set_consumer_key(cache.consumer_key());
//   for (uint64_t id : cache.IdleIds(address)) offer.add_idle_segment_ids(id);
//   ... on ShmAccept: cache.Find(address, socket_name, id, bytes), else map and cache.Put(...)
//
// Thread-safe.
#ifndef SLUICE_CORE_RPC_SHM_MAPPING_CACHE_H_
#define SLUICE_CORE_RPC_SHM_MAPPING_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/rpc/shm_segment.h"

namespace sluice {

struct ShmMappingCacheOptions {
  size_t max_segments = 8;                     // mappings kept at most
  absl::Duration idle_ttl = absl::Seconds(60);  // an idle mapping not used for this long goes
  std::function<absl::Time()> now = [] { return absl::Now(); };  // the clock (tests fake it)
};

class ShmMappingCache {
 public:
  explicit ShmMappingCache(ShmMappingCacheOptions options = {});

  // 16 random bytes, fixed for this object's life (ShmOffer.consumer_key).
  const std::string& consumer_key() const { return key_; }

  // The ids of the segments of the worker at `address` that no tensor or ring views now.
  std::vector<uint64_t> IdleIds(const std::string& address);
  // The mapping of segment `id` of the worker whose socket is `socket_name` if kept and of
  // `bytes` bytes; null otherwise (a kept mapping of another size is dropped).
  std::shared_ptr<ShmSegment> Find(const std::string& address, const std::string& socket_name,
                                   uint64_t id, size_t bytes);
  // Keeps `segment`, the worker's segment `id` (replacing a mapping kept under that id).
  void Put(const std::string& address, const std::string& socket_name, uint64_t id,
           std::shared_ptr<ShmSegment> segment);
  // Forgets the segments `ids` of the worker at `address` (it no longer keeps them).
  void Drop(const std::string& address, const std::vector<uint64_t>& ids);
  // Mappings kept (tests).
  size_t size() const;

 private:
  struct Entry {
    std::string address;
    std::string socket_name;
    uint64_t id = 0;
    std::shared_ptr<ShmSegment> segment;
    absl::Time used;
  };
  // Drops idle mappings unused for idle_ttl, then idle ones beyond max_segments (oldest use
  // first). Returns what to unmap outside the lock.
  std::vector<std::shared_ptr<ShmSegment>> TrimLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ShmMappingCacheOptions options_;
  const std::string key_;
  mutable absl::Mutex mu_;
  std::list<Entry> entries_ ABSL_GUARDED_BY(mu_);  // least recently used first
};

// The cache of this process's consumers (every ServiceStepSource shares it).
ShmMappingCache& ProcessShmMappingCache();

}  // namespace sluice

#endif  // SLUICE_CORE_RPC_SHM_MAPPING_CACHE_H_
