// shuffle(buffer_size, seed, reshuffle_each_iteration): TF's algorithm shape: fill a buffer of
// buffer_size elements, then repeatedly emit a uniformly chosen slot and refill it from the
// input; when the input ends, the buffer drains in random order.
//
// Randomness: a std::mt19937_64 (whose output the C++ standard fixes) seeded from
// ShuffleIterationSeed(seed, iteration), with unbiased rejection sampling for the slot. The
// order is a pure function of (input order, buffer_size, seed, iteration) on every platform;
// it is not TF's random stream. The executor counts iterations per shuffle op: with
// reshuffle_each_iteration each new iterator of the op (a new epoch under a later repeat())
// takes the next iteration number, without it every iterator uses iteration 0. Every
// MakeIterator() call starts that count again at 0, so two iterators made from the same graph
// with a seed yield the same sequence.
#ifndef SLUICE_CORE_SHUFFLE_ITERATOR_H_
#define SLUICE_CORE_SHUFFLE_ITERATOR_H_

#include <cstdint>
#include <memory>
#include <random>
#include <string>

#include "absl/status/statusor.h"
#include "core/data/iterator.h"

namespace sluice {

// The generator seed of one iteration: a SplitMix64-style mix of both values.
uint64_t ShuffleIterationSeed(uint64_t seed, int64_t iteration);

// Uniform in [0, n) (n > 0) from `gen`, by rejection so that no value is favoured. Unlike
// std::uniform_int_distribution, whose algorithm each standard library chooses, the result is
// the same on every platform for the same generator state.
uint64_t UniformBelow(std::mt19937_64& gen, uint64_t n);

// Shuffles `input` with a generator seeded by `generator_seed` (ShuffleIterationSeed()).
// INVALID_ARGUMENT if buffer_size <= 0. Not thread-safe.
absl::StatusOr<std::unique_ptr<Iterator>> NewShuffleIterator(std::string label,
                                                             std::unique_ptr<Iterator> input,
                                                             int64_t buffer_size,
                                                             uint64_t generator_seed);

}  // namespace sluice

#endif  // SLUICE_CORE_SHUFFLE_ITERATOR_H_
