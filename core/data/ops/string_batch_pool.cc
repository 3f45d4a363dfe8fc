#include "core/data/ops/string_batch_pool.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data/shape_limits.h"
#include "core/tensor/host_memory.h"

namespace sluice {

std::shared_ptr<StringBatchPool> StringBatchPool::Create(int64_t max_idle) {
  return std::shared_ptr<StringBatchPool>(new StringBatchPool(max_idle < 0 ? 0 : max_idle));
}

StringBatchPool::~StringBatchPool() {
  for (const Idle& idle : idle_) ProcessMemoryBudget().Release(idle.charged);
}

absl::StatusOr<Tensor> StringBatchPool::Take(const Shape& shape, absl::string_view what) {
  if (absl::Status s = CheckAllocation(what, DType::kString, shape.dims()); !s.ok()) return s;
  const int64_t n = shape.num_elements();
  const int64_t objects = n * static_cast<int64_t>(sizeof(std::string));
  std::unique_ptr<std::vector<std::string>> strings;
  int64_t release = 0;  // what an idle vector was charged beyond its objects
  {
    absl::MutexLock lock(&mu_);
    for (auto it = idle_.begin(); it != idle_.end(); ++it) {
      if (static_cast<int64_t>(it->strings->size()) == n) {
        strings = std::move(it->strings);
        release = it->charged - objects;
        idle_.erase(it);
        ++reused_;
        break;
      }
    }
  }
  if (strings != nullptr) {
    // Its characters are the writer's again, as any string tensor's are.
    ProcessMemoryBudget().Release(release);
  } else {
    if (!ProcessMemoryBudget().TryCharge(objects)) {
      return ProcessMemoryBudget().Refusal(
          objects, what, absl::StrCat("a tensor of shape ", shape.ToString(), " and dtype string"));
    }
    strings = std::make_unique<std::vector<std::string>>(static_cast<size_t>(n));
    absl::MutexLock lock(&mu_);
    ++allocated_;
  }
  std::weak_ptr<StringBatchPool> pool = weak_from_this();
  std::shared_ptr<std::vector<std::string>> shared(
      strings.release(), [pool = std::move(pool), objects](std::vector<std::string>* s) {
        Return(pool, s, objects);
      });
  return Tensor::WrapStrings(std::move(shared), shape);
}

void StringBatchPool::Return(std::weak_ptr<StringBatchPool> pool,
                             std::vector<std::string>* strings, int64_t objects) {
  std::unique_ptr<std::vector<std::string>> owned(strings);
  if (std::shared_ptr<StringBatchPool> p = pool.lock()) {
    return p->GiveBack(std::move(owned), objects);
  }
  owned.reset();
  ProcessMemoryBudget().Release(objects);
}

void StringBatchPool::GiveBack(std::unique_ptr<std::vector<std::string>> strings,
                               int64_t objects) {
  int64_t chars = 0;
  for (const std::string& s : *strings) chars += static_cast<int64_t>(s.capacity());
  bool keep = chars <= kMaxIdleChars;
  if (keep) {
    absl::MutexLock lock(&mu_);
    keep = static_cast<int64_t>(idle_.size()) < max_idle_;
  }
  // The kept characters are charged while idle; a refusal frees them instead.
  if (keep && ProcessMemoryBudget().TryCharge(chars)) {
    absl::MutexLock lock(&mu_);
    if (static_cast<int64_t>(idle_.size()) < max_idle_) {
      idle_.push_back(Idle{std::move(strings), objects + chars});
      return;
    }
    ProcessMemoryBudget().Release(chars);
  }
  strings.reset();  // freed outside the lock
  ProcessMemoryBudget().Release(objects);
}

int64_t StringBatchPool::reused() const {
  absl::MutexLock lock(&mu_);
  return reused_;
}

int64_t StringBatchPool::allocated() const {
  absl::MutexLock lock(&mu_);
  return allocated_;
}

}  // namespace sluice
