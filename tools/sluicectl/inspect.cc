// sluicectl inspect: a look inside a TFRecord (or fixed-length record) file.
//
//   sluicectl inspect FILE [--limit=10] [--compression=GZIP] [--record_bytes=N ...]
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/format/python_literal.h"
#include "core/io/fixed_length_record_reader.h"
#include "core/io/tfrecord_reader.h"
#include "proto/example.pb.h"
#include "tools/sluicectl/commands.h"

ABSL_FLAG(int64_t, limit, 10, "inspect: records to print; -1: all.");
ABSL_FLAG(int64_t, record_bytes, 0,
          "inspect: read FILE as fixed-length records of this size instead of TFRecord.");
ABSL_FLAG(int64_t, header_bytes, 0, "inspect: fixed-length header bytes.");
ABSL_FLAG(int64_t, footer_bytes, 0, "inspect: fixed-length footer bytes.");

namespace sluice {
namespace {

// A value for people: printable strings as Python literals, long ones cut.
std::string Shown(const std::string& bytes) {
  constexpr size_t kMax = 32;
  std::string shown = PythonStringLiteral(bytes.substr(0, kMax));
  if (bytes.size() > kMax) absl::StrAppend(&shown, "... (", bytes.size(), " bytes)");
  return shown;
}

void PrintRecord(int64_t i, uint64_t offset, bool has_offset, const std::string& record) {
  std::printf("record %" PRId64, i);
  if (has_offset) std::printf(" at byte %" PRIu64, offset);
  std::printf(": %zu bytes\n", record.size());
  proto::Example ex;
  if (!ex.ParseFromString(record) || (!ex.has_features() && !record.empty())) {
    std::printf("  (not a tf.train.Example) %s\n", Shown(record).c_str());
    return;
  }
  std::vector<std::string> keys;
  for (const auto& [k, v] : ex.features().feature()) keys.push_back(k);
  std::sort(keys.begin(), keys.end());
  for (const std::string& k : keys) {
    const proto::Feature& f = ex.features().feature().at(k);
    std::string line;
    switch (f.kind_case()) {
      case proto::Feature::kBytesList: {
        line = absl::StrCat("bytes_list[", f.bytes_list().value_size(), "]");
        for (int j = 0; j < f.bytes_list().value_size() && j < 4; ++j) {
          absl::StrAppend(&line, j == 0 ? " " : ", ", Shown(f.bytes_list().value(j)));
        }
        if (f.bytes_list().value_size() > 4) line += ", ...";
        break;
      }
      case proto::Feature::kFloatList: {
        line = absl::StrCat("float_list[", f.float_list().value_size(), "]");
        for (int j = 0; j < f.float_list().value_size() && j < 8; ++j) {
          absl::StrAppend(&line, j == 0 ? " " : ", ",
                          PythonFloat32Literal(f.float_list().value(j)));
        }
        if (f.float_list().value_size() > 8) line += ", ...";
        break;
      }
      case proto::Feature::kInt64List: {
        line = absl::StrCat("int64_list[", f.int64_list().value_size(), "]");
        for (int j = 0; j < f.int64_list().value_size() && j < 8; ++j) {
          absl::StrAppend(&line, j == 0 ? " " : ", ", f.int64_list().value(j));
        }
        if (f.int64_list().value_size() > 8) line += ", ...";
        break;
      }
      case proto::Feature::KIND_NOT_SET:
        line = "(empty)";
        break;
    }
    std::printf("  %s: %s\n", PythonStringLiteral(k).c_str(), line.c_str());
  }
}

int InspectMain(const std::vector<std::string>& args) {
  if (args.size() != 1) return ReportUsageError("inspect", "takes exactly one FILE");
  const int64_t limit = absl::GetFlag(FLAGS_limit);
  absl::StatusOr<Compression> compression = ParseCompressionType(absl::GetFlag(FLAGS_compression));
  if (!compression.ok()) {
    return ReportUsageError("inspect", std::string(compression.status().message()));
  }
  std::string record;
  int64_t n = 0;
  if (absl::GetFlag(FLAGS_record_bytes) > 0) {
    FixedLengthRecordOptions o;
    o.record_bytes = absl::GetFlag(FLAGS_record_bytes);
    o.header_bytes = absl::GetFlag(FLAGS_header_bytes);
    o.footer_bytes = absl::GetFlag(FLAGS_footer_bytes);
    o.compression = *compression;
    auto r = FixedLengthRecordReader::Open(args[0], o);
    if (!r.ok()) return ReportError(r.status());
    for (; limit < 0 || n < limit; ++n) {
      absl::Status s = (*r)->ReadRecord(&record);
      if (absl::IsOutOfRange(s)) break;
      if (!s.ok()) return ReportError(s);
      PrintRecord(n, 0, false, record);
    }
  } else {
    TFRecordReaderOptions o;
    o.compression = *compression;
    auto r = TFRecordReader::Open(args[0], o);
    if (!r.ok()) return ReportError(r.status());
    for (; limit < 0 || n < limit; ++n) {
      uint64_t offset = (*r)->offset();
      absl::Status s = (*r)->ReadRecord(&record);
      if (absl::IsOutOfRange(s)) break;
      if (!s.ok()) return ReportError(s);
      PrintRecord(n, offset, *compression == Compression::kNone, record);
    }
  }
  std::printf("%" PRId64 " record%s shown\n", n, n == 1 ? "" : "s");
  return kExitOk;
}

}  // namespace

SLUICECTL_REGISTER_COMMAND({
    .name = "inspect",
    .synopsis = "inspect FILE [--limit=N] [--compression=GZIP|ZLIB] "
                "[--record_bytes=R --header_bytes=H --footer_bytes=F]",
    .help = "Prints the first N records of a TFRecord file (or, with --record_bytes, a\n"
            "fixed-length record file): offset, size and, for tf.train.Examples, each feature\n"
            "with its kind, count and first values. A corrupt record stops it with the error.",
    .flags = {"limit", "compression", "record_bytes", "header_bytes", "footer_bytes"},
    .run = &InspectMain,
});

}  // namespace sluice
