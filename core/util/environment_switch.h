// EnvironmentSwitchOn: a default-on switch that a deployment or a test suite turns off through
// the environment, without a flag (SLUICE_BULK_DATA=0, SLUICE_BULK_INBAND=0,
// SLUICE_SHARED_MEMORY=0: the binaries' defaults for their flags).
//
//   bool bulk = EnvironmentSwitchOn("SLUICE_BULK_DATA");  // false only for SLUICE_BULK_DATA=0
//
// Thread-safe as getenv(3) is: while nothing sets the environment concurrently.
#ifndef SLUICE_CORE_UTIL_ENVIRONMENT_SWITCH_H_
#define SLUICE_CORE_UTIL_ENVIRONMENT_SWITCH_H_

namespace sluice {

// False when the environment variable `name` is exactly "0"; true when it is unset, empty or
// anything else (a typo keeps the default on rather than turning a feature off unnoticed).
bool EnvironmentSwitchOn(const char* name);

}  // namespace sluice

#endif  // SLUICE_CORE_UTIL_ENVIRONMENT_SWITCH_H_
