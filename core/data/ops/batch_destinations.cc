#include "core/data/ops/batch_destinations.h"

#include <algorithm>
#include <atomic>
#include <utility>

namespace sluice {
namespace {

std::atomic<int64_t> fused_in_place{0};
std::atomic<int64_t> fused_concatenated{0};
std::atomic<bool> fusion_enabled{true};

std::optional<std::vector<Tensor>>& FnBlockSlot() {
  thread_local std::optional<std::vector<Tensor>> slot;
  return slot;
}

}  // namespace

FusedBatchCounts FusedBatchCountsSoFar() {
  FusedBatchCounts c;
  c.in_place = fused_in_place.load(std::memory_order_relaxed);
  c.concatenated = fused_concatenated.load(std::memory_order_relaxed);
  return c;
}

void SetMapBatchFusionEnabled(bool enabled) {
  fusion_enabled.store(enabled, std::memory_order_relaxed);
}

bool MapBatchFusionEnabled() { return fusion_enabled.load(std::memory_order_relaxed); }

BatchDestinations::BatchDestinations(int64_t batch_size, std::string what)
    : batch_size_(batch_size), what_(std::move(what)) {}

void BatchDestinations::Learn(const Element& block) {
  absl::MutexLock lock(&mu_);
  if (learnt_) return;
  learnt_ = true;
  if (block.HasComposite()) return;
  const std::vector<Tensor> leaves = block.Flatten();
  std::vector<Planned> planned;
  // A batch's stacked memory (numbers, string objects), in 128 bits: shapes come from data.
  unsigned __int128 batch_bytes = 0;
  for (const Tensor& t : leaves) {
    if (!t.valid() || t.shape().rank() == 0) return;
    planned.push_back(Planned{t.dtype(), t.shape().DropFirst()});
    const size_t unit = t.dtype() == DType::kString ? sizeof(std::string) : DTypeSize(t.dtype());
    batch_bytes += static_cast<unsigned __int128>(planned.back().row.num_elements()) * unit *
                   static_cast<uint64_t>(batch_size_);
  }
  // Batches are prepared before their rows exist (a small dataset under a huge batch size
  // would allocate them for nothing): only where that stays small.
  if (batch_bytes > static_cast<unsigned __int128>(kMaxBatchBytes)) return;
  // Idle buffers per pool: enough for a map reading ahead 2 * 2 blocks of a batch each and the
  // batch the consumer holds, so that in steady state every batch is written into memory a
  // released one had (more are allocated afresh, not kept).
  constexpr int64_t kIdle = 6;
  for (const Planned& p : planned) {
    if (p.dtype == DType::kString) {
      buffer_pools_.push_back(nullptr);
      if (string_pool_ == nullptr) string_pool_ = StringBatchPool::Create(kIdle);
    } else {
      buffer_pools_.push_back(BatchBufferPool::Create(kIdle));
    }
  }
  leaves_ = std::move(planned);
}

bool BatchDestinations::fusing() {
  absl::MutexLock lock(&mu_);
  return !leaves_.empty();
}

void BatchDestinations::Handed(int64_t position) {
  absl::MutexLock lock(&mu_);
  handed_ = position;
}

int64_t BatchDestinations::StartBatch() {
  absl::MutexLock lock(&mu_);
  const int64_t start = handed_;
  if (start < 0) return -1;
  if (start < base_ || (start - base_) % batch_size_ != 0) {
    base_ = start;
    batches_.clear();
  }
  current_ = (start - base_) / batch_size_;
  batches_.erase(batches_.begin(), batches_.lower_bound(current_));
  return start;
}

absl::StatusOr<std::vector<Tensor>> BatchDestinations::Allocate() {
  std::vector<Tensor> stacked;
  stacked.reserve(leaves_.size());
  for (size_t i = 0; i < leaves_.size(); ++i) {
    const Shape shape = leaves_[i].row.Prepend(batch_size_);
    absl::StatusOr<Tensor> t = buffer_pools_[i] == nullptr
                                   ? string_pool_->Take(shape, what_)
                                   : buffer_pools_[i]->Take(leaves_[i].dtype, shape, what_);
    if (!t.ok()) return t.status();
    stacked.push_back(*std::move(t));
  }
  return stacked;
}

int64_t BatchDestinations::ClampToBatch(int64_t position, int64_t rows) {
  if (!MapBatchFusionEnabled()) return rows;
  absl::MutexLock lock(&mu_);
  if (leaves_.empty() || position < base_) return rows;
  return std::min(rows, batch_size_ - (position - base_) % batch_size_);
}

std::optional<std::vector<Tensor>> BatchDestinations::RowsFor(int64_t position, int64_t rows) {
  if (!MapBatchFusionEnabled()) return std::nullopt;
  absl::MutexLock lock(&mu_);
  if (leaves_.empty() || rows <= 0 || position < base_) return std::nullopt;
  const int64_t k = (position - base_) / batch_size_;
  const int64_t row = (position - base_) % batch_size_;
  if (k < current_ || k > current_ + kMaxAhead || row + rows > batch_size_) return std::nullopt;
  auto it = batches_.find(k);
  if (it == batches_.end()) {
    absl::StatusOr<std::vector<Tensor>> stacked = Allocate();
    if (!stacked.ok()) return std::nullopt;  // the map allocates its own, and meets the refusal
    it = batches_.emplace(k, *std::move(stacked)).first;
  }
  std::vector<Tensor> views;
  views.reserve(it->second.size());
  for (const Tensor& t : it->second) views.push_back(t.Slice(row, row + rows));
  return views;
}

std::optional<Element> BatchDestinations::Assemble(int64_t start,
                                                   const std::vector<Element>& blocks) {
  std::vector<Tensor> stacked;
  {
    absl::MutexLock lock(&mu_);
    if (start < base_ || (start - base_) % batch_size_ != 0) return std::nullopt;
    auto it = batches_.find((start - base_) / batch_size_);
    if (it == batches_.end()) return std::nullopt;
    stacked = std::move(it->second);
    batches_.erase(it);
  }
  int64_t row = 0;
  for (const Element& block : blocks) {
    const std::vector<Tensor> leaves = block.Flatten();
    if (leaves.size() != stacked.size() || leaves.empty()) {
      fused_concatenated.fetch_add(1, std::memory_order_relaxed);
      return std::nullopt;
    }
    for (size_t i = 0; i < leaves.size(); ++i) {
      if (!leaves[i].IsRowsOf(stacked[i], row)) {
        fused_concatenated.fetch_add(1, std::memory_order_relaxed);
        return std::nullopt;
      }
    }
    row += leaves[0].shape().dim(0);
  }
  if (row != batch_size_ || blocks[0].HasComposite()) {
    fused_concatenated.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }
  absl::StatusOr<Element> packed = Element::Pack(blocks[0], std::move(stacked));
  if (!packed.ok()) return std::nullopt;
  fused_in_place.fetch_add(1, std::memory_order_relaxed);
  return *std::move(packed);
}

ScopedFnBlockSlot::ScopedFnBlockSlot(std::optional<std::vector<Tensor>> leaves)
    : saved_(std::move(FnBlockSlot())) {
  FnBlockSlot() = std::move(leaves);
}

ScopedFnBlockSlot::~ScopedFnBlockSlot() { FnBlockSlot() = std::move(saved_); }

std::optional<std::vector<Tensor>> ScopedFnBlockSlot::Release() {
  std::optional<std::vector<Tensor>> leaves = std::move(FnBlockSlot());
  FnBlockSlot().reset();
  return leaves;
}

std::optional<std::vector<Tensor>> TakeFnBlockSlot(const std::vector<LeafPlan>& leaves) {
  std::optional<std::vector<Tensor>>& slot = FnBlockSlot();
  if (!slot.has_value() || slot->size() != leaves.size()) return std::nullopt;
  for (size_t i = 0; i < leaves.size(); ++i) {
    if ((*slot)[i].dtype() != leaves[i].dtype || (*slot)[i].shape() != leaves[i].shape) {
      return std::nullopt;
    }
  }
  std::optional<std::vector<Tensor>> taken = std::move(slot);
  slot.reset();
  return taken;
}

}  // namespace sluice
