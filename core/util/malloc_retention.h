// Malloc retention: keeps the memory a process frees for the next batches instead of handing it
// back to the kernel and faulting it in again.
//
// A pipeline builds and frees a batch per step: 256 strings of 3 KiB and their tensors, say.
// With glibc's defaults the heap's freed top is trimmed (brk shrinks) once it exceeds a
// threshold of about twice the largest block yet mmapped (~1.6 MB for such batches), and the
// next step grows it again: every page comes back as a zeroed page fault. Measured on the
// TFRecord parse pipeline (`sluicectl bench` of tf_record_dataset(...).map(parse_example(...))
// .batch(256).repeat(10), bench/RESULTS.md, "Issue 29 part iss29b"): 915k minor faults and
// 1.7 CPU-s, of which 1.0 s in the kernel, against 9.6k faults and 0.55 CPU-s once the freed
// top is kept. RetainFreedMemory() raises the trim threshold (and fixes the mmap threshold at
// the value glibc's own adjustment would reach), so that a process keeps up to
// `trim_threshold` of freed heap per malloc arena for reuse: resident memory stays near its
// peak (which the budgets in the processes bound), and the steady state makes no page faults.
//
// The process's GLIBC_TUNABLES environment variable wins: when it sets
// glibc.malloc.trim_threshold or glibc.malloc.mmap_threshold (or MALLOC_TRIM_THRESHOLD_ /
// MALLOC_MMAP_THRESHOLD_ are set), nothing is changed; SLUICE_MALLOC_RETENTION=off leaves
// glibc's defaults too (an A/B of this setting, or a host short of memory). Without glibc,
// nothing is changed.
//
// Fastbins off: a heap that keeps a large free top (or any free chunk of 64 KiB or more) makes
// glibc consolidate its fastbins on every free that merges into such a chunk (malloc_consolidate
// walks every fastbin chunk), which a process freeing on one thread what another allocated
// does all the time: at 1 KiB steps a worker's free() of step bookkeeping ran malloc_consolidate
// 6% of its CPU, and malloc as a whole a third (bench/RESULTS.md, "blockstep"). With fastbins
// off (M_MXFAST 0) small blocks still come back through each thread's tcache, and the rest are
// binned as larger ones are; GLIBC_TUNABLES naming glibc.malloc.mxfast wins.
//
// Thread safety: call once, early in main(), before threads allocate.
#ifndef SLUICE_CORE_UTIL_MALLOC_RETENTION_H_
#define SLUICE_CORE_UTIL_MALLOC_RETENTION_H_

#include <cstddef>

#include "absl/strings/string_view.h"

namespace sluice {

struct MallocRetentionOptions {
  // Freed memory at the top of a malloc heap kept rather than returned to the kernel.
  size_t trim_threshold = size_t{64} << 20;
  // Blocks at least this large are mmapped (and unmapped when freed); smaller ones come from
  // the heap. glibc's default adjustment climbs to 32 MiB on 64-bit hosts; fixing it here
  // (setting the trim threshold stops that adjustment) keeps batch-sized blocks on the heap.
  size_t mmap_threshold = size_t{32} << 20;
  // Keep glibc's fastbins (see above); false turns them off.
  bool fastbins = false;
};

// Applies `options` to the process's malloc (mallopt). Returns true if it did, false if the
// environment chose its own thresholds (see above), malloc is not glibc's, or mallopt refused.
bool RetainFreedMemory(const MallocRetentionOptions& options = {});

// Whether the GLIBC_TUNABLES value `tunables` sets one of malloc's trim or mmap thresholds.
bool TunablesSetMallocThresholds(absl::string_view tunables);
// Whether it sets glibc.malloc.mxfast (the fastbins' size).
bool TunablesSetMallocFastbins(absl::string_view tunables);

}  // namespace sluice

#endif  // SLUICE_CORE_UTIL_MALLOC_RETENTION_H_
