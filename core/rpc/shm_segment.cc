#include "core/rpc/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/util/environment_switch.h"
#include "core/tensor/host_memory.h"

namespace sluice {
namespace {

constexpr size_t kMaxSegmentBytes = size_t{1} << 40;
constexpr int kRequiredSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

absl::Status Errno(const char* call) {
  return absl::InternalError(absl::StrCat("shared memory: ", call, ": ", std::strerror(errno)));
}

size_t PageRoundUp(size_t n) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (n + page - 1) / page * page;
}

}  // namespace

UniqueFd& UniqueFd::operator=(UniqueFd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = o.release();
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) close(fd_);
}

absl::StatusOr<std::shared_ptr<ShmSegment>> ShmSegment::Create(size_t bytes) {
  if (bytes == 0 || bytes > kMaxSegmentBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared memory: a segment of ", bytes, " bytes (1 to 2^40 allowed)"));
  }
  const size_t size = PageRoundUp(bytes);
  const int64_t charged = static_cast<int64_t>(size);
  if (!ProcessMemoryBudget().TryCharge(charged)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "shared memory: a segment of ", size, " bytes does not fit the memory limit"));
  }
  auto refund = [&](absl::Status s) {
    ProcessMemoryBudget().Release(charged);
    return s;
  };
  UniqueFd fd(memfd_create(kShmSegmentName, MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (fd.get() < 0) return refund(Errno("memfd_create"));
  if (ftruncate(fd.get(), static_cast<off_t>(size)) != 0) return refund(Errno("ftruncate"));
  if (fcntl(fd.get(), F_ADD_SEALS, kRequiredSeals) != 0) return refund(Errno("F_ADD_SEALS"));
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) {
    return refund(errno == ENOMEM ? absl::ResourceExhaustedError(absl::StrCat(
                                        "shared memory: cannot map ", size, " bytes"))
                                  : Errno("mmap"));
  }
  return std::shared_ptr<ShmSegment>(
      new ShmSegment(std::move(fd), static_cast<uint8_t*>(p), size, charged));
}

absl::StatusOr<std::shared_ptr<ShmSegment>> ShmSegment::Map(UniqueFd fd, size_t expected_bytes,
                                                            bool populate) {
  if (expected_bytes == 0 || expected_bytes > kMaxSegmentBytes) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shared memory: the peer announced a segment of ", expected_bytes, " bytes"));
  }
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return Errno("fstat");
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        "shared memory: the descriptor received is not a memory file");
  }
  if (static_cast<uint64_t>(st.st_size) != expected_bytes) {
    return absl::FailedPreconditionError(absl::StrCat("shared memory: the segment has ",
                                                      st.st_size, " bytes, the peer announced ",
                                                      expected_bytes));
  }
  const int seals = fcntl(fd.get(), F_GET_SEALS);
  if (seals < 0 || (seals & kRequiredSeals) != kRequiredSeals) {
    return absl::FailedPreconditionError(
        "shared memory: the segment is not sealed against shrinking and growing");
  }
  void* p = mmap(nullptr, expected_bytes, PROT_READ | PROT_WRITE,
                 MAP_SHARED | (populate ? MAP_POPULATE : 0), fd.get(), 0);
  if (p == MAP_FAILED) return Errno("mmap");
  return std::shared_ptr<ShmSegment>(
      new ShmSegment(std::move(fd), static_cast<uint8_t*>(p), expected_bytes, 0));
}

ShmSegment::~ShmSegment() {
  munmap(data_, size_);
  if (charged_ > 0) ProcessMemoryBudget().Release(charged_);
}

bool SharedMemoryDefaultFromEnvironment() { return EnvironmentSwitchOn("SLUICE_SHARED_MEMORY"); }

std::string HostBootId() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return std::string(absl::StripAsciiWhitespace(id));
}

}  // namespace sluice
