// EnvironmentSwitchOn (core/util/environment_switch.h): the binaries' default-on switches
// (SLUICE_BULK_DATA, SLUICE_BULK_INBAND, SLUICE_SHARED_MEMORY) are off only for exactly "0".
#include "core/util/environment_switch.h"

#include <cstdlib>
#include <vector>

#include "core/rpc/bulk_channel.h"
#include "core/rpc/shm_segment.h"
#include "gtest/gtest.h"

namespace sluice {
namespace {

constexpr char kName[] = "SLUICE_TEST_ENVIRONMENT_SWITCH";

TEST(EnvironmentSwitchTest, OffOnlyForZero) {
  unsetenv(kName);
  EXPECT_TRUE(EnvironmentSwitchOn(kName)) << "unset";
  for (const char* on : {"", "1", "00", "0 ", " 0", "off", "false"}) {
    setenv(kName, on, 1);
    EXPECT_TRUE(EnvironmentSwitchOn(kName)) << "\"" << on << "\"";
  }
  setenv(kName, "0", 1);
  EXPECT_FALSE(EnvironmentSwitchOn(kName));
  unsetenv(kName);
}

// The binaries' three switches read their own variable, each independently of the others.
TEST(EnvironmentSwitchTest, TheBinariesSwitchesReadTheirOwnVariable) {
  const char* const names[] = {"SLUICE_BULK_DATA", "SLUICE_BULK_INBAND", "SLUICE_SHARED_MEMORY"};
  auto read = [] {
    return std::vector<bool>{BulkDataDefaultFromEnvironment(), BulkInbandHeadersFromEnvironment(),
                             SharedMemoryDefaultFromEnvironment()};
  };
  for (const char* name : names) unsetenv(name);
  EXPECT_EQ(read(), std::vector<bool>({true, true, true}));
  for (int off = 0; off < 3; ++off) {
    for (const char* name : names) unsetenv(name);
    setenv(names[off], "0", 1);
    std::vector<bool> expected = {true, true, true};
    expected[off] = false;
    EXPECT_EQ(read(), expected) << names[off] << "=0";
  }
  for (const char* name : names) unsetenv(name);
}

}  // namespace
}  // namespace sluice
