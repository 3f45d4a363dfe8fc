#include "core/util/environment_switch.h"

#include <cstdlib>
#include <cstring>

namespace sluice {

bool EnvironmentSwitchOn(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr || std::strcmp(v, "0") != 0;
}

}  // namespace sluice
