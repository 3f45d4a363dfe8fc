// webdataset_dataset(files, keys=None): WebDataset shards, tar archives whose members are
// grouped into samples by key: "dir/n0001.jpg", "dir/n0001.cls" are the sample "dir/n0001" with
// the fields "jpg" and "cls" (key: the path up to the first '.' of the file name; field: the
// rest). Members of one sample are consecutive, as WebDataset writes them. Each sample becomes
// one element, a dict of string scalars:
//
//   {'__key__': b'dir/n0001', 'cls': b'3', 'jpg': b'\xff\xd8...'}
//
// with the fields `keys` (sorted; the parser takes the first sample's fields when none are
// given). Other fields are skipped without being read (a seek); a sample lacking one of `keys`
// is INVALID_ARGUMENT naming the shard, the sample and what it has. Shards are read in order,
// streamed through the file system of their URL (core/io/file_system.h: local, s3://, gs://,
// http(s)://), never extracted. Each file is a shard for sharding (FILE, the `filenames` field).
// Errors of the archive itself are core/io/tar_reader.h's (DATA_LOSS with shard and offset); a
// wanted member whose header claims more than the element limit (--max_element_bytes) is
// RESOURCE_EXHAUSTED naming it, before it is read.
//
// Thread safety: the Iterator contract.
#ifndef SLUICE_CORE_WEBDATASET_READER_H_
#define SLUICE_CORE_WEBDATASET_READER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sluice/element.h"
#include "core/data/iterator.h"
#include "proto/dataset.pb.h"

namespace sluice {

// INVALID_ARGUMENT for no files, a key that is empty, "__key__", or repeated.
absl::Status ValidateWebDatasetSource(const proto::WebDatasetSource& source);

// A source over `filenames` with `keys` (sorted here); with no keys, those of the first sample
// of the first shard (read now). INVALID_ARGUMENT when that shard has no sample.
absl::StatusOr<proto::WebDatasetSource> MakeWebDatasetSource(std::vector<std::string> filenames,
                                                             std::vector<std::string> keys);

// {'__key__': string, key: string, ...}.
ElementSpec WebDatasetSpec(const proto::WebDatasetSource& source);

std::unique_ptr<Iterator> NewWebDatasetIterator(std::string label,
                                                proto::WebDatasetSource source);

// webdataset_dataset(['a.tar', 'b.tar'], keys=['cls', 'jpg'])
std::string WebDatasetSourceExpression(const proto::WebDatasetSource& source);

}  // namespace sluice

#endif  // SLUICE_CORE_WEBDATASET_READER_H_
