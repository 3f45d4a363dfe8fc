#include "core/rpc/job_shm_segment.h"

#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/rpc/shared_step_payload.h"
#include "core/tensor/aligned_size.h"
#include "core/util/streaming_copy.h"

namespace sluice {
namespace {

struct AtomicCounts {
  std::atomic<int64_t> steps_written{0};
  std::atomic<int64_t> bytes_written{0};
  std::atomic<int64_t> frames_placed{0};
  std::atomic<int64_t> no_room{0};
  std::atomic<int64_t> holders_reaped{0};
  std::atomic<int64_t> lost_frames_freed{0};
  std::atomic<int64_t> segments_alive{0};
};

AtomicCounts& Counts() {
  static auto* counts = new AtomicCounts;
  return *counts;
}

// Where the reader (job_shm_reader.cc) expects numeric tensors: at TensorBuffer's alignment.
constexpr uint64_t kAlignment = TensorBuffer::kAlignment;

// A pidfd of `pid` (one that refers to the process even after its pid is reused); -1 when the
// kernel refuses (too old, or the process is gone already).
int OpenPidfd(int pid) {
#ifdef SYS_pidfd_open
  if (pid > 0) return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
#endif
  return -1;
}

bool Exited(const UniqueFd& pidfd) {
  if (pidfd.get() < 0) return false;
  pollfd p{pidfd.get(), POLLIN, 0};
  return poll(&p, 1, 0) > 0 && (p.revents & POLLIN) != 0;
}

std::atomic<uint64_t> next_id{1};

}  // namespace

JobShmCounts ProcessJobShmCounts() {
  AtomicCounts& c = Counts();
  JobShmCounts out;
  out.steps_written = c.steps_written.load(std::memory_order_relaxed);
  out.bytes_written = c.bytes_written.load(std::memory_order_relaxed);
  out.frames_placed = c.frames_placed.load(std::memory_order_relaxed);
  out.no_room = c.no_room.load(std::memory_order_relaxed);
  out.holders_reaped = c.holders_reaped.load(std::memory_order_relaxed);
  out.lost_frames_freed = c.lost_frames_freed.load(std::memory_order_relaxed);
  out.segments_alive = c.segments_alive.load(std::memory_order_relaxed);
  return out;
}

size_t JobShmStepBytes(const std::vector<Tensor>* pieces, size_t num_pieces) {
  uint64_t numeric = 0;
  uint64_t strings = 0;
  for (size_t p = 0; p < num_pieces; ++p) {
    for (const Tensor& t : pieces[p]) {
      if (t.dtype() == DType::kString) {
        strings += t.payload_bytes();
      } else if (t.byte_size() > 0) {
        numeric = AlignedSize(numeric) + t.byte_size();
      }
    }
  }
  return static_cast<size_t>(numeric + strings);
}

JobShmRegion::~JobShmRegion() { segment_->Unref(offset_); }

absl::StatusOr<std::shared_ptr<JobShmSegment>> JobShmSegment::Create(size_t bytes) {
  absl::StatusOr<std::shared_ptr<ShmSegment>> segment = ShmSegment::Create(bytes);
  if (!segment.ok()) return segment.status();
  return std::shared_ptr<JobShmSegment>(new JobShmSegment(*std::move(segment)));
}

JobShmSegment::JobShmSegment(std::shared_ptr<ShmSegment> segment)
    : segment_(std::move(segment)), id_(next_id.fetch_add(1, std::memory_order_relaxed)) {
  free_[0] = segment_->size() / kAlignment * kAlignment;
  Counts().segments_alive.fetch_add(1, std::memory_order_relaxed);
}

JobShmSegment::~JobShmSegment() {
  Counts().segments_alive.fetch_sub(1, std::memory_order_relaxed);
}

bool JobShmSegment::AllocateLocked(uint64_t bytes, uint64_t* offset) {
  const uint64_t need = AlignedSize(bytes);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < need) continue;
    *offset = it->first;
    const uint64_t rest = it->second - need;
    free_.erase(it);
    if (rest > 0) free_[*offset + need] = rest;
    return true;
  }
  return false;
}

void JobShmSegment::UnrefLocked(uint64_t offset, int64_t n) {
  auto it = live_.find(offset);
  if (it == live_.end()) return;
  it->second.refs -= n;
  if (it->second.refs > 0) return;
  // Free, merged with its neighbours.
  uint64_t start = offset;
  uint64_t size = AlignedSize(it->second.bytes);
  live_.erase(it);
  auto next = free_.lower_bound(start);
  if (next != free_.end() && next->first == start + size) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      free_.erase(prev);
    }
  }
  free_[start] = size;
}

void JobShmSegment::Unref(uint64_t offset) {
  absl::MutexLock lock(&mu_);
  UnrefLocked(offset, 1);
}

bool JobShmSegment::ReapExitedHoldersLocked() {
  bool any = false;
  for (auto it = holders_.begin(); it != holders_.end();) {
    if (!Exited(it->second.pidfd)) {
      ++it;
      continue;
    }
    for (const auto& [offset, n] : it->second.held) UnrefLocked(offset, n);
    holders_.erase(it++);
    Counts().holders_reaped.fetch_add(1, std::memory_order_relaxed);
    any = true;
  }
  return any;
}

std::shared_ptr<JobShmRegion> JobShmSegment::Write(const std::vector<Tensor>* pieces,
                                                   size_t num_pieces) {
  const uint64_t bytes = JobShmStepBytes(pieces, num_pieces);
  if (bytes == 0 || bytes > segment_->size()) return nullptr;
  uint64_t offset = 0;
  {
    absl::MutexLock lock(&mu_);
    if (!AllocateLocked(bytes, &offset) &&
        !(ReapExitedHoldersLocked() && AllocateLocked(bytes, &offset))) {
      Counts().no_room.fetch_add(1, std::memory_order_relaxed);
      return nullptr;
    }
    live_[offset] = Live{bytes, 1};
    ++steps_written_;
  }
  // The region is this step's alone now: written outside the lock.
  uint8_t* base = segment_->data() + offset;
  uint64_t numeric = 0;
  for (size_t p = 0; p < num_pieces; ++p) {
    for (const Tensor& t : pieces[p]) {
      if (t.dtype() == DType::kString || t.byte_size() == 0) continue;
      numeric = AlignedSize(numeric);
      StreamingCopy(base + numeric, t.raw_data(), t.byte_size());
      numeric += t.byte_size();
    }
  }
  uint8_t* out = base + numeric;
  for (size_t p = 0; p < num_pieces; ++p) {
    for (const Tensor& t : pieces[p]) {
      if (t.dtype() != DType::kString) continue;
      for (int64_t e = 0; e < t.num_elements(); ++e) {
        const std::string& s = t.string_at(e);
        std::memcpy(out, s.data(), s.size());
        out += s.size();
      }
    }
  }
  Counts().steps_written.fetch_add(1, std::memory_order_relaxed);
  Counts().bytes_written.fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed);
  return std::make_shared<JobShmRegion>(shared_from_this(), offset, bytes);
}

bool JobShmSegment::Hand(const std::string& consumer_key, const JobShmRegion& region,
                         uint64_t consumer, int64_t call_start, int64_t step) {
  if (consumer_key.empty()) return false;
  absl::MutexLock lock(&mu_);
  auto live = live_.find(region.offset());
  if (live == live_.end()) return false;  // cannot be: the caller holds the region
  auto holder = holders_.find(consumer_key);
  if (holder == holders_.end()) {
    if (holders_.size() >= kMaxHolders) return false;
    holder = holders_.emplace(consumer_key, Holder{}).first;
  }
  ++holder->second.held[region.offset()];
  ++live->second.refs;
  // Logged in the log of this call (opened at its start if none is open, as Sent does).
  ConsumerLog* log = consumer == 0 ? nullptr : LogLocked(&holder->second, consumer, call_start);
  if (log != nullptr) {
    log->sent_end = std::max(log->sent_end, step);
    // Forgetting the oldest entry only keeps its hold (until released or the process exits).
    if (log->frames.size() >= kMaxLoggedFrames) log->frames.pop_front();
    log->frames.emplace_back(step, region.offset());
  }
  return true;
}

JobShmSegment::ConsumerLog* JobShmSegment::LogLocked(Holder* holder, uint64_t consumer,
                                                     int64_t start) {
  auto it = holder->consumers.find(consumer);
  if (it != holder->consumers.end()) return &it->second;
  if (holder->consumers.size() >= kMaxLoggedConsumers) {
    // Make room by forgetting a consumer with no frame logged (nothing of it can be lost).
    auto idle = std::find_if(holder->consumers.begin(), holder->consumers.end(),
                             [](const auto& c) { return c.second.frames.empty(); });
    if (idle == holder->consumers.end()) return nullptr;
    holder->consumers.erase(idle);
  }
  ConsumerLog& log = holder->consumers[consumer];
  log.acknowledged = start;
  log.sent_end = start;
  return &log;
}

void JobShmSegment::Sent(const std::string& consumer_key, uint64_t consumer, int64_t call_start,
                         int64_t sent_end) {
  if (consumer_key.empty() || consumer == 0) return;
  absl::MutexLock lock(&mu_);
  auto holder = holders_.find(consumer_key);
  if (holder == holders_.end()) {
    if (holders_.size() >= kMaxHolders) return;
    holder = holders_.emplace(consumer_key, Holder{}).first;
  }
  if (ConsumerLog* log = LogLocked(&holder->second, consumer, call_start)) {
    log->sent_end = std::max(log->sent_end, sent_end);
  }
}

void JobShmSegment::Acknowledge(const std::string& consumer_key, uint64_t consumer,
                                int64_t acknowledged) {
  if (consumer == 0) return;
  absl::MutexLock lock(&mu_);
  auto holder = holders_.find(consumer_key);
  if (holder == holders_.end()) return;
  auto it = holder->second.consumers.find(consumer);
  if (it == holder->second.consumers.end()) return;
  ConsumerLog& log = it->second;
  // A count beyond what was sent acknowledges no more than was sent (Resume refuses it).
  log.acknowledged = std::max(log.acknowledged, std::min(acknowledged, log.sent_end));
  while (!log.frames.empty() && log.frames.front().first < log.acknowledged) {
    log.frames.pop_front();
  }
}

absl::Status JobShmSegment::Resume(const std::string& consumer_key, uint64_t consumer,
                                   int64_t received) {
  if (consumer == 0) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  auto holder = holders_.find(consumer_key);
  if (holder == holders_.end()) return absl::OkStatus();
  auto it = holder->second.consumers.find(consumer);
  if (it == holder->second.consumers.end()) return absl::OkStatus();
  ConsumerLog& log = it->second;
  if (received < log.acknowledged || received > log.sent_end) {
    return absl::InvalidArgumentError(absl::StrCat(
        "StreamRequest.start_step ", received, " of consumer_id ", consumer,
        " is outside what job segment ", id_, " logged for it: acknowledged ", log.acknowledged,
        ", sent ", log.sent_end, " (a resumed call starts at the steps it received)"));
  }
  // The frames numbered from `received` on were sent and never arrived: their holds go.
  for (const auto& [step, offset] : log.frames) {
    if (step < received) continue;
    auto held = holder->second.held.find(offset);
    if (held == holder->second.held.end()) continue;  // cannot be: a logged frame is held
    if (--held->second == 0) holder->second.held.erase(held);
    UnrefLocked(offset, 1);
    ++lost_frames_freed_;
    Counts().lost_frames_freed.fetch_add(1, std::memory_order_relaxed);
  }
  // What it received stays held until released. The new call logs afresh from `received`
  // (a call of it that logs nothing, one without a job segment, then leaves nothing stale).
  holder->second.consumers.erase(it);
  return absl::OkStatus();
}

absl::Status JobShmSegment::Release(const std::string& consumer_key,
                                    absl::Span<const uint64_t> offsets) {
  if (offsets.empty()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  auto holder = holders_.find(consumer_key);
  for (uint64_t offset : offsets) {
    if (holder == holders_.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "StreamSteps: job_shm_released names offset ", offset, " of job segment ", id_,
          ", but this consumer holds no region of it"));
    }
    auto it = holder->second.held.find(offset);
    if (it == holder->second.held.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "StreamSteps: job_shm_released names offset ", offset, " of job segment ", id_,
          ", which this consumer does not hold"));
    }
    if (--it->second == 0) holder->second.held.erase(it);
    UnrefLocked(offset, 1);
  }
  return absl::OkStatus();
}

void JobShmSegment::WatchHolder(const std::string& consumer_key, int pid) {
  if (consumer_key.empty()) return;
  UniqueFd pidfd(OpenPidfd(pid));
  absl::MutexLock lock(&mu_);
  auto holder = holders_.find(consumer_key);
  if (holder == holders_.end()) {
    if (holders_.size() >= kMaxHolders) return;
    holder = holders_.emplace(consumer_key, Holder{}).first;
  }
  holder->second.pidfd = std::move(pidfd);
}

size_t JobShmSegment::live_regions() const {
  absl::MutexLock lock(&mu_);
  return live_.size();
}

size_t JobShmSegment::held_by(const std::string& consumer_key) const {
  absl::MutexLock lock(&mu_);
  auto it = holders_.find(consumer_key);
  if (it == holders_.end()) return 0;
  size_t n = 0;
  for (const auto& [offset, count] : it->second.held) n += static_cast<size_t>(count);
  return n;
}

int64_t JobShmSegment::lost_frames_freed() const {
  absl::MutexLock lock(&mu_);
  return lost_frames_freed_;
}

int64_t JobShmSegment::steps_written() const {
  absl::MutexLock lock(&mu_);
  return steps_written_;
}

bool JobShmStreamSink::Place(const WireStepView& step, proto::JobShmPayload* out) {
  if (step.shared_payload == nullptr) return false;
  std::shared_ptr<const JobShmRegion> region =
      step.shared_payload->JobRegion(*segment_, step.pieces, step.num_pieces);
  // Hand logs the frame in the consumer's log, opened at this call's start if absent (Resume
  // closed it, or this is the consumer's first call).
  if (region == nullptr ||
      !segment_->Hand(consumer_key_, *region, consumer_, call_start_, next_step_)) {
    return false;
  }
  out->set_segment_id(segment_->id());
  out->set_offset(region->offset());
  out->set_bytes(region->bytes());
  Counts().frames_placed.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void JobShmStreamSink::Sent(size_t steps) {
  if (consumer_ == 0) return;
  if (static_cast<uint64_t>(std::numeric_limits<int64_t>::max() - next_step_) < steps) {
    consumer_ = 0;  // a count no consumer reaches (a hostile start_step): log nothing more
    return;
  }
  next_step_ += static_cast<int64_t>(steps);
  segment_->Sent(consumer_key_, consumer_, call_start_, next_step_);
}

void JobShmStreamSink::Acknowledge(int64_t received_steps) {
  if (consumer_ != 0 && received_steps > 0) {
    segment_->Acknowledge(consumer_key_, consumer_, received_steps);
  }
}

}  // namespace sluice
