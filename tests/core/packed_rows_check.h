// The invariant every pack() output must keep, shared by the pack unit test and the
// multi-process pack fault test: rows of exactly L positions whose segments hold each example's
// first min(length, L) tokens exactly once, contiguously and in order, segment ids 1, 2, ... per
// row, positions 0, 1, ... per segment, zeros after the last segment.
#ifndef SLUICE_TESTS_CORE_PACKED_ROWS_CHECK_H_
#define SLUICE_TESTS_CORE_PACKED_ROWS_CHECK_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "gtest/gtest.h"

namespace sluice {
namespace testing_util {

// One packed row of one feature.
struct PackedRow {
  std::vector<int32_t> tokens;
  std::vector<int32_t> segment_ids;
  std::vector<int32_t> positions;
};

// `decode(token)` gives (example index, offset in the example) of a non-padding token, as the
// test built them. `lengths[i]` is example i's untruncated length.
inline void CheckPackedRows(const std::vector<int64_t>& lengths, int64_t L,
                            const std::vector<PackedRow>& rows,
                            const std::function<std::pair<int64_t, int64_t>(int32_t)>& decode) {
  std::vector<int64_t> seen(lengths.size(), 0);
  for (size_t r = 0; r < rows.size(); ++r) {
    const PackedRow& row = rows[r];
    ASSERT_EQ(row.tokens.size(), static_cast<size_t>(L)) << "row " << r;
    ASSERT_EQ(row.segment_ids.size(), static_cast<size_t>(L)) << "row " << r;
    ASSERT_EQ(row.positions.size(), static_cast<size_t>(L)) << "row " << r;
    int32_t segment = 0;
    int64_t example = -1;
    for (int64_t k = 0; k < L; ++k) {
      if (row.segment_ids[k] == 0) {  // padding: to the end of the row, all zeros
        for (int64_t m = k; m < L; ++m) {
          ASSERT_EQ(row.segment_ids[m], 0) << "row " << r;
          ASSERT_EQ(row.tokens[m], 0) << "row " << r;
          ASSERT_EQ(row.positions[m], 0) << "row " << r;
        }
        break;
      }
      const auto [ex, offset] = decode(row.tokens[k]);
      ASSERT_GE(ex, 0);
      ASSERT_LT(ex, static_cast<int64_t>(lengths.size()));
      if (row.segment_ids[k] != segment) {  // the next id, a new example from its start
        ASSERT_EQ(row.segment_ids[k], segment + 1) << "row " << r << " position " << k;
        segment = row.segment_ids[k];
        example = ex;
        ASSERT_EQ(seen[ex], 0) << "example " << ex << " appears in two segments";
      }
      ASSERT_EQ(ex, example) << "row " << r << " position " << k << ": two examples in a segment";
      ASSERT_EQ(offset, seen[ex]) << "example " << ex << ": a token out of order or repeated";
      ASSERT_EQ(row.positions[k], offset) << "row " << r << " position " << k;
      ++seen[ex];
    }
  }
  for (size_t i = 0; i < lengths.size(); ++i) {
    EXPECT_EQ(seen[i], std::min(lengths[i], L))
        << "example " << i << " (length " << lengths[i] << ")";
  }
}

}  // namespace testing_util
}  // namespace sluice

#endif  // SLUICE_TESTS_CORE_PACKED_ROWS_CHECK_H_
