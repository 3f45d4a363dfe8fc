// Pipeline sources over record files: tf_record_dataset (proto::TFRecordSource) and
// fixed_length_record_dataset (proto::FixedLengthRecordSource). Each element is a string
// scalar holding one record. Files are opened lazily, in order; errors name the op, the file
// and, for corrupt records, the byte offset (core/io/tfrecord_reader.h,
// core/io/fixed_length_record_reader.h).
//
// num_parallel_reads > 1 (TFRecord; -1: one per file) is what TF does for it:
// interleave(cycle_length=n, block_length=1, num_parallel_calls=n) over the files
// (core/data/ops/interleave_iterator.h): one record from each of the open files in turn, a finished
// file's slot taken by the next file, each open file read ahead by its own thread.
//
// A record_range reads records [start, start + count) counted over the files in order: files
// before it are skipped using their record counts (the record index for uncompressed TFRecord
// files, core/io/record_index.h, built and cached on first use; sizes for uncompressed
// fixed-length files; a read-through for compressed files), and the first record is reached
// with a seek.
//
// Thread safety: the Iterator contract.
#ifndef SLUICE_CORE_RECORD_ITERATORS_H_
#define SLUICE_CORE_RECORD_ITERATORS_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "core/data/iterator.h"
#include "sluice/dtype.h"
#include "core/io/record_index.h"
#include "core/io/zlib_stream.h"
#include "proto/dataset.pb.h"

namespace sluice {

// INVALID_ARGUMENT (no position prefix) for arguments that cannot work: no files, a bad
// compression_type, record_bytes <= 0, negative sizes, a record_range with a negative start or
// a count below -1, a record_range with num_parallel_reads > 1.
absl::Status ValidateTFRecordSource(const proto::TFRecordSource& source);
absl::Status ValidateFixedLengthRecordSource(const proto::FixedLengthRecordSource& source);

// `index_options` says where record indexes are cached (record_range only).
std::unique_ptr<Iterator> NewTFRecordIterator(std::string label, proto::TFRecordSource source,
                                              RecordIndexOptions index_options = {});
std::unique_ptr<Iterator> NewFixedLengthRecordIterator(std::string label,
                                                       proto::FixedLengthRecordSource source);

// fixed_length_record_dataset(...) whose records a map(decode_raw(out_type, little_endian))
// decodes, run as one op (the source's registration decides when: fixed_length_record_op.cc):
// each record is read from its file straight into its decoded tensor, a 1-D tensor of
// record_bytes / DTypeSize(out_type) elements (bytes swapped in place for a big-endian
// out_type wider than a byte), instead of into a string that decode_raw copies. The elements,
// their order, the source's errors (named by `label`) and the specs are the unfused pair's.
// Requires record_bytes to be a multiple of DTypeSize(out_type) (otherwise every record is
// decode_raw's error: the pair is not fused).
struct DecodedRecords {
  DType out_type = DType::kUInt8;
  bool big_endian = false;
  // How the map names the fn's errors: its label ("op 2 (map)") and the fn's Describe().
  std::string map_label;
  std::string fn;
  // True when the elements are the pipeline's output as they are (only repeat, take, skip or
  // shard after the source): each decoded tensor is then built where the step it ends in wants
  // it (core/tensor/step_output_allocator.h), when the thread has such a place.
  bool to_step = false;
};
// A decoded tensor the memory budget refuses is an element error of the map (named as the
// unfused map names it: "op 2 (map): decode_raw(tf.uint8) (string []): its output: ..."),
// raised at the map's place (core/data/absorbed_op_error.h: the iterator hands out a stand-in
// element for it), after which the next record is read. The records a skip() or shard() before the map drops
// (Iterator::Skip) are passed over undecoded, as apart, where the map never sees them: no
// tensor allocated, none refused, and on an uncompressed file no byte of them read unless
// buffered already.
std::unique_ptr<Iterator> NewDecodedFixedLengthRecordIterator(
    std::string label, proto::FixedLengthRecordSource source, DecodedRecords decoded);

// The sources in pipeline syntax, only non-default arguments:
//   tf_record_dataset(['a.tfrecord'], compression_type='GZIP', start_record=10, num_records=5)
//   fixed_length_record_dataset(['a.bin'], 4, header_bytes=3, footer_bytes=2)
std::string TFRecordSourceExpression(const proto::TFRecordSource& source);
std::string FixedLengthRecordSourceExpression(const proto::FixedLengthRecordSource& source);

// The number of records in one file (uses/builds the index for uncompressed TFRecord files).
absl::StatusOr<int64_t> CountTFRecords(const std::string& filename, Compression compression,
                                       const RecordIndexOptions& index_options = {});

}  // namespace sluice

#endif  // SLUICE_CORE_RECORD_ITERATORS_H_
