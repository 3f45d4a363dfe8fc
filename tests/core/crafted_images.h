// Image and archive bytes built in a test, for inputs that claim what they do not hold (a "bomb"
// header): a PNG or JPEG whose header promises width x height pixels over a few bytes of data.
// They decode no further than the header; what a decoder does with the promise is the test.
//
//   std::string png = CraftedPng(60000, 60000);   // 8-bit RGB; IHDR, one IDAT, IEND
//   std::string jpeg = CraftedJpeg(60000, 60000); // baseline, 3 components 4:4:4
//   std::string literal = PythonBytesLiteral(png); // b'\x89PNG...' for a pipeline expression
#ifndef SLUICE_TESTS_CORE_CRAFTED_IMAGES_H_
#define SLUICE_TESTS_CORE_CRAFTED_IMAGES_H_

#include <cstdint>
#include <cstdio>
#include <string>

namespace sluice::crafted {

// CRC-32 (ISO-HDLC, as PNG chunks use), bitwise: tests craft a few chunks.
inline uint32_t Crc32(const std::string& bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char b : bytes) {
    crc ^= b;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return crc ^ 0xFFFFFFFFu;
}

inline void PutBigEndian32(std::string* out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out->push_back(static_cast<char>(v >> shift));
}

// One PNG chunk: length, type, data, CRC of type and data.
inline std::string PngChunk(const std::string& type, const std::string& data) {
  std::string out;
  PutBigEndian32(&out, static_cast<uint32_t>(data.size()));
  out += type + data;
  PutBigEndian32(&out, Crc32(type + data));
  return out;
}

// A PNG whose IHDR claims `width` x `height` 8-bit pixels of `color_type` (2 RGB, 0 gray, 6
// RGBA), with an IDAT of an empty zlib stream.
inline std::string CraftedPng(uint32_t width, uint32_t height, char color_type = 2) {
  std::string ihdr;
  PutBigEndian32(&ihdr, width);
  PutBigEndian32(&ihdr, height);
  ihdr += std::string{8, color_type, 0, 0, 0};  // depth, color type, compression, filter, interlace
  return std::string("\x89PNG\r\n\x1a\n", 8) + PngChunk("IHDR", ihdr) +
         PngChunk("IDAT", std::string("\x78\x9c\x03\x00\x00\x00\x00\x01", 8)) +
         PngChunk("IEND", "");
}

// A baseline JPEG whose SOF0 claims `width` x `height` pixels of 3 components (4:4:4), with a
// quantization table and a start of scan but no entropy-coded data to speak of.
// `progressive`: SOF2, whose first scan is the DC scan.
inline std::string CraftedJpeg(uint16_t width, uint16_t height, bool progressive = false) {
  std::string out("\xFF\xD8", 2);                 // SOI
  out += std::string("\xFF\xDB\x00\x43\x00", 5);  // DQT, table 0
  out += std::string(64, '\x01');
  out += std::string(progressive ? "\xFF\xC2\x00\x11\x08" : "\xFF\xC0\x00\x11\x08", 5);
  out.push_back(static_cast<char>(height >> 8));
  out.push_back(static_cast<char>(height & 0xFF));
  out.push_back(static_cast<char>(width >> 8));
  out.push_back(static_cast<char>(width & 0xFF));
  out += std::string("\x03\x01\x11\x00\x02\x11\x00\x03\x11\x00", 10);
  out += std::string("\xFF\xDA\x00\x0C\x03\x01\x00\x02\x00\x03\x00\x00", 12);    // SOS
  out += progressive ? std::string("\x00\x00", 2) : std::string("\x3F\x00", 2);  // Se, Ah/Al
  out += std::string("\x00\x00\x00\x00\xFF\xD9", 6);                             // a few bytes, EOI
  return out;
}

// `bytes` as a Python bytes literal, every byte escaped: b'\x89\x50...'.
inline std::string PythonBytesLiteral(const std::string& bytes) {
  std::string out = "b'";
  for (unsigned char c : bytes) {
    char hex[5];
    std::snprintf(hex, sizeof(hex), "\\x%02x", c);
    out += hex;
  }
  return out + "'";
}

}  // namespace sluice::crafted

#endif  // SLUICE_TESTS_CORE_CRAFTED_IMAGES_H_
