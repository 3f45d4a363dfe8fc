// Where seeded random ops draw from: (seed, epoch, element position), never the element's
// pixels, so that a run repeats exactly, every epoch draws anew, and the draws do not depend
// on which worker, thread or range handles an element (DESIGN.md invariant 10).
//
// The key of an element is set by the map that applies a random fn (core/data/ops/map_op.cc):
//   position  the element's index in the map's input, counted from the first element the map's
//             iterator reads; under a SHARDING_RANGES task (a PermutedSource over positions
//             [begin, end) of an epoch, core/data/distribute/global_order.h) counted from
//             `begin`, so it is the element's position in the epoch's global order whatever the
//             number of workers and however the ranges are cut.
//   epoch     the PermutedSource's epoch under a RANGES task; else the epoch of the repeat()
//             iterators the map's iterator was built under (repeat() builds its input anew for
//             every epoch): 0 for the first epoch of a single repeat, 1 for the next, ...; 0
//             without a repeat. A map above a repeat sees one long stream instead, whose
//             positions go on growing across epochs: different draws every epoch as well.
// A fn applied outside a map (ComponentFn::Apply called directly) draws for position 0 of epoch 0.
//
// Without a seed, an op draws from a generator seeded from the process's entropy: fresh draws in
// every run, as TF's unseeded ops.
//
// Thread safety: the keys are thread-local; the scopes must be destroyed on the thread that made
// them, in reverse order.
#ifndef SLUICE_CORE_ELEMENT_DRAWS_H_
#define SLUICE_CORE_ELEMENT_DRAWS_H_

#include <cstdint>
#include <optional>
#include <random>

namespace sluice {

struct ElementDrawKey {
  int64_t epoch = 0;
  int64_t position = 0;
};

// The key of the element the calling thread's map is applying a fn to ({0, 0} outside).
ElementDrawKey CurrentElementDrawKey();

// Sets the calling thread's element key for its lifetime.
class ScopedElementDrawKey {
 public:
  explicit ScopedElementDrawKey(ElementDrawKey key);
  ~ScopedElementDrawKey();
  ScopedElementDrawKey(const ScopedElementDrawKey&) = delete;
  ScopedElementDrawKey& operator=(const ScopedElementDrawKey&) = delete;

 private:
  const ElementDrawKey saved_;
};

// The epoch of the repeat() iterators being built on the calling thread: 0 outside any repeat;
// under one repeat its epoch number; under nested repeats a mix of their epochs (distinct for
// distinct combinations with overwhelming probability).
int64_t CurrentRepeatEpoch();

// Set by repeat() while it builds the iterator of its input for `epoch`.
class ScopedRepeatEpoch {
 public:
  explicit ScopedRepeatEpoch(int64_t epoch);
  ~ScopedRepeatEpoch();
  ScopedRepeatEpoch(const ScopedRepeatEpoch&) = delete;
  ScopedRepeatEpoch& operator=(const ScopedRepeatEpoch&) = delete;

 private:
  const int64_t saved_epoch_;
  const bool saved_active_;
};

// Which op draws: ops with the same seed draw independent streams.
enum class DrawingOp : uint32_t {
  kRandomCrop = 1,
  kRandomFlipLeftRight = 2,
  kRandomResizedCrop = 3,
  kSampleDistortedBoundingBox = 4,
};

// The generator of one seeded op for the calling thread's current element: a function of
// (seed, op, epoch, position) only, the same in every process and on every machine
// (std::seed_seq and mt19937_64 are specified exactly). Unseeded: seeded from entropy.
std::mt19937_64 ElementGenerator(const std::optional<int64_t>& seed, DrawingOp op);

// A draw in [0, n] that every standard library computes alike (uniform_int_distribution's
// algorithm is each library's own); the modulo bias is below 2^-40 for any image size.
int64_t DrawUpTo(std::mt19937_64& gen, int64_t n);

// A draw in [lo, hi) from the top 53 bits, alike everywhere (uniform_real_distribution is not).
double DrawUniform(std::mt19937_64& gen, double lo, double hi);

}  // namespace sluice

#endif  // SLUICE_CORE_ELEMENT_DRAWS_H_
