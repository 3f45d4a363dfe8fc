// Hostile pipelines for the adversarial suite (issue 25, item 6): a seeded generator of pipeline
// expressions that ask a server for more than it can give (batches of up to 1e10 elements,
// giant or negative or overflowing shapes in resize / one_hot / padded_batch / reshape /
// tf.constant, deep chains and nested batches, huge shuffle / prefetch / interleave / map
// buffers, giant literals) and the bombs they carry, crafted here: PNG and JPEG headers that
// claim 60000 x 60000 pixels, tar members whose headers claim 2 GiB or more. Plus the issue's
// exact reproductions.
//
//   HostileFiles files = WriteHostileFiles("/tmp/dir");            // tar bombs, a text file
//   for (const HostileCase& c : IssueReproductions(files)) ...
//   HostileCase c = GenerateHostileCase(/*seed=*/25, /*index=*/7, files);
//   // c.pipeline: "range(100000000000).map(cast(tf.int32)).batch(3000000000)"
//   // c.names: {"batch"}: the error must name the op at fault
//
// The contract every case states: run through a service or in process, it ends in an error
// with one of `codes` whose message names one of `names` (the op at fault, or the limit it
// crossed), within a bounded time, and every server process stays up. A few pipelines are
// giant only in their arguments and valid in TF (`range(10).batch(10000000000)` is one batch
// of 10): for those `expected_output` holds the exact JSON lines of the run, and the run must
// either print exactly those or end in such an error.
//
// The sizes assume servers whose --max_element_bytes is at most 256 MiB and --memory_limit at
// most 1 GiB (the suite runs 192 MiB and 768 MiB): every must-fail case needs more than that
// (most need more than any machine has).
//
// Deterministic: the same (seed, index) gives the same case on every machine (splitmix64, no
// std::*_distribution). Thread-safe (pure), except WriteHostileFiles (writes files).
#ifndef SLUICE_TESTS_ADVERSARIAL_HOSTILE_PIPELINES_H_
#define SLUICE_TESTS_ADVERSARIAL_HOSTILE_PIPELINES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sluice {

// Files the tar-bomb and interleave cases read, written by WriteHostileFiles.
struct HostileFiles {
  // Tar archives whose headers lie about sizes (see WriteHostileFiles for each).
  std::vector<std::string> tar_bombs;
  // A text file of the four lines "a", "b", "c", "d".
  std::string text_file;
};

struct HostileCase {
  // "issue" for the reproductions, else the generator's family ("batch", "shape", "nesting",
  // "buffer", "image_bomb", "tar_bomb", "literal", "overflow").
  std::string family;
  std::string pipeline;
  // The error message must contain one of these (case-insensitive): the op at fault.
  std::vector<std::string> names;
  // The status codes an error may have.
  std::vector<absl::StatusCode> codes;
  // The runner reads at most this many steps; reading them all without an error fails the case
  // (unless expected_output says the pipeline is valid).
  int64_t max_steps = 4;
  // The pipeline is valid (giant only in its arguments): a run that prints exactly
  // `expected_output` (one JSON object a step, as sluicectl run --format=json, each line ending
  // in '\n') and ends OK passes too. With `codes` empty it must do so.
  bool valid = false;
  std::string expected_output;
  // Through the service: a job of one task (a file source under AUTO sharding needs as many
  // files as tasks; these read one).
  bool one_task = false;
  // Only through the service (its request limits make it an error there; in process it is a
  // valid, merely large, pipeline).
  bool service_only = false;

  // "<family>: <pipeline>", the pipeline cut to `max_pipeline_chars` with its length, for logs.
  std::string Describe(size_t max_pipeline_chars = 400) const;
};

// Writes the bomb files into `dir` (which must exist):
//   tar_bombs[0]: a regular member "s0.jpg" whose size field claims 2 GiB (octal), after a
//                 valid "s0.cls"; the file holds 2 KiB.
//   tar_bombs[1]: a member whose size is 2^40 in GNU base-256.
//   tar_bombs[2]: a GNU long-name ('L') header claiming 2 GiB of name.
//   tar_bombs[3]: a pax ('x') header claiming 2 GiB of records.
//   tar_bombs[4]: a pax header whose `size=` record claims 2^40 bytes for the next member.
// INTERNAL naming the file when one cannot be written.
absl::StatusOr<HostileFiles> WriteHostileFiles(const std::string& dir);

// The reproductions of issue 25, in its order: the bulk range->batch, map(cast)->batch,
// a huge shuffle, resize([200000, 200000]), the 60000 x 60000 PNG literal, two nested batches
// (huge, and a small valid one); then the JPEG literal and the 2 GiB tar member.
std::vector<HostileCase> IssueReproductions(const HostileFiles& files);

// Case `index` of the run seeded `seed`.
HostileCase GenerateHostileCase(uint64_t seed, int64_t index, const HostileFiles& files);

// The bombs, exposed for the fuzzers and for tests of the decoders.
// A PNG: signature, IHDR claiming width x height (bit depth 8, `color_type` 0 gray, 2 RGB, 6
// RGBA) with a correct CRC, a short IDAT of a zlib stream that ends early, and IEND.
std::string PngBomb(uint32_t width, uint32_t height, int color_type = 2);
// A baseline JPEG: SOI, DQT, SOF0 claiming width x height with `components` (1 or 3), SOS and
// a few bytes of scan data, no EOI.
std::string JpegBomb(uint16_t width, uint16_t height, int components = 3);
// A Python bytes literal b'...' reading back to exactly `bytes` (\xNN for anything but
// printable ASCII other than quote and backslash).
std::string BytesLiteral(absl::string_view bytes);

}  // namespace sluice

#endif  // SLUICE_TESTS_ADVERSARIAL_HOSTILE_PIPELINES_H_
