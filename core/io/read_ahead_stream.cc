#include "core/io/read_ahead_stream.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <future>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/tensor/host_memory.h"
#include "core/util/start_thread.h"

namespace sluice {
namespace {

class ReadAheadStream : public InputStream {
 public:
  ReadAheadStream(std::shared_ptr<const RandomAccessFile> file, uint64_t size,
                  const ReadAheadOptions& options)
      : file_(std::move(file)),
        size_(size),
        chunk_bytes_(std::max<size_t>(options.chunk_bytes, 1)),
        parallel_(std::max(options.parallel, 1)) {}

  // In-flight fetches finish before the file goes (their chunks join them when destroyed).
  ~ReadAheadStream() override { window_.clear(); }

  absl::StatusOr<size_t> Read(char* dst, size_t n) override {
    size_t done = 0;
    while (done < n && pos_ < size_) {
      Refill();
      Chunk& front = window_.front();
      if (!front.ready) {
        absl::StatusOr<std::string> got = front.data.get();
        front.ready = true;
        if (!got.ok()) {
          window_.clear();
          next_fetch_ = pos_;
          return got.status();
        }
        front.bytes = *std::move(got);
        const uint64_t want = std::min<uint64_t>(chunk_bytes_, size_ - front.offset);
        if (front.bytes.size() < want) {
          const uint64_t at = front.offset + front.bytes.size();
          window_.clear();
          next_fetch_ = pos_;
          return absl::DataLossError(absl::StrCat(file_->name(), " ends at byte ", at,
                                                  " but its size was ", size_,
                                                  " (did it change while being read?)"));
        }
      }
      const uint64_t in_chunk = pos_ - front.offset;
      const size_t k = static_cast<size_t>(
          std::min<uint64_t>(n - done, front.bytes.size() - in_chunk));
      std::memcpy(dst + done, front.bytes.data() + in_chunk, k);
      done += k;
      pos_ += k;
      if (pos_ >= front.offset + front.bytes.size()) window_.pop_front();
    }
    return done;
  }

  absl::Status Seek(uint64_t offset) override {
    offset = std::min(offset, size_);
    if (offset >= pos_ && offset < next_fetch_) {
      // Forward inside the window: drop the chunks before it.
      while (!window_.empty() && window_.front().offset + chunk_bytes_ <= offset) {
        window_.pop_front();
      }
    } else {
      window_.clear();
      next_fetch_ = offset;
    }
    pos_ = offset;
    return absl::OkStatus();
  }

  const std::string& name() const override { return file_->name(); }

 private:
  // A chunk's bytes charged to the process's memory budget, given back with the chunk.
  class Charge {
   public:
    Charge() = default;
    explicit Charge(int64_t bytes) : bytes_(bytes) {}
    Charge(Charge&& o) noexcept : bytes_(std::exchange(o.bytes_, 0)) {}
    Charge& operator=(Charge&& o) noexcept {
      std::swap(bytes_, o.bytes_);
      return *this;
    }
    ~Charge() {
      if (bytes_ > 0) ProcessMemoryBudget().Release(bytes_);
    }

   private:
    int64_t bytes_ = 0;
  };

  // A chunk of the window, with the thread fetching it: joined when the chunk goes, before its
  // members (the charge is given back after the fetch and the bytes are gone).
  struct Chunk {
    Chunk() = default;
    Chunk(Chunk&&) noexcept = default;  // leaves `o.fetcher` empty: nothing to join there
    ~Chunk() {
      if (fetcher.joinable()) fetcher.join();
    }

    Charge charge;  // declared first: given back after the bytes are gone
    uint64_t offset = 0;
    std::future<absl::StatusOr<std::string>> data;
    std::thread fetcher;  // none when the chunk was refused
    bool ready = false;
    std::string bytes;
  };

  // Keeps `parallel_` fetches in the window while the file has bytes left to fetch.
  void Refill() {
    while (static_cast<int>(window_.size()) < parallel_ && next_fetch_ < size_) {
      const uint64_t offset = next_fetch_;
      const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk_bytes_, size_ - offset));
      Chunk c;
      c.offset = offset;
      // Charged before it is fetched; a refusal is the error of the Read that reaches it.
      if (!ProcessMemoryBudget().TryCharge(static_cast<int64_t>(n))) {
        std::promise<absl::StatusOr<std::string>> refused;
        refused.set_value(ProcessMemoryBudget().Refusal(
            static_cast<int64_t>(n), absl::StrCat("read-ahead of ", file_->name()),
            "a chunk"));
        c.data = refused.get_future();
        window_.push_back(std::move(c));
        next_fetch_ = offset + n;
        continue;
      }
      c.charge = Charge(static_cast<int64_t>(n));
      auto fetch = std::make_shared<std::packaged_task<absl::StatusOr<std::string>()>>(
          [file = file_, offset, n]() -> absl::StatusOr<std::string> {
            std::string bytes(n, '\0');
            absl::StatusOr<size_t> got = file->ReadAt(offset, bytes.data(), n);
            if (!got.ok()) return got.status();
            bytes.resize(*got);
            return bytes;
          });
      c.data = fetch->get_future();
      absl::StatusOr<std::thread> thread =
          StartThread(absl::StrCat("the read-ahead of ", file_->name()), [fetch] { (*fetch)(); });
      if (thread.ok()) {
        c.fetcher = *std::move(thread);
      } else {  // the error of the Read that reaches this chunk
        std::promise<absl::StatusOr<std::string>> refused;
        refused.set_value(thread.status());
        c.data = refused.get_future();
      }
      window_.push_back(std::move(c));
      next_fetch_ = offset + n;
    }
  }

  const std::shared_ptr<const RandomAccessFile> file_;
  const uint64_t size_;
  const size_t chunk_bytes_;
  const int parallel_;
  uint64_t pos_ = 0;         // the next byte Read returns
  uint64_t next_fetch_ = 0;  // where the next chunk starts
  std::deque<Chunk> window_;  // chunks in file order; the front holds pos_
};

}  // namespace

std::unique_ptr<InputStream> NewReadAheadStream(std::shared_ptr<const RandomAccessFile> file,
                                                uint64_t size, const ReadAheadOptions& options) {
  return std::make_unique<ReadAheadStream>(std::move(file), size, options);
}

}  // namespace sluice
