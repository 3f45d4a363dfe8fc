// jsonl_dataset(filenames, keys): one element per line of JSON Lines files, a dict of the named
// keys, parsed with simdjson (Debian's libsimdjson-dev).
//
//   jsonl_dataset(['a.jsonl'], keys=['text'])                        {'text': string []}
//   jsonl_dataset(['a.jsonl'], keys={'text': tf.string, 'ids': [tf.int32], 'score': tf.float32})
//
// Each key is a dtype scalar or, written `[dtype]`, a 1-D vector of that dtype from a JSON array
// (a list of keys means tf.string scalars). What a JSON value may become:
//   tf.string            a JSON string (UTF-8, which simdjson validates), its bytes unescaped
//   tf.bool              true / false
//   tf.int32, tf.int64   an integer that fits the dtype (no fraction or exponent: 1.0 is not one)
//   tf.float32, float64  any number (float32 rounds to nearest)
//   [dtype]              an array whose every item is one of the above for dtype (no nesting)
// Anything else for a key (another type, null, an integer out of range, a nested array), a key
// missing from the line, a line that is not a JSON object, invalid JSON or UTF-8, nesting deeper
// than 64 and a line longer than the element limit (--max_element_bytes) are element errors
// (INVALID_ARGUMENT, op_iterator.h's IsElementError) naming the file and the line number (from
// 1): "a.jsonl line 7: key 'ids': expected an array of int32, got a string"; the iterator goes
// on with the next line, so ignore_errors() skips them. Keys not asked for are not converted
// (their values must still be valid JSON). Empty lines and lines of only spaces, tabs and '\r'
// yield nothing, whatever their length (jsonl_line_scanner.h); a trailing '\r' is dropped.
//
// The files are read in blocks of 1 MiB through core/io (local paths, s3://, ...), opened
// lazily in order; an overlong line is skipped without being held, so memory stays bounded by
// the block and the element limit. A file that cannot be opened or read ends the iterator with
// an error naming it (NOT_FOUND when missing).
//
// Sharding: FILE takes files k, k+K, ... (the `filenames` field, as every file source); DATA
// runs the whole source and keeps steps s % K == k. RANGES reads it through random access
// (random_access_source.h): element i is the i-th non-blank line over the files in order, found
// through each file's sparse line index (jsonl_line_index.h), so any worker reads any range of
// steps, exactly once and resumable.
#ifndef SLUICE_CORE_DATA_OPS_JSONL_READER_H_
#define SLUICE_CORE_DATA_OPS_JSONL_READER_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/data/ops/jsonl_line_scanner.h"
#include "core/data/iterator.h"
#include "proto/dataset.pb.h"
#include "sluice/element.h"

namespace simdjson::dom {
class parser;
}  // namespace simdjson::dom

namespace sluice {

// The element spec: a dict of the keys. INVALID_ARGUMENT for no keys, a repeated or empty key
// name or an unsupported dtype.
absl::StatusOr<ElementSpec> JsonlSourceSpec(const proto::JsonlSource& source);

// Requires JsonlSourceSpec to accept `source`. `label` names the op in errors. Not thread-safe.
std::unique_ptr<Iterator> NewJsonlIterator(std::string label, proto::JsonlSource source);

// The longest line a jsonl_dataset element may come from: the process's element limit
// (--max_element_bytes).
size_t JsonlLineLimit();

// Turns one non-blank line (JsonlLineScanner) of a file into the dict element of `source`'s keys,
// with the rules above. Shared by the sequential iterator and random access. Not thread-safe.
class JsonlLineParser {
 public:
  // Requires JsonlSourceSpec to accept `source`; `label` names the op in allocation errors.
  JsonlLineParser(proto::JsonlSource source, std::string label);
  ~JsonlLineParser();
  JsonlLineParser(const JsonlLineParser&) = delete;
  JsonlLineParser& operator=(const JsonlLineParser&) = delete;

  // A bad line (too long, invalid JSON, a missing key, a value of another type) is an element
  // error (INVALID_ARGUMENT, IsElementError) "<file> line <n>: <why>"; RESOURCE_EXHAUSTED when the
  // memory budget refuses the tensors.
  absl::Status Parse(const JsonlLineScanner::Line& line, absl::string_view file, Element* out);

 private:
  const proto::JsonlSource source_;
  const std::string label_;
  std::unique_ptr<simdjson::dom::parser> parser_;  // made on the first line
};

}  // namespace sluice

#endif  // SLUICE_CORE_DATA_OPS_JSONL_READER_H_
