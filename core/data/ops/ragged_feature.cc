#include "core/data/ops/ragged_feature.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sluice/composite_tensor.h"
#include "core/util/status_macros.h"

namespace sluice {

int64_t RaggedLayout::UniformSize() const {
  int64_t n = 1;
  for (int64_t u : uniform) n *= u;  // bounded by ExampleParser::Create
  return n;
}

ElementSpec RaggedLayout::Spec(DType dtype, bool batched, int64_t batch_dim) const {
  const int ragged_rank = static_cast<int>(ragged.size()) + (batched ? 1 : 0);
  std::vector<int64_t> dims = {batched ? batch_dim : kUnknownDim};
  for (int i = 0; i < ragged_rank; ++i) dims.push_back(kUnknownDim);
  dims.insert(dims.end(), uniform.begin(), uniform.end());
  if (ragged_rank == 0) return ElementSpec(TensorSpec{dtype, Shape(std::move(dims))});
  return RaggedTensorSpecOf(dtype, std::move(dims), ragged_rank);
}

RaggedRows::RaggedRows(const RaggedLayout& layout, bool batched)
    : layout_(layout), batched_(batched) {
  splits_.assign(layout.ragged.size() + (batched ? 1 : 0), std::vector<int64_t>{0});
}

absl::Status RaggedRows::Fail(int64_t record, absl::string_view why) const {
  return absl::InvalidArgumentError(absl::StrCat("parse_example: RaggedFeature '", layout_.key,
                                                 "', record ", record, ": ", why));
}

absl::Status RaggedRows::AddRecord(int64_t record, int64_t num_values,
                                   const std::vector<std::span<const int64_t>>& partitions) {
  const int64_t uniform = layout_.UniformSize();
  if (num_values % uniform != 0) {
    return Fail(record, absl::StrCat(num_values, " values of '", layout_.value_key,
                                     "' are not a multiple of the uniform row length ",
                                     uniform));
  }
  const size_t k = layout_.ragged.size();
  // The rows of the level below the partition being read, innermost first: the values'.
  int64_t below = num_values / uniform;
  std::string below_name = absl::StrCat("the values of '", layout_.value_key, "'");
  std::vector<std::vector<int64_t>> local(k);
  for (size_t p = k; p-- > 0;) {
    const RaggedLayout::Partition& part = layout_.ragged[p];
    const std::span<const int64_t> v = partitions[p];
    std::vector<int64_t>& s = local[p];
    RETURN_IF_ERROR(PartitionSplits(record, part, v, below, below_name, &s));
    below = static_cast<int64_t>(s.size()) - 1;
    below_name = absl::StrCat("the partition '", part.key, "'");
  }
  if (batched_) splits_[0].push_back(splits_[0].back() + below);
  for (size_t p = 0; p < k; ++p) {
    std::vector<int64_t>& out = splits_[p + (batched_ ? 1 : 0)];
    const int64_t offset = out.back();
    for (size_t j = 1; j < local[p].size(); ++j) out.push_back(offset + local[p][j]);
  }
  return absl::OkStatus();
}

absl::Status RaggedRows::PartitionSplits(int64_t record, const RaggedLayout::Partition& part,
                                         std::span<const int64_t> v, int64_t below,
                                         const std::string& below_name,
                                         std::vector<int64_t>* s) const {
  using Kind = RaggedLayout::PartitionKind;
  switch (part.kind) {
    case Kind::kRowLengths:
      return LengthsToSplits(record, part.key, v, below, below_name, s);
    case Kind::kRowSplits:
      s->assign(v.begin(), v.end());
      return CheckSplits(record, "row splits", part.key, *s, below, below_name);
    case Kind::kRowStarts:
      // TF's from_row_starts: splits = starts + [rows below]. Empty starts over rows below
      // would drop them (TF 2.15 gives no rows); that is refused as a mismatch.
      if (v.empty() && below > 0) {
        return Fail(record, absl::StrCat("the row starts of '", part.key, "' are empty but the "
                                         "level below has ", below, " rows (", below_name, ")"));
      }
      for (size_t j = 0; j < v.size(); ++j) {
        if (v[j] > below) {
          return Fail(record, absl::StrCat("row start ", v[j], " of '", part.key,
                                           "' at position ", j, " is past the ", below,
                                           " rows of the level below (", below_name, ")"));
        }
      }
      s->assign(v.begin(), v.end());
      s->push_back(below);
      return CheckSplits(record, "row starts", part.key, *s, below, below_name);
    case Kind::kRowLimits:
      // TF's from_row_limits: splits = [0] + limits.
      s->assign(1, 0);
      s->insert(s->end(), v.begin(), v.end());
      return CheckSplits(record, "row limits", part.key, *s, below, below_name);
    case Kind::kValueRowIds:
      return RowIdsToSplits(record, part.key, v, below, below_name, s);
  }
  return Fail(record, "unknown partition kind");
}

absl::Status RaggedRows::LengthsToSplits(int64_t record, const std::string& key,
                                         std::span<const int64_t> v, int64_t below,
                                         const std::string& below_name,
                                         std::vector<int64_t>* s) const {
  s->reserve(v.size() + 1);
  s->push_back(0);
  int64_t sum = 0;
  for (size_t j = 0; j < v.size(); ++j) {
    if (v[j] < 0) {
      return Fail(record, absl::StrCat("row length ", v[j], " of '", key, "' at position ", j,
                                       " is negative"));
    }
    if (v[j] > below - sum) {
      return Fail(record, absl::StrCat("the row lengths of '", key, "' sum to more than the ",
                                       below, " rows of the level below (", below_name, ")"));
    }
    sum += v[j];
    s->push_back(sum);
  }
  if (sum != below) {
    return Fail(record, absl::StrCat("the row lengths of '", key, "' sum to ", sum,
                                     " but the level below has ", below, " rows (", below_name,
                                     ")"));
  }
  return absl::OkStatus();
}

// `s`, row splits made of the partition `key` (`what`: "row splits", "row starts" or "row
// limits", as the record holds them), starts at 0, never decreases and ends at `below`.
absl::Status RaggedRows::CheckSplits(int64_t record, absl::string_view what,
                                     const std::string& key, const std::vector<int64_t>& s,
                                     int64_t below, const std::string& below_name) const {
  if (s.empty()) {
    return Fail(record, absl::StrCat("the ", what, " of '", key,
                                     "' are empty (they need at least [0])"));
  }
  if (s[0] != 0) {
    return Fail(record, absl::StrCat("the ", what, " of '", key, "' start at ", s[0],
                                     ", not 0"));
  }
  // Positions are the record's: a RowLimits' j-th limit is the splits' (j + 1)-th.
  const size_t shift = what == "row limits" ? 1 : 0;
  for (size_t j = 1; j < s.size(); ++j) {
    if (s[j] < s[j - 1]) {
      return Fail(record, absl::StrCat("the ", what, " of '", key, "' decrease at position ",
                                       j - shift, " (", s[j], " after ", s[j - 1], ")"));
    }
  }
  if (s.back() != below) {
    return Fail(record, absl::StrCat("the ", what, " of '", key, "' end at ", s.back(),
                                     " but the level below has ", below, " rows (", below_name,
                                     ")"));
  }
  return absl::OkStatus();
}

absl::Status RaggedRows::RowIdsToSplits(int64_t record, const std::string& key,
                                        std::span<const int64_t> v, int64_t below,
                                        const std::string& below_name,
                                        std::vector<int64_t>* s) const {
  if (static_cast<int64_t>(v.size()) != below) {
    return Fail(record, absl::StrCat("'", key, "' has ", v.size(), " value row ids but the "
                                     "level below has ", below, " rows (", below_name, ")"));
  }
  // splits[r] = the number of values in rows before r; row v[j] holds value j.
  s->assign(1, 0);
  for (size_t j = 0; j < v.size(); ++j) {
    if (v[j] < 0 || (j > 0 && v[j] < v[j - 1])) {
      return Fail(record, absl::StrCat("value row id ", v[j], " of '", key, "' at position ", j,
                                       v[j] < 0 ? " is negative" : " is below the one before"));
    }
    const int64_t last = j == 0 ? -1 : v[j - 1];  // the last row holding a value
    if (v[j] - last - 1 > kMaxEmptyRowsPerRecord) {
      return Fail(record, absl::StrCat("value row id ", v[j], " of '", key, "' at position ", j,
                                       " leaves more than ", kMaxEmptyRowsPerRecord,
                                       " empty rows before it"));
    }
    if (v[j] > last) s->resize(static_cast<size_t>(v[j]) + 1, static_cast<int64_t>(j));
  }
  if (!v.empty()) s->push_back(static_cast<int64_t>(v.size()));
  return absl::OkStatus();
}

absl::StatusOr<Element> RaggedRows::Finish(const Tensor& flat_values) const {
  const std::string what = absl::StrCat("parse_example: feature '", layout_.key, "'");
  std::vector<int64_t> dims = {flat_values.num_elements() / layout_.UniformSize()};
  dims.insert(dims.end(), layout_.uniform.begin(), layout_.uniform.end());
  ASSIGN_OR_RETURN(Tensor values, flat_values.Reshape(Shape(std::move(dims))));
  if (splits_.empty()) return Element(std::move(values));
  std::vector<Tensor> splits;
  for (const std::vector<int64_t>& level : splits_) {
    ASSIGN_OR_RETURN(Tensor t, Tensor::TryAllocate(DType::kInt64,
                                                   Shape({static_cast<int64_t>(level.size())}),
                                                   what));
    std::memcpy(t.mutable_data<int64_t>(), level.data(), level.size() * sizeof(int64_t));
    splits.push_back(std::move(t));
  }
  return MakeRaggedTensor(std::move(values), std::move(splits), what);
}

}  // namespace sluice
