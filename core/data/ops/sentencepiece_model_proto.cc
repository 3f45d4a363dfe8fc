#include "core/data/ops/sentencepiece_model_proto.h"

#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

using Proto = SentencePieceModelProto;

enum WireType : int { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

// One field of a message: its number, wire type and payload (a varint's value, a fixed32's
// bits, or a length-delimited field's bytes).
struct Field {
  uint64_t number = 0;
  int wire_type = 0;
  uint64_t varint = 0;
  uint32_t fixed32 = 0;
  absl::string_view bytes;
};

// Reads the fields of one message in order; every read is bounds-checked against the message.
class FieldReader {
 public:
  // `message` lies at byte `base` of the file (for error messages); `what` names it.
  FieldReader(absl::string_view message, size_t base, absl::string_view what)
      : message_(message), base_(base), what_(what) {}

  bool done() const { return pos_ >= message_.size(); }
  // The byte offset in the file of the next field.
  size_t offset() const { return base_ + pos_; }

  // The next field. INVALID_ARGUMENT naming the offset when it is malformed.
  absl::StatusOr<Field> Next() {
    const size_t start = pos_;
    Field f;
    uint64_t tag = 0;
    if (!Varint(&tag) || (tag >> 3) == 0) return Error(start, "a malformed field tag");
    f.number = tag >> 3;
    f.wire_type = static_cast<int>(tag & 7);
    switch (f.wire_type) {
      case kVarint:
        if (!Varint(&f.varint)) return Error(start, "a truncated varint");
        return f;
      case kFixed64:
        if (message_.size() - pos_ < 8) return Error(start, "a truncated 64-bit field");
        pos_ += 8;
        return f;
      case kFixed32:
        if (message_.size() - pos_ < 4) return Error(start, "a truncated 32-bit field");
        std::memcpy(&f.fixed32, message_.data() + pos_, 4);  // little-endian hosts only
        pos_ += 4;
        return f;
      case kLengthDelimited: {
        uint64_t length = 0;
        if (!Varint(&length) || length > message_.size() - pos_) {
          return Error(start, "a length past the end of its message");
        }
        f.bytes = message_.substr(pos_, static_cast<size_t>(length));
        pos_ += static_cast<size_t>(length);
        return f;
      }
      default:
        return Error(start, absl::StrCat("wire type ", f.wire_type, " (groups are not used by "
                                         "SentencePiece models)"));
    }
  }

  // The offset in the file of `bytes`, a part of this message.
  size_t OffsetOf(absl::string_view bytes) const {
    return base_ + static_cast<size_t>(bytes.data() - message_.data());
  }

 private:
  bool Varint(uint64_t* value) {
    uint64_t result = 0;
    for (int shift = 0; shift < 64 && pos_ < message_.size(); shift += 7) {
      const uint8_t b = static_cast<uint8_t>(message_[pos_++]);
      result |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) {
        *value = result;
        return true;
      }
    }
    return false;
  }

  absl::Status Error(size_t start, absl::string_view problem) const {
    return absl::InvalidArgumentError(absl::StrCat(problem,
                                                   " at byte ", base_ + start, " (in ", what_,
                                                   ")"));
  }

  const absl::string_view message_;
  const size_t base_;
  const absl::string_view what_;
  size_t pos_ = 0;
};

float AsFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

absl::Status ParsePiece(const FieldReader& parent, absl::string_view bytes, Proto::Piece* piece) {
  FieldReader r(bytes, parent.OffsetOf(bytes), "ModelProto.pieces");
  while (!r.done()) {
    ASSIGN_OR_RETURN(Field f, r.Next());
    if (f.number == 1 && f.wire_type == kLengthDelimited) {
      piece->piece = std::string(f.bytes);
    } else if (f.number == 2 && f.wire_type == kFixed32) {
      piece->score = AsFloat(f.fixed32);
    } else if (f.number == 3 && f.wire_type == kVarint && f.varint >= 1 && f.varint <= 6) {
      piece->type = static_cast<Proto::PieceType>(f.varint);
    }
  }
  return absl::OkStatus();
}

absl::Status ParseTrainerSpec(const FieldReader& parent, absl::string_view bytes, Proto* proto) {
  FieldReader r(bytes, parent.OffsetOf(bytes), "ModelProto.trainer_spec");
  while (!r.done()) {
    ASSIGN_OR_RETURN(Field f, r.Next());
    const bool varint = f.wire_type == kVarint;
    const bool text = f.wire_type == kLengthDelimited;
    if (f.number == 3 && varint && f.varint >= 1 && f.varint <= 4) {
      proto->model_type = static_cast<Proto::ModelType>(f.varint);
    } else if (f.number == 24 && varint) {
      proto->treat_whitespace_as_suffix = f.varint != 0;
    } else if (f.number == 35 && varint) {
      proto->byte_fallback = f.varint != 0;
    } else if (f.number == 45 && text) {
      proto->unk_piece = std::string(f.bytes);
    } else if (f.number == 46 && text) {
      proto->bos_piece = std::string(f.bytes);
    } else if (f.number == 47 && text) {
      proto->eos_piece = std::string(f.bytes);
    }
  }
  return absl::OkStatus();
}

absl::Status ParseNormalizerSpec(const FieldReader& parent, absl::string_view bytes,
                                 Proto* proto) {
  FieldReader r(bytes, parent.OffsetOf(bytes), "ModelProto.normalizer_spec");
  while (!r.done()) {
    ASSIGN_OR_RETURN(Field f, r.Next());
    const bool varint = f.wire_type == kVarint;
    const bool text = f.wire_type == kLengthDelimited;
    if (f.number == 1 && text) {
      proto->normalizer_name = std::string(f.bytes);
    } else if (f.number == 2 && text) {
      proto->precompiled_charsmap = std::string(f.bytes);
    } else if (f.number == 3 && varint) {
      proto->add_dummy_prefix = f.varint != 0;
    } else if (f.number == 4 && varint) {
      proto->remove_extra_whitespaces = f.varint != 0;
    } else if (f.number == 5 && varint) {
      proto->escape_whitespaces = f.varint != 0;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SentencePieceModelProto> ParseSentencePieceModelProto(absl::string_view bytes) {
  Proto proto;
  FieldReader r(bytes, 0, "ModelProto");
  while (!r.done()) {
    ASSIGN_OR_RETURN(Field f, r.Next());
    if (f.wire_type != kLengthDelimited) continue;
    if (f.number == 1) {
      proto.pieces.emplace_back();
      RETURN_IF_ERROR(ParsePiece(r, f.bytes, &proto.pieces.back()));
    } else if (f.number == 2) {
      RETURN_IF_ERROR(ParseTrainerSpec(r, f.bytes, &proto));
    } else if (f.number == 3) {
      RETURN_IF_ERROR(ParseNormalizerSpec(r, f.bytes, &proto));
    }
  }
  return proto;
}

}  // namespace sluice
