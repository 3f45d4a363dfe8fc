// Tar archives built byte by byte in a test, including ones whose headers lie: a member claiming
// 2 GiB over 100 real bytes, long-name and pax headers in front of any entry.
//
//   std::string tar = crafted::TarEntry("a.txt", '0', "hello") +
//                     crafted::TarHeader("big.bin", '0', uint64_t{1} << 31) + "only this" +
//                     crafted::kTarEnd;
#ifndef SLUICE_TESTS_CORE_CRAFTED_TAR_H_
#define SLUICE_TESTS_CORE_CRAFTED_TAR_H_

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

namespace sluice::crafted {

// One 512-byte ustar header of entry `type` ('0' file, '5' directory, '2' symlink, 'L' GNU long
// name, 'x' pax header, ...) claiming `size` bytes of data. Sizes of 8 GiB and more are written
// base-256 (GNU).
inline std::string TarHeader(const std::string& name, char type, uint64_t size) {
  std::string h(512, '\0');
  std::memcpy(h.data(), name.data(), std::min<size_t>(name.size(), 100));
  std::snprintf(&h[100], 8, "%07o", 0644);
  std::snprintf(&h[108], 8, "%07o", 0);
  std::snprintf(&h[116], 8, "%07o", 0);
  if (size < (uint64_t{1} << 33)) {
    std::snprintf(&h[124], 12, "%011llo", static_cast<unsigned long long>(size));
  } else {
    h[124] = static_cast<char>(0x80);
    for (int i = 0; i < 8; ++i) h[135 - i] = static_cast<char>(size >> (8 * i));
  }
  std::snprintf(&h[136], 12, "%011o", 0);
  h[156] = type;
  const char magic[8] = {'u', 's', 't', 'a', 'r', '\0', '0', '0'};  // ustar, version 00
  std::memcpy(&h[257], magic, sizeof(magic));
  std::memset(&h[148], ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  std::snprintf(&h[148], 8, "%06o", sum);
  h[155] = ' ';
  return h;
}

// `data` padded to whole 512-byte blocks.
inline std::string TarBlocks(const std::string& data) {
  return data + std::string((512 - data.size() % 512) % 512, '\0');
}

// A header telling the truth about `data`, then the data.
inline std::string TarEntry(const std::string& name, char type, const std::string& data) {
  return TarHeader(name, type, data.size()) + TarBlocks(data);
}

// One pax record, "LEN key=value\n" with LEN counting itself.
inline std::string PaxRecord(const std::string& key, const std::string& value) {
  const size_t base = key.size() + value.size() + 3;
  size_t len = base + 1;
  while (std::to_string(len).size() + base != len) len = std::to_string(len).size() + base;
  return std::to_string(len) + " " + key + "=" + value + "\n";
}

// The end of an archive: two zero blocks.
inline const std::string kTarEnd(1024, '\0');

}  // namespace sluice::crafted

#endif  // SLUICE_TESTS_CORE_CRAFTED_TAR_H_
