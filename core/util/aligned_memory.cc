#include "core/util/aligned_memory.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace sluice {

void* AllocateAligned(size_t alignment, size_t bytes) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) return nullptr;
  // Room for the worst-placed start and for malloc's pointer below the aligned one.
  const size_t extra = alignment + sizeof(void*);
  if (bytes > SIZE_MAX - extra) return nullptr;
  void* block = std::malloc(bytes + extra);
  if (block == nullptr) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(block) + sizeof(void*);
  const uintptr_t aligned = (start + alignment - 1) & ~(uintptr_t{alignment} - 1);
  std::memcpy(reinterpret_cast<void*>(aligned - sizeof(void*)), &block, sizeof(void*));
  return reinterpret_cast<void*>(aligned);
}

void FreeAligned(void* block) {
  if (block == nullptr) return;
  void* base;
  std::memcpy(&base, static_cast<char*>(block) - sizeof(void*), sizeof(void*));
  std::free(base);
}

}  // namespace sluice
