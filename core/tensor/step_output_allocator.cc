#include "core/tensor/step_output_allocator.h"

namespace sluice {
namespace {

thread_local const StepOutputAllocator* g_current = nullptr;

}  // namespace

StepOutputAllocator::Scope::Scope(const StepOutputAllocator* allocator) : previous_(g_current) {
  g_current = allocator;
}

StepOutputAllocator::Scope::~Scope() { g_current = previous_; }

const StepOutputAllocator* StepOutputAllocator::Current() { return g_current; }

std::shared_ptr<TensorBuffer> AllocateStepOutput(size_t bytes) {
  const StepOutputAllocator* allocator = g_current;
  if (allocator == nullptr || bytes == 0) return nullptr;
  return allocator->AllocateStepOutput(bytes);
}

}  // namespace sluice
