// csv_dataset(filenames, record_defaults, header=False, field_delim=',', use_quote_delim=True,
// na_value='', select_cols=None): CSV records as tf.data.experimental.CsvDataset reads them.
//
// Each record becomes a tuple of scalars, one per record default (per selected column with
// select_cols). Parsing follows TF (tensorflow-cpu 2.15):
//   - records end at "\n", "\r\n" or "\r" outside quotes; a last record without a line end
//     counts; an empty file yields nothing; a blank line is a record with one empty field.
//   - with use_quote_delim a field that starts with '"' is quoted: it runs to the next single
//     '"', may hold delimiters, line ends and doubled quotes ("" reads as "), and must be
//     followed by the delimiter or the end of the record. A '"' inside an unquoted field is an
//     error. Without use_quote_delim quotes are ordinary characters.
//   - an empty field (also "") or one equal to na_value is missing: it takes the column's
//     default, or is an error when the column is required (its default has no value).
//   - numbers: int32/int64 are optional '-' and decimal digits, surrounding spaces allowed, and
//     must fit; float32/float64 as strtod reads them (also inf and nan), no hex.
//   - without select_cols a record must have exactly as many fields as record defaults; with it
//     at least up to the last selected column (later ones are ignored).
//   - header=True skips each file's first line; a file without one is an error.
// Errors are INVALID_ARGUMENT "source (csv_dataset): FILE:LINE:COLUMN: <TF's message>", for
// example "data.csv:3:5: Field 1 is required but missing in record!". A bad record is an element
// error (core/data/op_iterator.h): ignore_errors() skips it and reading goes on with the next
// record. A missing file is NOT_FOUND naming it.
#ifndef SLUICE_CORE_CSV_READER_H_
#define SLUICE_CORE_CSV_READER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "sluice/element.h"
#include "core/data/iterator.h"
#include "proto/dataset.pb.h"

namespace sluice {

// The element spec: a tuple of scalar specs. INVALID_ARGUMENT for bad arguments (no defaults,
// an unsupported dtype, a default with more than one value, select_cols not increasing or not
// matching the defaults, a field_delim that is not one byte).
absl::StatusOr<ElementSpec> CsvSourceSpec(const proto::CsvSource& source);

// Requires CsvSourceSpec to accept `source`. Not thread-safe.
std::unique_ptr<Iterator> NewCsvIterator(std::string label, proto::CsvSource source);

}  // namespace sluice

#endif  // SLUICE_CORE_CSV_READER_H_
