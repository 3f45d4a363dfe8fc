// save_chunks(directory, compression='', format_version=0): the registration of the op
// (core/data/op_registry.h) and its iterator. format_version is the chunks' record format
// (snapshot_chunk.h; 0 means 1, what graphs journaled before the field was added wrote). What
// a distributed snapshot's job runs on the workers (docs/SNAPSHOTS.md; the save itself:
// include/sluice/snapshot.h).
//
// An iterator writes its whole input to one chunk (snapshot_chunk.h) named by the fingerprint
// of the graph up to the op. Under DYNAMIC sharding each split is a graph of its own (the
// source restricted to the split), so each split is one chunk, and a split handed out again
// (its worker died, the coordinator restarted) writes the same chunk name. A chunk already
// committed is not computed again: the iterator yields (name, -1) at once. Otherwise it yields
// (name, elements written) once the chunk is committed. Input errors end the iterator with
// nothing committed.
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data/op_iterator.h"
#include "core/data/op_parse.h"
#include "core/data/op_registry.h"
#include "core/data/ops/snapshot_chunk.h"
#include "core/data/ops/snapshot_manifest.h"
#include "core/format/python_literal.h"
#include "core/io/input_stream.h"
#include "core/util/status_macros.h"
#include "sluice/dataset.h"

namespace sluice {
namespace {

class SaveChunksIterator : public OpIterator {
 public:
  SaveChunksIterator(std::string label, std::string directory, Compression compression,
                     int64_t format_version, std::string chunk_name, IteratorFactory input)
      : OpIterator(std::move(label)),
        directory_(std::move(directory)),
        compression_(compression),
        format_version_(format_version),
        chunk_name_(std::move(chunk_name)),
        make_input_(std::move(input)) {}

 protected:
  absl::Status GetNextInternal(Element* out, bool* end_of_sequence) override {
    if (done_) {
      *end_of_sequence = true;
      return absl::OkStatus();
    }
    absl::StatusOr<int64_t> written = WriteChunk();
    if (!written.ok()) return written.status();
    done_ = true;
    *out = Element::Tuple({Element::Leaf(Tensor::StringScalar(chunk_name_)),
                           Element::Leaf(Tensor::Scalar<int64_t>(*written))});
    *end_of_sequence = false;
    return absl::OkStatus();
  }

 private:
  // The elements written, or -1 when the chunk was committed before.
  absl::StatusOr<int64_t> WriteChunk() {
    const std::string final_name =
        absl::StrCat(SnapshotChunksDirectory(directory_), "/", chunk_name_);
    if (StatFile(final_name).ok()) return -1;
    absl::StatusOr<std::unique_ptr<SnapshotChunkWriter>> writer =
        SnapshotChunkWriter::Create(directory_, chunk_name_, compression_, format_version_);
    if (!writer.ok()) {
      return OpError(writer.status().code(), writer.status().message());
    }
    std::unique_ptr<Iterator> input = make_input_();
    Element e;
    bool end = false;
    while (true) {
      RETURN_IF_ERROR(input->GetNext(&e, &end));
      if (end) break;
      absl::Status s = (*writer)->Append(e);
      if (!s.ok()) return OpError(s.code(), s.message());
    }
    absl::Status s = (*writer)->Commit();
    if (!s.ok()) return OpError(s.code(), s.message());
    return (*writer)->num_elements();
  }

  const std::string directory_;
  const Compression compression_;
  const int64_t format_version_;
  const std::string chunk_name_;
  const IteratorFactory make_input_;
  bool done_ = false;
};

}  // namespace

SLUICE_REGISTER_OPS(save_chunks_op) {
  OpRegistration r;
  r.name = "save_chunks";
  r.infer_spec = [](const proto::OpDef& op, const ElementSpec&) -> absl::StatusOr<ElementSpec> {
    if (op.save_chunks().directory().empty()) {
      return absl::InvalidArgumentError("directory is empty");
    }
    RETURN_IF_ERROR(ParseCompressionType(op.save_chunks().compression_type()).status());
    const int64_t format = op.save_chunks().format_version();
    if (format < 0 || format > kSnapshotFormatVersion) {
      return absl::InvalidArgumentError(absl::StrCat("unknown snapshot format_version ", format));
    }
    return ElementSpec::Tuple({ElementSpec::Leaf(TensorSpec{DType::kString, Shape({})}),
                               ElementSpec::Leaf(TensorSpec{DType::kInt64, Shape({})})});
  };
  r.cardinality = [](const proto::OpDef&, const ElementSpec&, int64_t) -> int64_t { return 1; };
  r.expression = [](const proto::OpDef& op) -> std::string {
    const proto::SaveChunksOp& s = op.save_chunks();
    return absl::StrCat("save_chunks(", PythonStringLiteral(s.directory()),
                        s.compression_type().empty()
                            ? std::string()
                            : absl::StrCat(", compression=",
                                           PythonStringLiteral(s.compression_type())),
                        s.format_version() == 0
                            ? std::string()
                            : absl::StrCat(", format_version=", s.format_version()),
                        ")");
  };
  r.build = [](OpBuildArgs args) -> absl::StatusOr<IteratorFactory> {
    ASSIGN_OR_RETURN(Compression compression,
                     ParseCompressionType(args.op.save_chunks().compression_type()));
    ASSIGN_OR_RETURN(Dataset upstream, Dataset::FromDef(args.upstream));
    const std::string chunk_name = SnapshotChunkName(upstream.Fingerprint());
    const std::string label = args.label;
    const std::string directory = args.op.save_chunks().directory();
    const int64_t format_version = args.op.save_chunks().format_version();
    IteratorFactory input = std::move(args.input);
    return IteratorFactory([label, directory, compression, format_version, chunk_name, input] {
      return std::make_unique<SaveChunksIterator>(label, directory, compression, format_version,
                                                  chunk_name, input);
    });
  };
  r.global_order_conflict = [](const proto::OpDef&) -> std::string {
    return "writes one chunk per pass, and a range is part of a pass";
  };
  {
    OpParseRule p;
    p.name = "save_chunks";
    p.list_order = 180;
    p.params = {{"directory", true}, {"compression", false}, {"format_version", false}};
    p.parse = [](const ParseCall& c, proto::OpDef* op) -> absl::Status {
      proto::SaveChunksOp* s = op->mutable_save_chunks();
      ASSIGN_OR_RETURN(std::string directory, c.Str("directory", *c.arg(0)));
      s->set_directory(directory);
      if (c.given(1)) {
        ASSIGN_OR_RETURN(std::string compression, c.Str("compression", *c.arg(1)));
        s->set_compression_type(compression);
      }
      if (c.given(2)) {
        ASSIGN_OR_RETURN(int64_t format, c.Int("format_version", *c.arg(2)));
        s->set_format_version(format);
      }
      return absl::OkStatus();
    };
    r.parse.push_back(std::move(p));
  }
  registry.AddOp(proto::OpDef::kSaveChunks, std::move(r));
}

}  // namespace sluice
