// Sets the process's memory limits (ProcessMemoryBudget) for one test and restores them.
#ifndef SLUICE_TESTS_CORE_SCOPED_PROCESS_LIMITS_H_
#define SLUICE_TESTS_CORE_SCOPED_PROCESS_LIMITS_H_

#include "core/tensor/host_memory.h"

namespace sluice {

class ScopedProcessLimits {
 public:
  explicit ScopedProcessLimits(MemoryLimits limits) : saved_(ProcessMemoryBudget().limits()) {
    ProcessMemoryBudget().SetLimits(limits);
  }
  ~ScopedProcessLimits() { ProcessMemoryBudget().SetLimits(saved_); }

  ScopedProcessLimits(const ScopedProcessLimits&) = delete;
  ScopedProcessLimits& operator=(const ScopedProcessLimits&) = delete;

 private:
  const MemoryLimits saved_;
};

}  // namespace sluice

#endif  // SLUICE_TESTS_CORE_SCOPED_PROCESS_LIMITS_H_
