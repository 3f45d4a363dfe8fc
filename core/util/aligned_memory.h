// Aligned host memory whose blocks malloc can reuse for the next block of the same size.
//
// std::aligned_alloc (glibc's _int_memalign) asks its arena for `bytes + alignment + 32`,
// returns an aligned block of exactly `bytes` from inside it, and frees the lead and tail it cut
// off as small chunks. Those go to the allocating thread's tcache, and the next small malloc
// there (the make_shared of the buffer that owns the block, say) takes one and pins it beside
// the block. When the block is freed, the hole it leaves is `bytes` long and its neighbours are
// in use: too small for the next aligned_alloc of the same size, which needs `bytes + alignment
// + 32`. So every step of a pipeline producing same-sized tensors carves a new block from the
// arena's top: at 16 MiB steps, a fresh 64 MiB heap every three or four steps and ~4,000 page
// faults per step (the 16 MiB "build" term of bench/RESULTS.md, issue 28 "bigfault"), and the
// holes left behind hold several times the memory in flight.
//
// AllocateAligned asks malloc for one plain block of `bytes + alignment + sizeof(void*)` and
// aligns inside it, keeping malloc's pointer just below the one it returns: a block freed is a
// hole of exactly the size the next request of the same size asks for, which malloc hands out
// again, with its pages already faulted in (RetainFreedMemory keeps them, malloc_retention.h).
// Nothing is pooled or shared: a block goes back to malloc when it is freed, and malloc's
// settings (SLUICE_MALLOC_RETENTION, GLIBC_TUNABLES) govern what is kept.
//
// Thread safety: plain functions; safe from any thread.
#ifndef SLUICE_CORE_UTIL_ALIGNED_MEMORY_H_
#define SLUICE_CORE_UTIL_ALIGNED_MEMORY_H_

#include <cstddef>

namespace sluice {

// `bytes` of uninitialised memory aligned to `alignment` (a power of two), to be freed with
// FreeAligned (never std::free); nullptr when the system refuses or the size overflows.
void* AllocateAligned(size_t alignment, size_t bytes);

// Frees a block from AllocateAligned; nullptr is a no-op.
void FreeAligned(void* block);

}  // namespace sluice

#endif  // SLUICE_CORE_UTIL_ALIGNED_MEMORY_H_
