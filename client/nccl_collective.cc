#include "client/nccl_collective.h"

#include "absl/strings/str_cat.h"

#if defined(SLUICE_HAVE_CUDA) && defined(SLUICE_HAVE_NCCL)
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <string>
#include <utility>

#include "core/util/status_macros.h"
#endif

namespace sluice {

#if defined(SLUICE_HAVE_CUDA) && defined(SLUICE_HAVE_NCCL)
namespace {

absl::Status CudaError(cudaError_t e, absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

class NcclCollective : public Collective {
 public:
  NcclCollective(int rank, int size, NcclCollectiveOptions options)
      : rank_(rank), size_(size), options_(options) {}

  ~NcclCollective() override {
    if (comm_ != nullptr) {
      if (broken_.ok()) {
        ncclCommFinalize(comm_);
        Wait("ncclCommFinalize", absl::Now() + absl::Seconds(10)).IgnoreError();
      }
      if (comm_ != nullptr && broken_.ok()) {
        ncclCommDestroy(comm_);
      } else if (comm_ != nullptr) {
        ncclCommAbort(comm_);
      }
    }
    if (scratch_ != nullptr) cudaFree(scratch_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  absl::Status Init(const ncclUniqueId& id) {
    cudaError_t e = cudaSetDevice(options_.device);
    if (e != cudaSuccess) {
      return absl::FailedPreconditionError(
          absl::StrCat("NCCL collective: CUDA device ", options_.device, ": ",
                       cudaGetErrorString(e)));
    }
    e = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
    if (e != cudaSuccess) return CudaError(e, "NCCL collective: cudaStreamCreate");
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&comm_, size_, id, rank_, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      comm_ = nullptr;
      return absl::UnavailableError(absl::StrCat("NCCL collective: rank ", rank_,
                                                 " could not join: ", ncclGetErrorString(r)));
    }
    return Wait("ncclCommInitRank", absl::Now() + options_.init_timeout);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  absl::Status AllReduceSum(std::span<int64_t> values) override {
    RETURN_IF_ERROR(broken_);
    if (values.empty()) return absl::OkStatus();
    const size_t bytes = values.size_bytes();
    RETURN_IF_ERROR(Reserve(bytes));
    absl::Time deadline = absl::Now() + options_.op_timeout;
    RETURN_IF_ERROR(Check(cudaMemcpyAsync(scratch_, values.data(), bytes,
                                          cudaMemcpyHostToDevice, stream_),
                          "AllReduceSum copy in"));
    RETURN_IF_ERROR(Enqueue(ncclAllReduce(scratch_, scratch_, values.size(), ncclInt64, ncclSum,
                                          comm_, stream_),
                            "ncclAllReduce", deadline));
    RETURN_IF_ERROR(Check(cudaMemcpyAsync(values.data(), scratch_, bytes,
                                          cudaMemcpyDeviceToHost, stream_),
                          "AllReduceSum copy out"));
    return Wait("AllReduceSum", deadline);
  }

  absl::Status Broadcast(int root, std::string* bytes) override {
    RETURN_IF_ERROR(broken_);
    if (root < 0 || root >= size_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "NCCL collective Broadcast root ", root, " is not in a group of size ", size_));
    }
    absl::Time deadline = absl::Now() + options_.op_timeout;
    // The size first, so that the receivers can size their buffers.
    int64_t n = rank_ == root ? static_cast<int64_t>(bytes->size()) : 0;
    RETURN_IF_ERROR(Reserve(sizeof(n)));
    RETURN_IF_ERROR(Check(cudaMemcpyAsync(scratch_, &n, sizeof(n), cudaMemcpyHostToDevice, stream_),
                          "Broadcast size copy in"));
    RETURN_IF_ERROR(Enqueue(ncclBroadcast(scratch_, scratch_, 1, ncclInt64, root, comm_, stream_),
                            "ncclBroadcast(size)", deadline));
    RETURN_IF_ERROR(Check(cudaMemcpyAsync(&n, scratch_, sizeof(n), cudaMemcpyDeviceToHost, stream_),
                          "Broadcast size copy out"));
    RETURN_IF_ERROR(Wait("Broadcast(size)", deadline));
    if (n < 0) return Fail(absl::DataLossError("NCCL collective Broadcast: negative size"));
    if (rank_ != root) bytes->resize(static_cast<size_t>(n));
    if (n == 0) return absl::OkStatus();
    RETURN_IF_ERROR(Reserve(static_cast<size_t>(n)));
    if (rank_ == root) {
      RETURN_IF_ERROR(Check(cudaMemcpyAsync(scratch_, bytes->data(), n, cudaMemcpyHostToDevice,
                                            stream_),
                            "Broadcast copy in"));
    }
    RETURN_IF_ERROR(Enqueue(ncclBroadcast(scratch_, scratch_, static_cast<size_t>(n), ncclUint8,
                                          root, comm_, stream_),
                            "ncclBroadcast", deadline));
    if (rank_ != root) {
      RETURN_IF_ERROR(Check(cudaMemcpyAsync(bytes->data(), scratch_, n, cudaMemcpyDeviceToHost,
                                            stream_),
                            "Broadcast copy out"));
    }
    return Wait("Broadcast", deadline);
  }

  absl::Status Barrier() override {
    int64_t zero = 0;
    return AllReduceSum(std::span<int64_t>(&zero, 1));
  }

 private:
  absl::Status Fail(absl::Status s) {
    if (broken_.ok()) broken_ = s;
    return broken_;
  }

  absl::Status Check(cudaError_t e, absl::string_view what) {
    if (e == cudaSuccess) return absl::OkStatus();
    return Fail(CudaError(e, absl::StrCat("NCCL collective rank ", rank_, ": ", what)));
  }

  absl::Status Reserve(size_t bytes) {
    if (bytes <= scratch_bytes_) return absl::OkStatus();
    if (scratch_ != nullptr) {
      cudaStreamSynchronize(stream_);
      cudaFree(scratch_);
      scratch_ = nullptr;
      scratch_bytes_ = 0;
    }
    size_t want = bytes < 4096 ? 4096 : bytes;
    RETURN_IF_ERROR(Check(cudaMalloc(&scratch_, want), "cudaMalloc scratch"));
    scratch_bytes_ = want;
    return absl::OkStatus();
  }

  absl::Status Enqueue(ncclResult_t r, absl::string_view what, absl::Time deadline) {
    if (r == ncclSuccess) return absl::OkStatus();
    if (r == ncclInProgress) return Wait(what, deadline);
    return Fail(absl::UnavailableError(absl::StrCat("NCCL collective rank ", rank_, ": ", what,
                                                    ": ", ncclGetErrorString(r))));
  }

  // Polls the communicator and the stream until both are idle, an error, or the deadline.
  absl::Status Wait(absl::string_view what, absl::Time deadline) {
    absl::Duration nap = absl::Microseconds(5);
    while (true) {
      ncclResult_t async = ncclSuccess;
      ncclResult_t r = ncclCommGetAsyncError(comm_, &async);
      if (r != ncclSuccess) async = r;
      if (async != ncclSuccess && async != ncclInProgress) {
        ncclCommAbort(comm_);
        comm_ = nullptr;
        return Fail(absl::UnavailableError(absl::StrCat(
            "NCCL collective rank ", rank_, ": ", what, " failed (a peer gone?): ",
            ncclGetErrorString(async), " ", ncclGetLastError(nullptr))));
      }
      if (async == ncclSuccess) {
        cudaError_t e = cudaStreamQuery(stream_);
        if (e == cudaSuccess) return absl::OkStatus();
        if (e != cudaErrorNotReady) return Check(e, what);
      }
      if (absl::Now() > deadline) {
        ncclCommAbort(comm_);
        comm_ = nullptr;
        return Fail(absl::DeadlineExceededError(absl::StrCat(
            "NCCL collective rank ", rank_, " of ", size_, ": ", what,
            " did not complete before the deadline (a peer not calling it?)")));
      }
      absl::SleepFor(nap);
      if (nap < absl::Milliseconds(1)) nap *= 2;
    }
  }

  int rank_;
  int size_;
  NcclCollectiveOptions options_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  absl::Status broken_;
};

}  // namespace

bool NcclCollectiveAvailable() { return true; }

absl::StatusOr<std::unique_ptr<Collective>> CreateNcclCollective(Collective* bootstrap,
                                                                 NcclCollectiveOptions options) {
  if (bootstrap == nullptr) return absl::InvalidArgumentError("NCCL collective: no bootstrap");
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    return absl::FailedPreconditionError("NCCL collective: no CUDA device");
  }
  ncclUniqueId id{};
  std::string bytes;
  if (bootstrap->rank() == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) {
      return absl::UnavailableError(
          absl::StrCat("NCCL collective: ncclGetUniqueId: ", ncclGetErrorString(r)));
    }
    bytes.assign(reinterpret_cast<const char*>(&id), sizeof(id));
  }
  RETURN_IF_ERROR(bootstrap->Broadcast(0, &bytes));
  if (bytes.size() != sizeof(id)) {
    return absl::DataLossError(absl::StrCat("NCCL collective: rank 0 sent a unique id of ",
                                            bytes.size(), " bytes, expected ", sizeof(id)));
  }
  std::memcpy(&id, bytes.data(), sizeof(id));
  auto c = std::make_unique<NcclCollective>(bootstrap->rank(), bootstrap->size(), options);
  RETURN_IF_ERROR(c->Init(id));
  return std::unique_ptr<Collective>(std::move(c));
}

#else  // no NCCL in this build

bool NcclCollectiveAvailable() { return false; }

absl::StatusOr<std::unique_ptr<Collective>> CreateNcclCollective(Collective* bootstrap,
                                                                 NcclCollectiveOptions options) {
  (void)bootstrap;
  (void)options;
  return absl::UnimplementedError(
      "NCCL collective: this build has no NCCL (configure with the CUDA toolkit and NCCL)");
}

#endif

}  // namespace sluice
