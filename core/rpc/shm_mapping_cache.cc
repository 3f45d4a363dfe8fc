#include "core/rpc/shm_mapping_cache.h"

#include <algorithm>
#include <utility>

#include "absl/random/random.h"

namespace sluice {
namespace {

std::string RandomKey() {
  absl::BitGen gen;  // seeded from the OS's entropy
  std::string out(16, '\0');
  for (char& c : out) c = static_cast<char>(absl::Uniform<uint8_t>(gen));
  return out;
}

bool Idle(const std::shared_ptr<ShmSegment>& segment) { return segment.use_count() == 1; }

}  // namespace

ShmMappingCache::ShmMappingCache(ShmMappingCacheOptions options)
    : options_(std::move(options)), key_(RandomKey()) {}

std::vector<std::shared_ptr<ShmSegment>> ShmMappingCache::TrimLocked() {
  std::vector<std::shared_ptr<ShmSegment>> out;
  const absl::Time now = options_.now();
  size_t kept = entries_.size();
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (Idle(it->segment) && (now - it->used >= options_.idle_ttl || kept > options_.max_segments)) {
      out.push_back(std::move(it->segment));
      it = entries_.erase(it);
      --kept;
    } else {
      ++it;
    }
  }
  return out;
}

std::vector<uint64_t> ShmMappingCache::IdleIds(const std::string& address) {
  std::vector<uint64_t> ids;
  std::vector<std::shared_ptr<ShmSegment>> unmap;
  absl::MutexLock lock(&mu_);
  unmap = TrimLocked();
  for (const Entry& e : entries_) {
    if (e.address == address && Idle(e.segment)) ids.push_back(e.id);
  }
  return ids;
}

std::shared_ptr<ShmSegment> ShmMappingCache::Find(const std::string& address,
                                                  const std::string& socket_name, uint64_t id,
                                                  size_t bytes) {
  std::shared_ptr<ShmSegment> found, unmap;
  absl::MutexLock lock(&mu_);
  auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) {
    return e.address == address && e.socket_name == socket_name && e.id == id;
  });
  if (it == entries_.end()) return nullptr;
  if (it->segment->size() != bytes || !Idle(it->segment)) {
    unmap = std::move(it->segment);
    entries_.erase(it);
    return nullptr;
  }
  it->used = options_.now();
  found = it->segment;
  entries_.splice(entries_.end(), entries_, it);  // most recently used last
  return found;
}

void ShmMappingCache::Put(const std::string& address, const std::string& socket_name,
                          uint64_t id, std::shared_ptr<ShmSegment> segment) {
  std::vector<std::shared_ptr<ShmSegment>> unmap;
  absl::MutexLock lock(&mu_);
  auto it = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) {
    return e.address == address && e.socket_name == socket_name && e.id == id;
  });
  if (it != entries_.end()) {
    unmap.push_back(std::move(it->segment));
    entries_.erase(it);
  }
  entries_.push_back(Entry{.address = address,
                           .socket_name = socket_name,
                           .id = id,
                           .segment = std::move(segment),
                           .used = options_.now()});
  for (std::shared_ptr<ShmSegment>& s : TrimLocked()) unmap.push_back(std::move(s));
}

void ShmMappingCache::Drop(const std::string& address, const std::vector<uint64_t>& ids) {
  std::vector<std::shared_ptr<ShmSegment>> unmap;
  absl::MutexLock lock(&mu_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->address == address && std::find(ids.begin(), ids.end(), it->id) != ids.end()) {
      unmap.push_back(std::move(it->segment));
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
}

size_t ShmMappingCache::size() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

ShmMappingCache& ProcessShmMappingCache() {
  static ShmMappingCache* const cache = new ShmMappingCache();
  return *cache;
}

}  // namespace sluice
