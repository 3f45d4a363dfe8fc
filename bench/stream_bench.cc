// stream_bench: one worker streaming steps to one consumer over loopback through Sluice's data
// plane (StepBuffer -> GrpcWorkerService -> gRPC -> step-frame decode into pooled buffers),
// against a raw TCP socket moving the same bytes in the same run.
//
//   build/bench/stream_bench [--sizes=1024,16384,...] [--bytes=2147483648] [--replicas=1]
//                            [--reps=3] [--credits=16] [--budget=67108864]
//                            [--coalesce_wait_us=500] [--compact=1] [--views=1] [--shm=1]
//                            [--max_frame=0] [--tx_zerocopy=0] [--show_slices=0] [--only_shm=0]
//                            [--build_steps=1] [--prefetch=1] [--bulk=1] [--only_bulk=0]
//                            [--worker_buffer=0] [--bulk_max_frame=0] [--read=0]
//                            [--bulk_cc=] [--tcp_cc=] [--tcp_as_bulk=0] [--tcp_away_us=0]
//                            [--bulk_inband=1] [--raise_after_us=-1] [--raise_covered_us=-1]
//
// Per size: steps of `replicas` pieces of `size` bytes each, three ways, interleaved:
//  - "raw": a hand-written consumer of the StreamSteps call that decodes each frame and grants
//    its credit back at once (a window of `credits` steps): the wire protocol alone;
//  - "client": the production client path, ServiceStepSource (credit thread, byte budget
//    `--budget`, Element packing) under a DevicePrefetcher on the host path (replicas on the
//    CPU: over the service's source it has no thread of its own, client/device_prefetcher.h),
//    the trainer's loop calling GetNextStep; the coordinator is a stub listing the one task;
//  - "shm": the same production client with the worker on its host taking the shared-memory
//    path (core/rpc/shm_ring.h: the tensors are views of the worker's segment); "client" is
//    that client with shared memory off (TCP);
//  - "bulk": the same production client, shared memory off, with the bulk data channel on
//    (core/rpc/bulk_channel.h: frames' tensor bytes on a socket of their own, received
//    straight into the pool's buffers); "client" has it off (every byte through gRPC);
//  - "TCP": the same bytes over a plain socket (the ceiling of the TCP paths);
//  - "memcpy": one thread copying each step into a warm 128 MiB buffer: the machine's bound
//    for any path that writes every byte once, as the shm path's producer does (memcpy/TCP
//    is then the most shm/TCP can reach on this machine).
// --bulk=0 leaves the bulk column out; --only_bulk=1 runs the bulk and TCP columns alone,
// alternating (for a profiler, and for bulk/TCP on a loaded machine: CPU-s/GB of each), and
// splits bulk's CPU by thread: the producer's build, sluice-bulk-tx (the send copy),
// sluice-bulk-rx (the receive copy, decode, queueing), the rest (gRPC, the pump pool, the
// client's credit thread, the trainer's loop); with steps per frame on the socket, the process's
// context switches per frame (getrusage, voluntary and not, per step x steps per frame), and
// the seconds per GB the two bulk threads spent off CPU: idle (tx: no frame to write; rx: no
// frame header yet; with in-band headers rx waits in the socket instead, counted as blocked)
// and blocked (in the socket: a full send buffer, an empty receive buffer; or runnable,
// waiting for a core).
// With --only_bulk=1 each size also prints (stderr) the context switches per bulk frame by
// thread name (/proc/self/task, and the bulk threads' own counts when they end), and the bulk
// row the credit messages per frame (CreditGrants and, of them, raises).
// --raise_after_us=N / --raise_covered_us=N: the client's raise_credit_after and
// raise_credit_after_covered (client/service_step_source.h; -1: the defaults).
// --bulk_inband=0: the consumers keep the frames' headers on gRPC (the protocol before in-band
// headers, core/rpc/bulk_channel.h), to compare the two in one binary.
// --bulk_cc=NAME / --tcp_cc=NAME: the TCP congestion control of the bulk sockets (the
// worker's bulk_congestion_control) and of raw TCP's socket; empty (the default): the host's
// (net.ipv4.tcp_congestion_control). Compare the two columns under the same one: on a host
// whose default is bbr, loopback TCP is paced (bench/RESULTS.md, "bulkwire").
// --tcp_as_bulk=1: raw TCP's socket used as the bulk channel uses its own (TCP_NODELAY on both
// ends, each message received whole with MSG_WAITALL, sent as three iovecs by sendmsg), in
// messages of the bulk frames' size (the whole steps below 4 MiB, or one step): whether
// bulk/TCP is the socket's calls and options or the rest of the chain. --tcp_away_us=N: TCP's
// receiver spends N us on its CPU after each message, as sluice-bulk-rx does between frames
// (decode, queue, the next header): what a receiver away from its socket costs the sender.
// --worker_buffer=N: the producer builds at most N bytes ahead of the stream (see below).
// --bulk_max_frame=N: the worker's bulk_max_frame_bytes (0: its default).
// --shm=0 leaves the shm column out; --only_shm=1 runs that column alone (for a profiler).
// --build_steps=1 (the default): the worker's producer writes each step's bytes afresh, as a
// pipeline's batch op does: with shared memory, straight into the consumer's ring (the frame is
// then only a header; the producer writes it as core/tensor/step_output_allocator.h says, with
// StreamingCopy); otherwise into ordinary memory. --build_steps=2: always into ordinary memory,
// as a pipeline whose last op does not build in the step's place (batch(), map()): with shared
// memory the worker's placement then copies each step into the ring (worker/step_placement.h),
// one copy more. --build_steps=0: one tensor shared by every step (the producer does no work;
// the shm path copies it into the ring per step).
// --prefetch=0: the client columns without the DevicePrefetcher (ServiceStepSource alone).
// --read=1: every consumer reads every byte it receives once (a sum of its 64-bit words), as a
// trainer on the CPU does with its batch: the client, bulk and shm columns in the trainer's
// loop, TCP's receiver after each recv. 0 (the default): the consumers only count the bytes, as
// a trainer whose device copies them (DMA) does not read them with the CPU; TCP's receive copy
// still writes them into its buffer.
// --compact=1 (the default, as the production client): raw and client ask for compact frame
// headers (core/rpc/step_frame.h); --compact=0: full headers, for comparison. --views=1 (the
// default, as the production client on host memory): tensors inside one received slice are
// views of it ("raw viewed": the share of bytes received so); --views=0: every byte copied.
// --max_frame: the consumer's HTTP/2 SETTINGS_MAX_FRAME_SIZE (0: gRPC's 16 KiB); --tx_zerocopy:
// MSG_ZEROCOPY sends on the worker (bench/RESULTS.md, "Receive views and zero-copy send").
// The consumer receives every byte into a buffer of its own (copied once from the received
// slices, or viewed there with --views=1) and drops it. Reports medians of `reps` runs. Memory
// is kept resident (the production allocator settings, RetainFreedMemory; pooled receive
// buffers), as PERF_NOTES.md says any such benchmark must.
//
// What each column includes (the second table gives CPU-seconds per GB, from getrusage over
// the run: every thread of this one process, worker and consumer alike, so it holds on a
// loaded machine where wall time does not):
//  - raw, client, shm: the whole stream from its opening (for shm: the segment's creation,
//    hand-over and the page faults of its first lap) to the last step, and the worker's
//    producer building each step ("build", measured on the producer's thread: with
//    --build_steps=1 one write of the step's bytes, the pipeline's own output, into the ring
//    for shm or into fresh memory otherwise). Less build, shm's cost is the transport alone:
//    frame headers over gRPC, credit grants and releases, the consumer's Element packing; it
//    copies no byte.
//  - TCP: a sender thread writing one reused buffer and a receiver reading into another: two
//    kernel copies, no step built, no framing. So its bytes/s is a ceiling for a socket, and
//    shm/TCP compares a path that builds every step with one that builds none.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_flags.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/device_prefetcher.h"
#include "client/service_step_source.h"
#include "core/rpc/shm_ring.h"
#include "core/rpc/shm_segment_pool.h"
#include "core/rpc/step_frame.h"
#include "grpcpp/grpcpp.h"
#include "proto/coordinator.grpc.pb.h"
#include "grpcpp/impl/rpc_method.h"
#include "grpcpp/support/sync_stream.h"
#include "worker/grpc_worker_service.h"
#include "core/tensor/step_output_allocator.h"
#include "core/util/malloc_retention.h"
#include "core/util/mutex_deadlock_detection.h"
#include "core/util/streaming_copy.h"
#include "worker/step_placement.h"

namespace sluice {
namespace {

// Receive buffers recycled by size: after warm-up, no allocation and no page fault per step.
class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  std::shared_ptr<TensorBuffer> Get(size_t bytes) {
    std::shared_ptr<TensorBuffer> raw;
    {
      absl::MutexLock lock(&mu_);
      auto& list = free_[bytes];
      if (!list.empty()) {
        raw = std::move(list.back());
        list.pop_back();
      }
    }
    if (raw == nullptr) raw = AllocateUninitializedHost(bytes);
    return std::make_shared<Pooled>(shared_from_this(), std::move(raw));
  }

 private:
  class Pooled : public TensorBuffer {
   public:
    Pooled(std::shared_ptr<BufferPool> pool, std::shared_ptr<TensorBuffer> raw)
        : pool_(std::move(pool)), raw_(std::move(raw)) {}
    ~Pooled() override {
      absl::MutexLock lock(&pool_->mu_);
      pool_->free_[raw_->size()].push_back(std::move(raw_));
    }
    void* data() override { return raw_->data(); }
    size_t size() const override { return raw_->size(); }

   private:
    std::shared_ptr<BufferPool> pool_;
    std::shared_ptr<TensorBuffer> raw_;
  };

  absl::Mutex mu_;
  std::map<size_t, std::vector<std::shared_ptr<TensorBuffer>>> free_ ABSL_GUARDED_BY(mu_);
};

class OneTask : public TaskLookup {
 public:
  absl::StatusOr<std::shared_ptr<TaskRunner>> FindTask(int64_t, int64_t) override {
    absl::MutexLock lock(&mu_);
    if (runner_ == nullptr) return absl::UnavailableError("no task");
    return runner_;
  }
  void Set(std::shared_ptr<TaskRunner> r) {
    absl::MutexLock lock(&mu_);
    runner_ = std::move(r);
  }

 private:
  absl::Mutex mu_;
  std::shared_ptr<TaskRunner> runner_ ABSL_GUARDED_BY(mu_);
};

struct Result {
  double seconds = 0;
  int64_t steps = 0;
  int64_t bytes = 0;
  int64_t viewed_bytes = 0;  // raw: payload received as views of gRPC's slices
  // CPU time of the whole process during the run (every thread: worker, gRPC, consumer), the
  // part of it the worker's producer spent building steps (the pipeline's own output, which
  // raw TCP does not have), and the minor page faults taken.
  double cpu_seconds = 0;
  int64_t context_switches = 0;  // the process's, voluntary and not (getrusage)
  double build_cpu_seconds = 0;
  double read_cpu_seconds = 0;  // --read=1: of cpu_seconds, the consumer's reading
  int64_t minor_faults = 0;
  // The bulk channel's threads (sluice-bulk-tx: the send copy; sluice-bulk-rx: the receive
  // copy and the consumer's handling of each frame) and the frames on its sockets.
  double tx_cpu_seconds = 0;
  double rx_cpu_seconds = 0;
  int64_t bulk_frames = 0;
  // Where those two threads were off CPU: idle (tx: no frame to write; rx: no frame header
  // yet) and the rest of their lifetime past CPU and idle (blocked in the socket, or waiting
  // for a core).
  double tx_idle_seconds = 0, tx_blocked_seconds = 0;
  double rx_idle_seconds = 0, rx_blocked_seconds = 0;
  // The production client's CreditGrant messages (quarter-window grants and raises), and the
  // context switches (voluntary and not) by thread name: the threads alive at the end of the
  // run (counted from the start, or from their creation), "sluice-bulk-tx" and
  // "sluice-bulk-rx" (the bulk threads, which end with their stream), and "(ended, other)":
  // the rest of the process's, threads that ended during the run.
  int64_t grants = 0;
  int64_t raises = 0;  // of which raises (a grant to window + 1)
  std::map<std::string, int64_t> thread_switches;
};

// Each thread of this process now: its id, name (trailing digits dropped, so that a pool's
// threads count as one; "(unnamed)" for those other than the main thread that kept the
// process's name) and context switches so far (/proc/self/task/*/status, voluntary and
// not).
std::map<int64_t, std::pair<std::string, int64_t>> ThreadSwitches() {
  std::map<int64_t, std::pair<std::string, int64_t>> out;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return out;
  while (dirent* e = readdir(dir)) {
    int64_t tid = 0;
    if (!absl::SimpleAtoi(e->d_name, &tid)) continue;
    const std::string base = absl::StrCat("/proc/self/task/", e->d_name, "/");
    std::string name, status;
    if (FILE* f = std::fopen((base + "comm").c_str(), "r")) {
      char buf[64] = {};
      if (std::fgets(buf, sizeof(buf), f) != nullptr) name = buf;
      std::fclose(f);
    }
    while (!name.empty() && (name.back() == '\n' || (name.back() >= '0' && name.back() <= '9'))) {
      name.pop_back();
    }
    // Threads that did not name themselves carry the process's name: tell the main thread
    // (the trainer's loop) from them.
    if (tid != getpid() && name == "stream_bench") name = "(unnamed)";
    int64_t switches = 0;
    if (FILE* f = std::fopen((base + "status").c_str(), "r")) {
      char line[256];
      while (std::fgets(line, sizeof(line), f) != nullptr) {
        long long v = 0;
        if (std::sscanf(line, "voluntary_ctxt_switches: %lld", &v) == 1 ||
            std::sscanf(line, "nonvoluntary_ctxt_switches: %lld", &v) == 1) {
          switches += v;
        }
      }
      std::fclose(f);
    }
    out[tid] = {name, switches};
  }
  closedir(dir);
  return out;
}

// The CPU time of the calling thread.
double ThreadCpuSeconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// Nanoseconds of CPU the producers spent building steps (StartTask), process-wide, and that the
// consumers spent reading what they received (--read=1).
std::atomic<int64_t> g_build_cpu_ns{0};
std::atomic<int64_t> g_read_cpu_ns{0};

// The process's CPU time, minor faults and producers' build time at construction; Stop()
// fills a Result's fields with what was spent since. Constructed before a run's task starts,
// so that the steps its producer builds ahead are counted.
class UsageMeter {
 public:
  UsageMeter() : bulk_(ProcessBulkChannelCounts()), threads_(ThreadSwitches()) {
    Read(&cpu_, &faults_, &build_, &read_, &switches_);
  }
  void Stop(Result* r) const {
    // A stream's bulk sender counts its CPU when its thread ends, after the consumer left
    // (the worker's OnDone): wait for it, bounded.
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (ProcessBulkChannelCounts().senders_alive > 0 && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    double cpu = 0;
    int64_t faults = 0, build = 0, read = 0, switches = 0;
    Read(&cpu, &faults, &build, &read, &switches);
    r->cpu_seconds = cpu - cpu_;
    r->context_switches = switches - switches_;
    r->minor_faults = faults - faults_;
    r->build_cpu_seconds = static_cast<double>(build - build_) * 1e-9;
    r->read_cpu_seconds = static_cast<double>(read - read_) * 1e-9;
    const BulkChannelCounts bulk = ProcessBulkChannelCounts();
    r->tx_cpu_seconds = static_cast<double>(bulk.sender_cpu_ns - bulk_.sender_cpu_ns) * 1e-9;
    r->rx_cpu_seconds = static_cast<double>(bulk.receiver_cpu_ns - bulk_.receiver_cpu_ns) * 1e-9;
    r->bulk_frames = bulk.frames_received - bulk_.frames_received;
    const auto ns = [](int64_t now, int64_t then) { return static_cast<double>(now - then) * 1e-9; };
    r->tx_idle_seconds = ns(bulk.sender_idle_ns, bulk_.sender_idle_ns);
    r->tx_blocked_seconds = ns(bulk.sender_wall_ns, bulk_.sender_wall_ns) - r->tx_idle_seconds -
                            r->tx_cpu_seconds;
    r->rx_idle_seconds = ns(bulk.receiver_idle_ns, bulk_.receiver_idle_ns);
    r->rx_blocked_seconds = ns(bulk.receiver_wall_ns, bulk_.receiver_wall_ns) -
                            r->rx_idle_seconds - r->rx_cpu_seconds;
    int64_t counted = 0;
    for (const auto& [tid, now] : ThreadSwitches()) {
      auto then = threads_.find(tid);
      const int64_t d = now.second - (then == threads_.end() ? 0 : then->second.second);
      r->thread_switches[now.first] += d;
      counted += d;
    }
    const int64_t tx = bulk.sender_switches - bulk_.sender_switches;
    const int64_t rx = bulk.receiver_switches - bulk_.receiver_switches;
    r->thread_switches["sluice-bulk-tx"] += tx;
    r->thread_switches["sluice-bulk-rx"] += rx;
    r->thread_switches["(ended, other)"] += r->context_switches - counted - tx - rx;
  }

 private:
  static void Read(double* cpu, int64_t* faults, int64_t* build, int64_t* read,
                   int64_t* switches) {
    rusage u;
    getrusage(RUSAGE_SELF, &u);
    *cpu = static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
    *faults = u.ru_minflt;
    *switches = u.ru_nvcsw + u.ru_nivcsw;
    *build = g_build_cpu_ns.load();
    *read = g_read_cpu_ns.load();
  }
  const BulkChannelCounts bulk_;
  const std::map<int64_t, std::pair<std::string, int64_t>> threads_;
  double cpu_ = 0;
  int64_t faults_ = 0, build_ = 0, read_ = 0, switches_ = 0;
};

// The coordinator as ServiceStepSource sees it: job 1 has task 1 on `worker`.
class StubCoordinator : public proto::CoordinatorService::Service {
 public:
  void set_worker(std::string worker) { worker_ = std::move(worker); }
  grpc::Status ClientHeartbeat(grpc::ServerContext*, const proto::ClientHeartbeatRequest*,
                               proto::ClientHeartbeatResponse* response) override {
    response->set_num_tasks(1);
    response->set_num_tasks_created(1);
    proto::TaskInfo* t = response->add_tasks();
    t->set_task_id(1);
    t->set_task_index(0);
    t->set_worker_address(worker_);
    return grpc::Status::OK;
  }

 private:
  std::string worker_;
};

// --compact: whether the consumers ask for compact frame headers.
bool g_compact = true;
// --views=1: tensors as views of gRPC's received slices where they can be (raw and client).
bool g_views = true;
// --max_frame=N: the consumer's HTTP/2 max frame size (0: what the production client sets).
int64_t g_max_frame = 0;
// --show_slices=1: print one frame's received slices per raw run (sizes, alignment).
bool g_show_slices = false;
// --build_steps=1: the producer writes every step's bytes afresh (as a pipeline's batch does),
// in the consumer's shared-memory ring when there is one; 2: afresh, always in ordinary memory
// (the worker places it); 0: every step shares one tensor.
int64_t g_build_steps = 1;
// --prefetch=0: the trainer's loop reads ServiceStepSource directly (no DevicePrefetcher), to
// tell the prefetcher's per-step cost from the source's (on the host path it has no thread over
// this source: the difference is one call and a lock per step).
bool g_prefetch = true;
// --read=1: the consumers read every byte they receive (see the header comment).
bool g_read = false;
// What the consumers read is summed here, so that the compiler keeps the reads.
std::atomic<uint64_t> g_read_sum{0};

// Reads the `bytes` bytes at `data` once, as a trainer's first op on its batch does.
void ReadEveryByte(const void* data, size_t bytes) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t sum = 0;
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    sum += w;
  }
  for (; i < bytes; ++i) sum += p[i];
  g_read_sum.fetch_add(sum, std::memory_order_relaxed);
}

// --tcp_cc=NAME: the raw TCP column's congestion control (its sending socket; empty: the
// host's default), to compare it with the bulk column's (--bulk_cc) like for like.
std::string g_tcp_cc;

// --tcp_as_bulk, --tcp_away_us (above).
bool g_tcp_as_bulk = false;
// --bulk_inband=0: the consumers keep the bulk frames' headers on gRPC (BulkOffer.inband_headers
// off, the protocol before in-band headers), to compare with in-band ones in one build.
bool g_bulk_inband = true;
int64_t g_tcp_away_us = 0;
// --raise_after_us / --raise_covered_us: the client's raise_credit_after and
// raise_credit_after_covered (-1: its defaults).
int64_t g_raise_after_us = -1;
int64_t g_raise_covered_us = -1;

// --worker_buffer=N: the task's step buffer in bytes, how far the producer builds ahead of the
// stream (0: the default, max(8 steps, 8 MiB)); smaller sends steps closer to their build.
int64_t g_worker_buffer = 0;

// Starts the task's runner: `steps` steps of `replicas` pieces of one `size`-byte tensor.
void StartTask(OneTask* lookup, size_t size, int64_t replicas, int64_t steps) {
  proto::TaskDef task;
  task.set_task_id(1);
  task.set_job_id(1);
  task.set_num_tasks(1);
  task.mutable_job()->set_num_consumers(1);
  task.mutable_job()->set_replicas_per_consumer(replicas);
  Tensor piece = Tensor::Allocate(DType::kUInt8, Shape({static_cast<int64_t>(size)}));
  std::memset(piece.mutable_raw_data(), 7, size);
  const int64_t build = g_build_steps;
  TaskRunnerOptions options;
  options.buffer_bytes = g_worker_buffer > 0 ? static_cast<size_t>(g_worker_buffer)
                                             : std::max<size_t>(size * replicas * 8, 8 << 20);
  auto produced = std::make_shared<int64_t>(0);
  lookup->Set(TaskRunner::StartWith(task, options, [=](TaskStep* step, bool* end) {
    if (*produced == steps) {
      *end = true;
      return absl::OkStatus();
    }
    step->task_step = (*produced)++;
    step->num_real_pieces = replicas;
    const double build_start = ThreadCpuSeconds();
    if (build == 0) {
      step->pieces.assign(static_cast<size_t>(replicas), std::vector<Tensor>{piece});
    } else {
      // As a batch op: every piece written afresh, into the consumer's ring when the worker
      // has one for this task (worker/step_placement.h) and --build_steps=1, else into
      // ordinary memory.
      step->pieces.resize(static_cast<size_t>(replicas));
      for (std::vector<Tensor>& p : step->pieces) {
        std::shared_ptr<TensorBuffer> b = build == 1 ? AllocateStepOutput(size) : nullptr;
        if (b != nullptr) {
          StreamingCopy(b->data(), piece.raw_data(), size);
        } else {
          b = AllocateUninitializedHost(size);
          std::memcpy(b->data(), piece.raw_data(), size);
        }
        p.assign(1, *Tensor::Wrap(DType::kUInt8, piece.shape(), std::move(b)));
      }
    }
    step->bytes = size * replicas;
    g_build_cpu_ns.fetch_add(static_cast<int64_t>((ThreadCpuSeconds() - build_start) * 1e9));
    *end = false;
    return absl::OkStatus();
  }));
}

// The production client path: ServiceStepSource + DevicePrefetcher (host path).
Result RunClient(OneTask* lookup, const std::string& address, size_t size, int64_t replicas,
                 int64_t steps, int64_t budget, BufferPool* pool, bool shared_memory,
                 bool bulk_data) {
  const UsageMeter usage;
  StartTask(lookup, size, replicas, steps);
  ServiceStepSourceOptions o;
  o.coordinator_address = address;
  o.job_id = 1;
  o.num_local_replicas = replicas;
  o.per_replica_spec = ElementSpec(TensorSpec{DType::kUInt8, Shape({static_cast<int64_t>(size)})});
  o.compact_headers = g_compact;
  o.shared_memory = shared_memory;
  o.bulk_data = bulk_data;
  o.bulk_inband_headers = g_bulk_inband;
  if (g_raise_after_us >= 0) o.raise_credit_after = absl::Microseconds(g_raise_after_us);
  if (g_raise_covered_us >= 0) {
    o.raise_credit_after_covered = absl::Microseconds(g_raise_covered_us);
  }
  o.receive_budget_bytes = budget;
  // --views=1: no allocator of our own, so tensors may be views of the received slices.
  if (!g_views) o.allocator = [pool](size_t bytes) { return pool->Get(bytes); };
  Result r;
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<ServiceStepSource>> source = ServiceStepSource::Create(o);
  if (!source.ok()) {
    std::fprintf(stderr, "client: %s\n", source.status().ToString().c_str());
    return r;
  }
  ServiceStepSource* const service_source = source->get();  // flow stats, below
  DevicePrefetchOptions prefetch;
  prefetch.replicas.resize(static_cast<size_t>(replicas));  // CPU replicas: the host path
  prefetch.buffer_size = 2;
  absl::StatusOr<std::unique_ptr<StepSource>> wrapped =
      g_prefetch ? DevicePrefetcher::Wrap(*std::move(source), prefetch)
                 : absl::StatusOr<std::unique_ptr<StepSource>>(*std::move(source));
  if (!wrapped.ok()) {
    std::fprintf(stderr, "client: %s\n", wrapped.status().ToString().c_str());
    return r;
  }
  std::vector<Element> step;
  bool end = false;
  while (true) {
    absl::Status s = (*wrapped)->GetNextStep(&step, &end);
    if (!s.ok()) {
      std::fprintf(stderr, "client: %s\n", s.ToString().c_str());
      break;
    }
    if (end) break;
    const double read_start = g_read ? ThreadCpuSeconds() : 0;
    for (const Element& e : step) {
      r.bytes += static_cast<int64_t>(e.leaf().byte_size());
      if (g_read) ReadEveryByte(e.leaf().raw_data(), e.leaf().byte_size());
    }
    if (g_read) {
      g_read_cpu_ns.fetch_add(static_cast<int64_t>((ThreadCpuSeconds() - read_start) * 1e9));
    }
    ++r.steps;
  }
  r.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  const ServiceStepSource::FlowStats flow = service_source->flow_stats();
  r.grants = flow.credit_grants + flow.credit_raises;
  r.raises = flow.credit_raises;
  wrapped->reset();
  usage.Stop(&r);
  lookup->Set(nullptr);
  return r;
}

// Streams `steps` steps of `replicas` x `size` bytes through the service at `address`.
Result RunSluice(OneTask* lookup, const std::string& address, size_t size, int64_t replicas,
                 int64_t steps, int64_t credits, BufferPool* pool) {
  const UsageMeter usage;
  StartTask(lookup, size, replicas, steps);

  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  if (g_max_frame > 0) args.SetInt(GRPC_ARG_HTTP2_MAX_FRAME_SIZE, static_cast<int>(g_max_frame));
  auto channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> stream(
      grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(
          channel.get(),
          grpc::internal::RpcMethod(kStreamStepsMethod, grpc::internal::RpcMethod::BIDI_STREAMING,
                                    channel),
          &context));
  TensorAllocator alloc = [pool](size_t bytes) { return pool->Get(bytes); };
  Result r;
  const absl::Time start = absl::Now();
  proto::ConsumerMessage first;
  // A window of `credits` steps, in bytes (StepCreditBytes), granted back frame by frame.
  const int64_t window =
      credits * static_cast<int64_t>(size * static_cast<size_t>(replicas) + kStepCreditOverheadBytes);
  first.mutable_request()->set_wire_version(proto::WIRE_VERSION_2);
  first.mutable_request()->set_job_id(1);
  first.mutable_request()->set_task_id(1);
  first.mutable_request()->set_initial_credit_bytes(window);
  first.mutable_request()->set_window_bytes(window);
  std::shared_ptr<const CompactSpec> spec;
  if (g_compact) {
    spec = std::make_shared<const CompactSpec>(CompactSpec::FromElementSpec(
        ElementSpec(TensorSpec{DType::kUInt8, Shape({static_cast<int64_t>(size)})})));
    first.mutable_request()->set_compact_headers(true);
    spec->ToProto(first.mutable_request()->mutable_compact_spec());
  }
  StepFrameDecoder decoder(alloc, spec, g_views);
  StepFrame frame;
  stream->Write(EncodeConsumerMessage(first));
  grpc::ByteBuffer bb;
  bool end = false;
  while (!end && stream->Read(&bb)) {
    if (g_show_slices && r.steps == 5) {  // one frame's received slices: size@address%64
      std::vector<grpc::Slice> sl;
      (void)bb.Dump(&sl);
      std::string d;
      for (const grpc::Slice& x : sl) {
        absl::StrAppend(&d, x.size(), "@", reinterpret_cast<uintptr_t>(x.begin()) % 64, " ");
      }
      std::fprintf(stderr, "received slices: %s\n", d.c_str());
    }
    absl::Status s = decoder.Decode(bb, &frame);
    if (!s.ok() || !frame.status.ok()) {
      std::fprintf(stderr, "decode: %s %s\n", s.ToString().c_str(), frame.status.ToString().c_str());
      break;
    }
    int64_t cost = 0;
    for (const WireStep& w : frame.steps) {
      r.bytes += static_cast<int64_t>(StepPayloadBytes(w));
      cost += static_cast<int64_t>(StepCreditBytes(w));
    }
    r.steps += static_cast<int64_t>(frame.steps.size());
    end = frame.end_of_task;
    if (!frame.steps.empty()) {
      proto::ConsumerMessage credit;
      credit.mutable_credit()->set_bytes(cost);
      stream->Write(EncodeConsumerMessage(credit));
    }
  }
  r.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  r.viewed_bytes = static_cast<int64_t>(decoder.stats().viewed_bytes);
  stream->WritesDone();
  grpc::Status st = stream->Finish();
  usage.Stop(&r);
  if (!st.ok()) std::fprintf(stderr, "stream: %s\n", st.error_message().c_str());
  lookup->Set(nullptr);
  return r;
}

// The same bytes over a plain TCP socket on loopback: `size`-byte writes into one reused
// receive buffer (the ceiling: iperf3-like, at least 1 MiB a write).
Result RunTcp(size_t size, int64_t messages) {
  const UsageMeter usage;
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  listen(listener, 1);
  const size_t chunk = std::max<size_t>(size, 1);
  const int one = 1;
  std::thread sender([&] {
    int fd = accept(listener, nullptr, nullptr);
    if (!g_tcp_cc.empty()) {
      setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, g_tcp_cc.data(),
                 static_cast<socklen_t>(g_tcp_cc.size()));
    }
    if (g_tcp_as_bulk) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    std::vector<char> buf(chunk, 7);
    for (int64_t m = 0; m < messages; ++m) {
      size_t off = 0;
      while (off < chunk) {
        // As bulk: sendmsg of the rest of the message's three thirds (a frame's tensors, each
        // an iovec); else send.
        ssize_t n = 0;
        if (g_tcp_as_bulk) {
          iovec iov[3];
          size_t pieces = 0;
          for (size_t k = 1; k <= 3; ++k) {
            const size_t from = std::max(off, (k - 1) * chunk / 3), to = k * chunk / 3;
            if (to > from) iov[pieces++] = {buf.data() + from, to - from};
          }
          msghdr msg{};
          msg.msg_iov = iov;
          msg.msg_iovlen = pieces;
          n = sendmsg(fd, &msg, MSG_NOSIGNAL);
        } else {
          n = send(fd, buf.data() + off, chunk - off, 0);
        }
        if (n <= 0) break;
        off += static_cast<size_t>(n);
      }
    }
    close(fd);
  });
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  if (g_tcp_as_bulk) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  std::vector<char> buf(chunk);
  Result r;
  const absl::Time start = absl::Now();
  for (int64_t m = 0; m < messages; ++m) {
    size_t off = 0;
    while (off < chunk) {
      ssize_t n = recv(fd, buf.data() + off, chunk - off, g_tcp_as_bulk ? MSG_WAITALL : 0);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    if (g_tcp_away_us > 0) {  // on the CPU, away from the socket
      const double until = ThreadCpuSeconds() + 1e-6 * static_cast<double>(g_tcp_away_us);
      while (ThreadCpuSeconds() < until) {
      }
    }
    if (g_read) {
      const double read_start = ThreadCpuSeconds();
      ReadEveryByte(buf.data(), off);
      g_read_cpu_ns.fetch_add(static_cast<int64_t>((ThreadCpuSeconds() - read_start) * 1e9));
    }
    r.bytes += static_cast<int64_t>(off);
    ++r.steps;
  }
  r.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  sender.join();
  usage.Stop(&r);
  close(fd);
  close(listener);
  return r;
}

// The machine's bound for a path that writes every byte once: one thread copying each step
// (`size` bytes, as the producer's build does) into a warm 128 MiB buffer used as a ring, the
// size of a default segment. Same run, same sizes as the columns it bounds.
Result RunMemcpy(size_t size, int64_t steps) {
  const size_t ring = std::max<size_t>(size_t{128} << 20, size);
  std::vector<char> src(size, 7), dst(ring, 0);
  for (size_t off = 0; off < ring; off += 4096) dst[off] = 1;  // warm: pages allocated
  const UsageMeter usage;
  Result r;
  size_t off = 0;
  const absl::Time start = absl::Now();
  for (int64_t s = 0; s < steps; ++s) {
    if (off + size > ring) off = 0;
    std::memcpy(dst.data() + off, src.data(), size);
    off += (size + 63) / 64 * 64;
    r.bytes += static_cast<int64_t>(size);
    ++r.steps;
  }
  r.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  usage.Stop(&r);
  if (dst[ring / 2] == 42) std::printf(" ");  // keeps the copies
  return r;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One column's runs: rates by wall time and by CPU time.
struct Column {
  std::vector<double> gbs, sps;             // wall: GB/s, steps/s
  std::vector<double> cpu_per_gb;           // process CPU-seconds per GB moved
  std::vector<double> build_per_gb;         // of which the producer's building of steps
  std::vector<double> read_per_gb;          // and the consumer's reading (--read=1)
  std::vector<double> steps_per_cpu;        // steps per process CPU-second
  std::vector<double> faults_per_gb;        // minor page faults per GB moved
  std::vector<double> tx_per_gb, rx_per_gb;  // of which the bulk channel's threads
  std::vector<double> steps_per_frame;       // steps per frame on the bulk socket
  std::vector<double> switches_per_step;     // the process's context switches per step
  std::vector<double> grants_per_frame;      // CreditGrant messages per bulk frame
  std::vector<double> raises_per_frame;      // of which raises
  // Context switches by thread name over every run, and the bulk frames of those runs.
  std::map<std::string, int64_t> thread_switches;
  int64_t frames = 0;
  // Off-CPU seconds per GB of the bulk threads: idle, and blocked (Result's fields).
  std::vector<double> tx_idle_per_gb, tx_blocked_per_gb, rx_idle_per_gb, rx_blocked_per_gb;
  void Add(const Result& r) {
    const double gb = std::max<double>(static_cast<double>(r.bytes), 1) / 1e9;
    gbs.push_back(gb / r.seconds);
    sps.push_back(static_cast<double>(r.steps) / r.seconds);
    cpu_per_gb.push_back(r.cpu_seconds / gb);
    build_per_gb.push_back(r.build_cpu_seconds / gb);
    read_per_gb.push_back(r.read_cpu_seconds / gb);
    steps_per_cpu.push_back(static_cast<double>(r.steps) / std::max(r.cpu_seconds, 1e-9));
    faults_per_gb.push_back(static_cast<double>(r.minor_faults) / gb);
    tx_per_gb.push_back(r.tx_cpu_seconds / gb);
    rx_per_gb.push_back(r.rx_cpu_seconds / gb);
    steps_per_frame.push_back(static_cast<double>(r.steps) /
                              static_cast<double>(std::max<int64_t>(r.bulk_frames, 1)));
    switches_per_step.push_back(static_cast<double>(r.context_switches) /
                                static_cast<double>(std::max<int64_t>(r.steps, 1)));
    grants_per_frame.push_back(static_cast<double>(r.grants) /
                               static_cast<double>(std::max<int64_t>(r.bulk_frames, 1)));
    raises_per_frame.push_back(static_cast<double>(r.raises) /
                               static_cast<double>(std::max<int64_t>(r.bulk_frames, 1)));
    for (const auto& [name, n] : r.thread_switches) thread_switches[name] += n;
    frames += r.bulk_frames;
    tx_idle_per_gb.push_back(r.tx_idle_seconds / gb);
    tx_blocked_per_gb.push_back(r.tx_blocked_seconds / gb);
    rx_idle_per_gb.push_back(r.rx_idle_seconds / gb);
    rx_blocked_per_gb.push_back(r.rx_blocked_seconds / gb);
  }
  // "build B, tx T, rx R, rest X" CPU-s/GB: where the bulk column's CPU goes (rest: gRPC,
  // the pump pool, the client's credit thread, the trainer's loop).
  std::string Terms() const {
    if (gbs.empty()) return "-";
    const double build = Median(&Column::build_per_gb), tx = Median(&Column::tx_per_gb),
                 rx = Median(&Column::rx_per_gb);
    return absl::StrFormat(
        "build %.3f, tx %.3f, rx %.3f, rest %.3f; %.1f steps/frame, %.1f context switches/"
        "frame, %.2f credit grants/frame (%.2f raises); off CPU s/GB: tx idle %.3f blocked %.3f, rx idle "
        "%.3f blocked %.3f",
        build, tx, rx, Median(&Column::cpu_per_gb) - build - tx - rx,
        Median(&Column::steps_per_frame),
        Median(&Column::switches_per_step) * Median(&Column::steps_per_frame),
        Median(&Column::grants_per_frame), Median(&Column::raises_per_frame),
        Median(&Column::tx_idle_per_gb),
        Median(&Column::tx_blocked_per_gb), Median(&Column::rx_idle_per_gb),
        Median(&Column::rx_blocked_per_gb));
  }
  double Median(std::vector<double> Column::*field) const { return sluice::Median(this->*field); }
  // "name n, ..." context switches per bulk frame by thread, over every run, largest first
  // (those under 0.05 a frame left out).
  std::string SwitchesByThread() const {
    std::vector<std::pair<double, std::string>> v;
    const double f = static_cast<double>(std::max<int64_t>(frames, 1));
    for (const auto& [name, n] : thread_switches) {
      if (static_cast<double>(n) / f >= 0.05) v.push_back({static_cast<double>(n) / f, name});
    }
    std::sort(v.rbegin(), v.rend());
    std::string out;
    for (const auto& [per_frame, name] : v) {
      absl::StrAppend(&out, out.empty() ? "" : ", ", name, " ", absl::StrFormat("%.2f", per_frame));
    }
    return out;
  }
  // "CPU-s/GB (of which building)".
  std::string Cpu() const {
    if (gbs.empty()) return "-";
    if (g_read) {
      return absl::StrFormat("%.3f (%.3f, read %.3f)", Median(&Column::cpu_per_gb),
                             Median(&Column::build_per_gb), Median(&Column::read_per_gb));
    }
    return absl::StrFormat("%.3f (%.3f)", Median(&Column::cpu_per_gb),
                           Median(&Column::build_per_gb));
  }
};

int Main(int argc, char** argv) {
  // The process as sluice-worker and sluicectl run it: their allocator settings
  // (core/util/malloc_retention.h) and no lock-order checks (mutex_deadlock_detection.h).
  RetainFreedMemory();
  SkipMutexDeadlockDetection();
  std::vector<size_t> sizes;
  for (absl::string_view s :
       absl::StrSplit(Flag(argc, argv, "sizes", "1024,16384,262144,1048576,4194304,16777216"), ',')) {
    uint64_t v = 0;
    if (absl::SimpleAtoi(s, &v)) sizes.push_back(v);
  }
  int64_t total = 0, replicas = 0, reps = 0, credits = 0, budget = 0, coalesce_us = 0;
  int64_t bulk_max_frame = 0;
  g_compact = Flag(argc, argv, "compact", "1") != "0";
  g_views = Flag(argc, argv, "views", "1") != "0";
  g_show_slices = Flag(argc, argv, "show_slices", "0") != "0";
  g_prefetch = Flag(argc, argv, "prefetch", "1") != "0";
  g_read = Flag(argc, argv, "read", "0") != "0";
  // --tx_zerocopy=1: the worker's gRPC sends with MSG_ZEROCOPY (slices of 16 KiB or more).
  const bool tx_zerocopy = Flag(argc, argv, "tx_zerocopy", "0") != "0";
  if (!absl::SimpleAtoi(Flag(argc, argv, "max_frame", "0"), &g_max_frame)) g_max_frame = -1;
  const bool shm = Flag(argc, argv, "shm", "1") != "0";
  const bool bulk = Flag(argc, argv, "bulk", "1") != "0";
  // --only_shm=1: only the shm column (profiling that path: perf record sees nothing else).
  const bool only_shm = shm && Flag(argc, argv, "only_shm", "0") != "0";
  const bool only_bulk = !only_shm && Flag(argc, argv, "only_bulk", "0") != "0";
  if (!absl::SimpleAtoi(Flag(argc, argv, "bytes", "2147483648"), &total) ||
      !absl::SimpleAtoi(Flag(argc, argv, "replicas", "1"), &replicas) ||
      !absl::SimpleAtoi(Flag(argc, argv, "reps", "3"), &reps) ||
      !absl::SimpleAtoi(Flag(argc, argv, "build_steps", "1"), &g_build_steps) ||
      !absl::SimpleAtoi(Flag(argc, argv, "worker_buffer", "0"), &g_worker_buffer) ||
      !absl::SimpleAtoi(Flag(argc, argv, "bulk_max_frame", "0"), &bulk_max_frame) ||
      !absl::SimpleAtoi(Flag(argc, argv, "credits", "16"), &credits) ||
      !absl::SimpleAtoi(Flag(argc, argv, "budget", "67108864"), &budget) ||
      !absl::SimpleAtoi(Flag(argc, argv, "coalesce_wait_us",
                             absl::StrCat(absl::ToInt64Microseconds(
                                 WorkerServiceOptions().coalesce_wait))),
                        &coalesce_us) ||
      replicas < 1 || reps < 1 || g_build_steps < 0 || g_build_steps > 2 || budget < 1 ||
      coalesce_us < 0 || g_worker_buffer < 0 ||
      bulk_max_frame < 0) {
    std::fprintf(stderr, "bad flags\n");
    return 2;
  }

  OneTask lookup;
  WorkerServiceOptions service_options;
  // 0: a frame takes what is ready when it is cut, plus what arrives while the previous frame
  // is being written; no timed wait.
  service_options.coalesce_wait = absl::Microseconds(coalesce_us);
  if (bulk_max_frame > 0) service_options.bulk_max_frame_bytes = static_cast<size_t>(bulk_max_frame);
  // --bulk_cc=NAME: the bulk sockets' congestion control (sluice-worker
  // --bulk_congestion_control); --tcp_cc=NAME: raw TCP's. Empty: the host's default.
  service_options.bulk_congestion_control = Flag(argc, argv, "bulk_cc", "");
  g_tcp_cc = Flag(argc, argv, "tcp_cc", "");
  g_tcp_as_bulk = Flag(argc, argv, "tcp_as_bulk", "0") != "0";
  g_bulk_inband = Flag(argc, argv, "bulk_inband", "1") != "0";
  if (!absl::SimpleAtoi(Flag(argc, argv, "raise_after_us", "-1"), &g_raise_after_us) ||
      !absl::SimpleAtoi(Flag(argc, argv, "raise_covered_us", "-1"), &g_raise_covered_us)) {
    std::fprintf(stderr, "bad --raise_after_us or --raise_covered_us\n");
    return 2;
  }
  if (!absl::SimpleAtoi(Flag(argc, argv, "tcp_away_us", "0"), &g_tcp_away_us) ||
      g_tcp_away_us < 0 || g_tcp_away_us > 1000000) {
    std::fprintf(stderr, "bad --tcp_away_us (0 to 1000000)\n");
    return 2;
  }
  for (const std::string& cc : {service_options.bulk_congestion_control, g_tcp_cc}) {
    if (absl::Status s = CheckBulkCongestionControl(cc); !s.ok()) {
      std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
      return 2;
    }
  }
  absl::StatusOr<std::unique_ptr<GrpcWorkerService>> service =
      GrpcWorkerService::Create(&lookup, service_options);
  if (!service.ok()) {
    std::fprintf(stderr, "%s\n", service.status().ToString().c_str());
    return 1;
  }
  StubCoordinator coordinator;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(service->get());
  builder.RegisterService(&coordinator);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_WRITE_BUFFER_SIZE, 8 << 20);
  if (tx_zerocopy) {
    builder.AddChannelArgument(GRPC_ARG_TCP_TX_ZEROCOPY_ENABLED, 1);
    builder.AddChannelArgument(GRPC_ARG_TCP_TX_ZEROCOPY_SEND_BYTES_THRESHOLD, 16 << 10);
  }
  builder.SetMaxSendMessageSize(-1);
  auto server = builder.BuildAndStart();
  const std::string address = absl::StrCat("127.0.0.1:", port);
  coordinator.set_worker(address);
  auto pool = std::make_shared<BufferPool>();

  std::vector<std::string> cpu_rows;
  if (only_bulk) {
    std::printf("| per-replica bytes | bulk | TCP | bulk/TCP | CPU-s/GB (build) | bulk CPU-s/GB "
                "by thread | bulk minor faults/GB | load (1-min) |\n"
                "|---|---|---|---|---|---|---|---|\n");
  } else {
    std::printf("| per-replica bytes | replicas | steps | raw GB/s | raw steps/s | client GB/s | "
                "client steps/s | bulk GB/s | bulk steps/s | shm GB/s | shm steps/s | TCP GB/s | "
                "raw/TCP | client/TCP | bulk/TCP | shm/TCP | raw viewed | memcpy GB/s | "
                "shm/memcpy | memcpy/TCP |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  }
  for (size_t size : sizes) {
    const int64_t step_bytes = static_cast<int64_t>(size) * replicas;
    const int64_t steps = std::max<int64_t>(total / step_bytes, 1);
    Column raw, client, bulk_column, mem, tcp, copy;
    std::vector<double> viewed;
    if (only_bulk) {
      RunClient(&lookup, address, size, replicas, std::min<int64_t>(steps, 64), budget,
                pool.get(), false, true);  // warm-up: connections, pools
    } else if (!only_shm) {
      RunSluice(&lookup, address, size, replicas, std::min<int64_t>(steps, 64), credits,
                pool.get());  // warm-up: connections, pools
      RunClient(&lookup, address, size, replicas, std::min<int64_t>(steps, 64), budget,
                pool.get(), false, false);
      if (bulk) {
        RunClient(&lookup, address, size, replicas, std::min<int64_t>(steps, 64), budget,
                  pool.get(), false, true);
      }
    }
    if (shm && !only_bulk) {
      RunClient(&lookup, address, size, replicas, std::min<int64_t>(steps, 64), budget,
                pool.get(), true, false);
    }
    // As bulk: the bulk frames' size at the default bulk_max_frame_bytes (the whole steps that
    // fit below 4 MiB with the frame's padding: 15 of 256 KiB, 3 of 1 MiB; one when larger).
    const int64_t bulk_frame = std::max<int64_t>(
        step_bytes, ((int64_t{4} << 20) - 1) / std::max<int64_t>(step_bytes, 1) * step_bytes);
    const int64_t tcp_chunk = g_tcp_as_bulk ? bulk_frame : std::max<int64_t>(step_bytes, 1 << 20);
    const int64_t tcp_messages = std::max<int64_t>(steps * step_bytes / tcp_chunk, 1);
    for (int64_t rep = 0; rep < reps; ++rep) {
      if (only_bulk) {
        bulk_column.Add(
            RunClient(&lookup, address, size, replicas, steps, budget, pool.get(), false, true));
        tcp.Add(RunTcp(static_cast<size_t>(tcp_chunk), tcp_messages));
        continue;
      }
      if (shm) {
        Result m =
            RunClient(&lookup, address, size, replicas, steps, budget, pool.get(), true, false);
        mem.Add(m);
        const ShmRingCounts counts = ProcessShmRingCounts();
        const ShmPoolCounts pooled = ProcessShmPoolCounts();
        const StepPlacementCounts placed = ProcessStepPlacementCounts();
        std::fprintf(stderr, "shm %zu: %.3f s, %lld steps; frames through rings so far %lld, "
                     "%lld of them in place; steps built in the ring %lld, copied there by "
                     "the producer %lld, copied out at stream ends %lld; segments created %lld, "
                     "warm %lld\n", size,
                     m.seconds, static_cast<long long>(m.steps),
                     static_cast<long long>(counts.frames_written),
                     static_cast<long long>(counts.frames_in_place),
                     static_cast<long long>(placed.steps_built_in_ring),
                     static_cast<long long>(placed.steps_copied_to_ring),
                     static_cast<long long>(placed.steps_copied_out),
                     static_cast<long long>(pooled.segments_created),
                     static_cast<long long>(pooled.segments_reused));
      }
      if (only_shm) continue;
      copy.Add(RunMemcpy(size * static_cast<size_t>(replicas), steps));
      Result s = RunSluice(&lookup, address, size, replicas, steps, credits, pool.get());
      Result c =
          RunClient(&lookup, address, size, replicas, steps, budget, pool.get(), false, false);
      client.Add(c);
      if (bulk) {
        bulk_column.Add(
            RunClient(&lookup, address, size, replicas, steps, budget, pool.get(), false, true));
      }
      Result t = RunTcp(static_cast<size_t>(tcp_chunk), tcp_messages);
      raw.Add(s);
      viewed.push_back(static_cast<double>(s.viewed_bytes) / std::max<double>(s.bytes, 1));
      tcp.Add(t);
    }
    double load = 0;
    getloadavg(&load, 1);
    cpu_rows.push_back(absl::StrFormat(
        "| %zu | %.2f | %s | %s | %s | %s | %s | %s | %.0f | %.0f | %.0f | %.0f / %.0f |", size,
        load, raw.Cpu(), client.Cpu(), bulk_column.Cpu(), mem.Cpu(), tcp.Cpu(), copy.Cpu(),
        client.Median(&Column::steps_per_cpu),
        mem.Median(&Column::steps_per_cpu), raw.Median(&Column::steps_per_cpu),
        client.Median(&Column::faults_per_gb), mem.Median(&Column::faults_per_gb)));
    if (only_bulk) {
      const double bg = bulk_column.Median(&Column::gbs), t = tcp.Median(&Column::gbs);
      std::printf("| %zu | %.2f GB/s, %.0f steps/s | %.2f GB/s | %.0f%% | bulk %s, TCP %s | "
                  "%s | %.0f | %.2f |\n",
                  size, bg, bulk_column.Median(&Column::sps), t, 100.0 * bg / t,
                  bulk_column.Cpu().c_str(), tcp.Cpu().c_str(), bulk_column.Terms().c_str(),
                  bulk_column.Median(&Column::faults_per_gb), load);
      std::fprintf(stderr, "%zu: context switches per bulk frame by thread: %s\n", size,
                   bulk_column.SwitchesByThread().c_str());
      std::fflush(stdout);
      continue;
    }
    if (only_shm) {
      std::printf("| %zu | shm only: %.2f GB/s, %.0f steps/s |\n", size,
                  mem.Median(&Column::gbs), mem.Median(&Column::sps));
      continue;
    }
    const double g = raw.Median(&Column::gbs), cg = client.Median(&Column::gbs),
                 t = tcp.Median(&Column::gbs);
    const double mg = mem.Median(&Column::gbs), ms = mem.Median(&Column::sps);
    const double bg = bulk_column.Median(&Column::gbs), bs = bulk_column.Median(&Column::sps);
    const double cp = copy.Median(&Column::gbs);
    std::printf("| %zu | %lld | %lld | %.2f | %.0f | %.2f | %.0f | %.2f | %.0f | %.2f | %.0f | "
                "%.2f | %.0f%% | %.0f%% | %.0f%% | %.0f%% | %.0f%% | %.2f | %.0f%% | %.2f |\n",
                size, static_cast<long long>(replicas), static_cast<long long>(steps), g,
                raw.Median(&Column::sps), cg, client.Median(&Column::sps), bg, bs, mg, ms, t,
                100.0 * g / t, 100.0 * cg / t, 100.0 * bg / t, 100.0 * mg / t,
                100.0 * Median(viewed), cp, 100.0 * mg / cp, cp / t);
    std::fflush(stdout);
  }
  // CPU per byte moved (every thread of this process; see the header comment for what each
  // column includes).
  if (only_bulk) cpu_rows.clear();  // in the rows above
  if (cpu_rows.empty()) {
    server->Shutdown();
    return 0;
  }
  std::printf("\n| per-replica bytes | load (1-min) | raw CPU-s/GB (build) | client CPU-s/GB "
              "(build) | bulk CPU-s/GB (build) | shm CPU-s/GB (build) | TCP CPU-s/GB | memcpy CPU-s/GB | "
              "client steps/CPU-s | shm steps/CPU-s | raw steps/CPU-s | minor faults/GB client / shm |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const std::string& row : cpu_rows) std::printf("%s\n", row.c_str());
  server->Shutdown();
  return 0;
}

}  // namespace
}  // namespace sluice

int main(int argc, char** argv) { return sluice::Main(argc, argv); }
