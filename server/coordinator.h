// Coordinator: the coordinator's logic, one method per RPC of proto::CoordinatorService
// (docs/SERVICE.md). Each method validates its request, decides the state updates it implies
// (proto/journal.proto, every id and choice made), applies them to the CoordinatorState under
// one mutex and answers from the state. No network: grpc_coordinator_service.h adapts it.
// Implemented by concern: coordinator.cc (construction, journal), coordinator_jobs.cc
// (datasets, job creation and planning, consumers, status), coordinator_workers.cc (liveness,
// task placement, worker heartbeats), coordinator_ranges.cc (range and split handout), with
// the request checks in job_options.h.
//
// Errors, by code: INVALID_ARGUMENT a malformed request (the message names the field, or
// carries the pipeline parser's message); NOT_FOUND an unknown dataset, job or task id;
// FAILED_PRECONDITION a wire version mismatch or a request that does not fit the state
// (GetSplit on a non-DYNAMIC job); UNAVAILABLE no live input worker yet (retry);
// RESOURCE_EXHAUSTED a caller identity over a per-identity quota (max_jobs_per_identity and
// the others, named in the message). A failed request changes nothing.
//
// Bounded state (docs/SERVICE.md, "Bounded state"): finished jobs, dead workers, abandoned
// jobs (idle_job_ttl) and unused datasets (unused_dataset_ttl) are collected; workers' task
// lists hold unfinished tasks only; GetStatus answers in pages.
//
// Liveness: a worker silent for `worker_timeout` (by the injected clock) is declared dead and
// its unfinished tasks go to the live worker with the fewest unfinished tasks (or wait,
// unassigned, for the next worker to heartbeat). Checked at the start of every RPC and by
// CheckWorkerLiveness(), which the server calls from a ticker.
//
// Failure policy: a task whose pipeline fails with an error that is not transient (a worker
// lists it in WorkerHeartbeatRequest.failed_tasks) fails its job at once with that error; a
// task with evidence that it kills workers (max_task_worker_deaths distinct workers died soon
// after being handed it, none producing a step of it) is quarantined and its job fails with
// FAILED_PRECONDITION naming it. A failed job is finished: its tasks are never handed out
// again, its workers are told to stop them, and every ClientHeartbeat of the job returns the
// error until the job is removed (finished_job_ttl).
//
// Planning (reading the data) never runs under the coordinator's lock: GetOrCreateJob plans
// between two lock sections; a RANGES job planned again after a restart is planned on the
// coordinator's own planner thread (one thread, started with it, joined by its destructor).
//
// Thread safety: every method may be called from any thread.
#ifndef SLUICE_SERVER_COORDINATOR_H_
#define SLUICE_SERVER_COORDINATOR_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/util/clock.h"
#include "core/util/thread_pool.h"
#include "proto/dataset.pb.h"
#include "sluice/dataset.h"
#include "proto/coordinator.pb.h"
#include "proto/journal.pb.h"
#include "core/data/distribute/global_order.h"
#include "server/assignment_watchers.h"
#include "server/consumer_claims.h"
#include "server/coordinator_state.h"
#include "server/heartbeat_versions.h"
#include "server/task_progress.h"
#include "server/task_planner.h"
#include "server/journal.h"
#include "server/job_load.h"
#include "server/journal_file.h"
#include "server/scaling_policy.h"
#include "server/worker_liveness.h"

namespace sluice {

struct CoordinatorOptions {
  // A worker that has not heartbeated for this long is declared dead.
  absl::Duration worker_timeout = absl::Seconds(10);
  // DYNAMIC jobs with split_size 0 on a batched dataset: source elements per split, in global
  // batches (whole batches, so that splits do not cut batches short).
  int64_t split_batches = 8;
  // DYNAMIC jobs with split_size 0 on an unbatched dataset: source elements per split.
  int64_t split_elements = 1024;
  // DYNAMIC jobs in independent mode: give each worker that registers while the job runs a
  // task of its own. Off because consumers read the tasks that exist when their iterator
  // starts (docs/SERVICE.md): a task nobody reads would take splits and never finish.
  // Coordinated jobs never grow (consumers could see a new task at different rounds).
  bool dynamic_tasks_for_new_workers = false;
  // SHARDING_RANGES: unfinished ranges of one job a live worker holds at most (new ranges are
  // made as workers have room; a reassigned range ignores it). At least 1.
  int64_t ranges_per_worker = 2;
  // Failure policy (docs/SERVICE.md, "Failure policy"): a task is quarantined (its job fails
  // with FAILED_PRECONDITION naming the task, the workers and how each died) on evidence that
  // it kills workers: this many distinct workers declared dead while running it, each of
  // them within task_death_window of being handed the task and without having reported a
  // step of it, with no step of it produced anywhere in between (a step produced clears the
  // count). A worker that dies while making progress (preempted, killed at random) is no
  // evidence; neither is a drained worker. 0: never quarantine.
  int64_t max_task_worker_deaths = 3;
  // See max_task_worker_deaths: a worker whose last heartbeat came later than this after it
  // was handed a task is no evidence against the task, progress or not.
  absl::Duration task_death_window = absl::Seconds(60);
  // Consumers that leave (docs/SERVICE.md): a consumer of a coordinated job with several
  // consumers that has not sent a ClientHeartbeat for this long (counted from the job's
  // creation, or from the coordinator's start, before its first) is declared gone, and the
  // workers holding the job's tasks are told to stop holding steps for it
  // (WorkerHeartbeatResponse.gone_consumers). A heartbeat brings it back. Zero or less: never.
  // It also ends jobs left without consumers (docs/SERVICE.md, "Jobs left without
  // consumers"): an unfinished job of any kind that some consumer has sent a ClientHeartbeat
  // of (since the coordinator's start) and that no consumer has asked about (GetOrCreateJob,
  // ClientHeartbeat, GetElementSpec by job id) for this long has no consumer left: it fails
  // with FAILED_PRECONDITION naming consumer_timeout, its workers stop its tasks (and free
  // their steps), and it is removed finished_job_ttl later. A job no consumer has read yet
  // waits for idle_job_ttl instead. Checked by CheckWorkerLiveness(). A consumer that stops
  // cleanly releases its place instead (ReleaseConsumer), which ends an anonymous job at once.
  absl::Duration consumer_timeout = absl::Seconds(60);
  // A finished job is removed this long after the coordinator saw it finish; requests naming
  // it are then NOT_FOUND and a named job of that name can be created again.
  absl::Duration finished_job_ttl = absl::Minutes(5);
  // A worker dead (or drained) this long that no task names any more (its finished tasks'
  // jobs were removed) is forgotten: removed from the state, the status and every table, so
  // that a fleet whose machines come and go does not grow the coordinator. Checked by
  // CheckWorkerLiveness() (the server's ticker). Its address registers anew, as a new worker.
  absl::Duration dead_worker_ttl = absl::Minutes(10);
  // How often the server calls CheckWorkerLiveness() (CoordinatorServer's ticker). When set,
  // the coordinator measures its own loop lag: liveness checks (the ticker's, and every
  // request's) more than twice this apart mean that the coordinator itself was not running
  // (its process paused or starved of CPU, its lock held by a slow request), and the time
  // beyond one interval is not counted as any worker's silence, so that a coordinator stall
  // never declares deaths. Zero: not measured (tests that step a fake clock by whole
  // timeouts without ticks).
  absl::Duration liveness_interval = absl::ZeroDuration();
  // Bounded state (docs/SERVICE.md, "Bounded state"). An unfinished job of any kind (named or
  // anonymous, any number of consumers) that no consumer has asked about (GetOrCreateJob,
  // ClientHeartbeat, GetElementSpec by job id) for this long is abandoned: it fails with
  // FAILED_PRECONDITION naming idle_job_ttl, its workers stop its tasks, and it is removed
  // finished_job_ttl later (its name then free). Counted from its creation, or from the
  // coordinator's start for a job replayed from the journal. Checked by CheckWorkerLiveness().
  // Zero or less: never.
  absl::Duration idle_job_ttl = absl::Minutes(10);
  // A dataset no job names (its last job was removed, or none was ever created) for this long
  // is removed, and its owner's quota freed; registering the same graph again gives it back
  // with the same id. Checked by CheckWorkerLiveness(). Zero or less: never.
  absl::Duration unused_dataset_ttl = absl::Minutes(10);
  // Per-identity quotas (docs/SERVICE.md, "Admission"): what one caller identity (the `caller`
  // of RegisterDataset and GetOrCreateJob) may hold at once. Over one, the request fails with
  // RESOURCE_EXHAUSTED naming the limit and its value, and changes nothing. 0: no limit.
  int64_t max_jobs_per_identity = 1000;  // unfinished jobs it created
  int64_t max_datasets_per_identity = 1000;  // datasets it registered first
  int64_t max_dataset_bytes_per_identity = int64_t{256} << 20;  // their serialized graphs
  // SHARDING_RANGES: a job whose next range cannot be made (its data changed after a
  // restart, a file went missing) is retried this many times in all, ranges_retry_interval
  // apart, then fails (FAILED_PRECONDITION... the planner's code and message), visibly in
  // GetStatus and to its consumers, and is removed finished_job_ttl later. At least 1.
  int64_t ranges_plan_attempts = 3;
  absl::Duration ranges_retry_interval = absl::Seconds(10);
  // GetStatus: entries (workers, then jobs) per page when the request leaves page_size 0, and
  // the most a request may ask for.
  int64_t status_page_size = 100;
  int64_t max_status_page_size = 1000;
  // Assignment watches (WatchAssignment, docs/SERVICE.md, "Assignment watch"): the longest a
  // watch waits for a change before it is answered (a request's wait_ms is capped by it; the
  // ticker expires watches, so one may last up to a liveness interval longer), and the most
  // watches waiting at once (more are refused with RESOURCE_EXHAUSTED; their workers fall back
  // to their heartbeats).
  absl::Duration max_assignment_watch = absl::Seconds(30);
  int64_t max_assignment_watches = 4096;
  // Test only: called by GetOrCreateJob, without the coordinator's lock, right before it plans
  // a new job (which may read the data), with the job's dataset id. Tests block here to show
  // that other requests are served while a job plans.
  std::function<void(absl::string_view dataset_id)> before_planning;
  // Test only: called on the coordinator's planner thread, without its lock, right before it
  // plans a RANGES job again (after a restart), with the job's id. Tests block here to show
  // that heartbeats and other jobs' requests are served while a job re-plans.
  std::function<void(int64_t job_id)> before_replanning;
  // Time source for heartbeat ages. Borrowed: must outlive the Coordinator. nullptr: the
  // real clock.
  Clock* clock = nullptr;
  // Receives one line per significant event (worker registered or dead, job created, task
  // assigned, job finished). Unset: the line goes to stderr.
  std::function<void(absl::string_view)> log;
  // Journal and restart (docs/SERVICE.md), through Create() only: every state change is
  // appended to a journal in this directory and synced before the request is answered, and
  // Create() replays it. Empty: no journal, the state lives in memory only.
  std::string work_dir;
  // Journal records between snapshots of the whole state (which keep replay short).
  int64_t snapshot_every = 1000;
  // The journal's file system. Borrowed: must outlive the Coordinator. nullptr: the real one.
  JournalFileSystem* journal_fs = nullptr;
  // Autoscaling (docs/AUTOSCALING.md): the policy's targets and bounds, and how often it
  // decides (each decision looks at the reports since the previous one; checked by
  // CheckWorkerLiveness(), the server's ticker, so an interval shorter than the ticker's
  // period is the period).
  ScalingPolicyOptions scaling;
  absl::Duration scaling_interval = absl::Seconds(10);
};

class Coordinator {
 public:
  // Without work_dir: a coordinator with an empty state. With options.work_dir, opens the
  // journal there and replays it: the state it had when its last request was answered.
  // DATA_LOSS naming the file and byte offset for a corrupt journal (a torn last record is
  // dropped, with a log line); the file system's error otherwise. RESOURCE_EXHAUSTED "cannot
  // start a thread for the coordinator's replanner ..." when the system refuses its thread
  // (core/util/start_thread.h).
  static absl::StatusOr<std::unique_ptr<Coordinator>> Create(CoordinatorOptions options = {});
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;
  // Waits for a re-plan already running (without starting those still queued).
  ~Coordinator();

  // Registers a DatasetDef or a pipeline expression; same graph, same id ("ds-" + a prefix of
  // its fingerprint). INVALID_ARGUMENT with the parser's or validator's message for a bad
  // graph, or when neither is set.
  // `caller` (the caller identity, server/caller_identity.h) owns a dataset it registers
  // first; RESOURCE_EXHAUSTED when that would put it over max_datasets_per_identity or
  // max_dataset_bytes_per_identity.
  absl::Status RegisterDataset(const proto::RegisterDatasetRequest& request,
                               proto::RegisterDatasetResponse* response,
                               absl::string_view caller = "");
  // Returns the job named job_name, or creates it (an empty name always creates an anonymous
  // job) with its tasks: K static tasks (num_tasks, or one per live worker), or one DYNAMIC
  // task per live worker. INVALID_ARGUMENT for bad options, for a named job that exists with
  // other options (listing the fields), for an unbatched dataset, for FILE sharding with too
  // few files; NOT_FOUND for an unknown dataset; UNAVAILABLE with no live worker;
  // RESOURCE_EXHAUSTED when creating it would put `caller` over max_jobs_per_identity (getting
  // an existing named job is never refused). `cancelled` (when set) says whether the caller
  // gave up: checked after planning, which may take long, so that a cancelled call creates
  // nothing; CANCELLED "the caller cancelled the call" then.
  absl::Status GetOrCreateJob(const proto::GetOrCreateJobRequest& request,
                              proto::GetOrCreateJobResponse* response,
                              absl::string_view caller = "",
                              const std::function<bool()>& cancelled = nullptr);
  // Per-replica spec: DistributedPerReplicaSpec(dataset, num_consumers, R) in coordinated mode,
  // (dataset, 1, R) in independent mode.
  absl::Status GetElementSpec(const proto::GetElementSpecRequest& request,
                              proto::GetElementSpecResponse* response);
  // Registers the worker on its first heartbeat (or revives a dead one), records finished
  // tasks, and answers with the tasks it should start and those it should stop. A heartbeat
  // counts for liveness from its arrival, before it waits for the coordinator's lock: a slow
  // request ahead of it (planning a job) cannot make it look late.
  absl::Status WorkerHeartbeat(const proto::WorkerHeartbeatRequest& request,
                               proto::WorkerHeartbeatResponse* response);
  // Test only: a heartbeat from `worker_address` arrived now and waits for the lock.
  void TEST_NoteHeartbeatArrival(const std::string& worker_address) {
    NoteHeartbeatArrival(worker_address);
  }
  absl::Status ClientHeartbeat(const proto::ClientHeartbeatRequest& request,
                               proto::ClientHeartbeatResponse* response);
  // A consumer done with its job gives up its place (proto ReleaseConsumerRequest; docs/
  // SERVICE.md, "Consumers that release their job"): journaled (ConsumerReleasedUpdate), it no
  // longer counts as the job's consumer (a coordinated job's workers stop holding steps for
  // it, as for one declared gone), and once every consumer of an anonymous, unshared job has
  // released it, the job ends CANCELLED "job N was released by its consumers", marked released
  // (FailJobUpdate.released, JobStatus.released: not a failure), and its workers stop its
  // tasks. A named job (its consumers may rejoin) or a shared one (other trainers may join)
  // only notes the activity: it ends consumer_timeout later, as before.
  // OK, changing nothing, for a released consumer, a finished job or one finished and
  // removed. NOT_FOUND for a job this coordinator never had, INVALID_ARGUMENT for an index
  // the job does not have, PERMISSION_DENIED for a caller that does not hold the consumer
  // (its secret is 0, or not the one ClientHeartbeat handed out: server/consumer_claims.h).
  absl::Status ReleaseConsumer(const proto::ReleaseConsumerRequest& request,
                               proto::ReleaseConsumerResponse* response);
  // Assignment watch (docs/SERVICE.md, "Assignment watch"): calls done(true) as soon as the
  // assignment of the worker at request.worker_address changes after request.known_version
  // (at once when it already has, or when known_incarnation is not the coordinator's), and
  // done(false) when the wait (wait_ms, at most max_assignment_watch) runs out, a newer watch
  // of the worker supersedes it, it is cancelled or the watches close. `done` runs exactly
  // once, possibly under the coordinator's lock (it must not block nor call back). Returns the
  // watch's id for CancelAssignmentWatch (0: answered already). INVALID_ARGUMENT for a bad
  // request, NOT_FOUND for a worker not registered, FAILED_PRECONDITION for a process
  // incarnation that is not the worker's current one, RESOURCE_EXHAUSTED over
  // max_assignment_watches, UNAVAILABLE once closed; `done` is not called on error.
  absl::StatusOr<uint64_t> WatchAssignment(const proto::WatchAssignmentRequest& request,
                                           AssignmentWatchers::Done done);
  // Answers the watch `id` with false if it still waits (its caller went away).
  void CancelAssignmentWatch(uint64_t id) { watchers_.Cancel(id); }
  // Answers every watch with false and refuses new ones (the server shuts down).
  void CloseAssignmentWatches() { watchers_.Close(); }
  // Watches waiting now (tests, /metrics).
  size_t assignment_watches() const { return watchers_.size(); }
  // DYNAMIC jobs: the task's next split, or end_of_splits. FAILED_PRECONDITION for another
  // policy or a finished task.
  absl::Status GetSplit(const proto::GetSplitRequest& request, proto::GetSplitResponse* response);
  // One page of the status: up to page_size entries (status_page_size when 0, at most
  // max_status_page_size), the workers by id then the jobs by id, from page_token (empty:
  // the first); next_page_token is empty on the last page. Work and time under the lock grow
  // with the page, not with the whole state. INVALID_ARGUMENT for a token this coordinator
  // did not make or a negative page_size.
  absl::Status GetStatus(const proto::GetStatusRequest& request,
                         proto::GetStatusResponse* response);

  // Declares dead the workers silent for worker_timeout and reassigns their tasks; removes
  // the jobs finished for finished_job_ttl and the workers dead for dead_worker_ttl; fails
  // the jobs idle for idle_job_ttl; removes the datasets unused for unused_dataset_ttl;
  // retries the RANGES jobs waiting to retry their plan; makes the autoscaling decision once
  // per scaling_interval (GetStatusResponse.scaling, JobStatus.load).
  void CheckWorkerLiveness();

  // Test hook (and metrics): the sizes of every table that grows with workers, jobs, tasks
  // and consumers, so that tests can see them return to their baseline once jobs finish and
  // workers die (garbage collection).
  struct TableSizes {
    size_t workers = 0, jobs = 0, tasks = 0;  // in the state
    size_t heartbeat_arrivals = 0, liveness = 0, dead_since = 0, finished_at = 0;
    size_t consumer_seen = 0, ranges_jobs = 0, failed_jobs = 0;
    size_t completed_by = 0;  // tasks that some consumer reported read to their end
    size_t progress_tasks = 0, version_jobs = 0, version_workers = 0;
    size_t task_runs = 0;  // the failure policy's view of unfinished tasks' current runs
    size_t datasets = 0, owners = 0;  // in the state (OwnerUsage entries)
    size_t job_activity = 0, unused_since = 0;
    size_t max_worker_tasks = 0;  // the longest Worker::task_ids
    bool operator==(const TableSizes& o) const;
  };
  TableSizes TEST_TableSizes();
  // Test hook: waits until no RANGES job waits for or runs a re-plan (replans_), i.e. until
  // every re-plan requested so far was applied or discarded.
  void TEST_AwaitReplans();
  // Test hook: with a journal, waits until `n` requests wait for a journal sync that another
  // one is running (group commit).
  void TEST_AwaitSyncWaiters(int n);

  const CoordinatorOptions& options() const { return options_; }

  // The whole state, as CoordinatorState::Snapshot() (for tests and tools).
  proto::StateSnapshot Snapshot();

 private:
  // Create's: an empty state, the journal not open yet; owns `replanner` (started).
  Coordinator(CoordinatorOptions options, std::unique_ptr<ThreadPool> replanner);

  // Holds mu_ for a request. On destruction releases it, then waits until every journal record
  // written so far is durable (group commit: requests that wait together share one sync, and
  // none holds mu_ while the disk works), so that the answer never shows state a crash could
  // lose, and writes a snapshot the request started (pending_snapshot_), also without mu_. A
  // failed sync cannot be undone (the kernel may have dropped the unsynced pages): the
  // coordinator logs it and exits, and a restart replays the journal.
  class DurableLock {
   public:
    explicit DurableLock(Coordinator* c) ABSL_EXCLUSIVE_LOCK_FUNCTION(c->mu_);
    ~DurableLock() ABSL_UNLOCK_FUNCTION();
    DurableLock(const DurableLock&) = delete;
    DurableLock& operator=(const DurableLock&) = delete;

   private:
    Coordinator* const c_;
    // Log lines written while mu_ is held, emitted once it is released (Log()): stderr can
    // block (a full pipe, a slow terminal), and every request would wait behind it.
    std::vector<std::string> log_lines_;
    std::vector<std::string>* outer_log_lines_ = nullptr;
  };

  // Collects the updates of one request into one journal record (a request that creates a
  // job and its tasks): declared right after the lock, Commit() before answering. A batch
  // destroyed uncommitted, or whose Commit fails, is undone (the state is replayed from the
  // journal), so that the failed request changes nothing. One event (a worker's death, a
  // task's end that ends its job) is one batch too, so that a retry after a failed write
  // applies it once. A batch opened inside another joins it (its Commit and destruction do
  // nothing; the outer one writes or undoes all): an inner batch's error must fail the outer.
  class JournalBatch {
   public:
    explicit JournalBatch(Coordinator* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu_);
    ~JournalBatch();
    absl::Status Commit();

   private:
    Coordinator* const c_;
    const bool outer_;  // false: joined an open batch
    bool done_ = false;
  };

  // The one place updates take effect. With a journal, the update is appended (and synced)
  // first, or collected into the open batch; a failed append is returned and changes nothing.
  absl::Status ApplyLocked(const proto::Update& update) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a record was appended: a snapshot when one is due.
  void MaybeSnapshotLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Replaces the state by the journal's (undoing applied updates that were not journaled).
  void ReloadFromJournalLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckLivenessLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stamps a heartbeat's arrival (heartbeat_arrivals_); called before mu_ is taken.
  void NoteHeartbeatArrival(const std::string& worker_address) ABSL_LOCKS_EXCLUDED(arrivals_mu_);
  // Removes the jobs finished at least finished_job_ttl ago (by clock_).
  absl::Status CollectFinishedJobsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes the workers dead at least dead_worker_ttl ago that no task names (by clock_).
  absl::Status CollectDeadWorkersLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails the unfinished jobs no consumer asked about for idle_job_ttl, or, once a consumer
  // heartbeated, for consumer_timeout (job_activity_).
  absl::Status FailIdleJobsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes the datasets unused for unused_dataset_ttl (unused_since_).
  absl::Status CollectUnusedDatasetsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A consumer asked about `job_id` now (idle_job_ttl); `heartbeat`: with a ClientHeartbeat
  // (consumer_timeout applies from then on).
  void NoteJobActivityLocked(int64_t job_id, bool heartbeat = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RESOURCE_EXHAUSTED naming the limit when `caller` holds `held` of a quota `limit`
  // (option and flag `name`) and asks for `more`; OK otherwise (or with no limit).
  static absl::Status CheckQuota(absl::string_view method, absl::string_view caller,
                                 absl::string_view name, int64_t held, int64_t more,
                                 int64_t limit);
  // SHARDING_RANGES: makes the next ranges of every running ranges job, in range order, on
  // the live workers with room (fewest unfinished ranges of the job first). A job whose ranges
  // cannot be planned (its data changed after a restart, say) fails alone (failed_jobs_); the
  // others go on. A job with no plan here (after a restart) is skipped and re-planned on the
  // planner thread without the lock (RequestReplanLocked); its ranges are made once the plan
  // is applied. Errors: only those that concern every job (the journal).
  absl::Status MakeRangesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A draining worker: it is declared dead now and its tasks reassigned.
  absl::Status DrainWorkerLocked(int64_t worker_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // NOT_FOUND for a job id that does not exist (saying so when it was removed).
  absl::Status JobNotFound(absl::string_view field, int64_t job_id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives every unassigned unfinished task to the least loaded live worker, if any.
  absl::Status AssignWaitingTasksLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a worker (re)registers: waiting tasks, and with dynamic_tasks_for_new_workers a new
  // task of each running independent DYNAMIC job.
  absl::Status OnWorkerAvailableLocked(int64_t worker_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The live worker with the fewest unfinished tasks (lowest id on ties), skipping those in
  // `excluded`; 0 if none.
  int64_t LeastLoadedWorkerLocked(const absl::flat_hash_set<int64_t>& excluded = {}) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t NumLiveWorkersLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `range` (SHARDING_RANGES) sets first_step/num_steps; skip_steps is the DATA resume.
  absl::Status CreateTaskLocked(int64_t job_id, const proto::DatasetDef& dataset,
                                bool step_sharded, int64_t worker_id, int64_t skip_steps = 0,
                                const GlobalRange* range = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status FinishTaskLocked(int64_t task_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // GetOrCreateJob for a job that exists: INVALID_ARGUMENT if `options` differ.
  absl::Status ExistingJobLocked(const CoordinatorState::Job& job,
                                 const proto::JobOptions& options,
                                 proto::GetOrCreateJobResponse* response) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A shared job (options.cross_trainer): admits `trainer_id` (a TrainerJoinedUpdate) unless
  // it joined before; RESOURCE_EXHAUSTED naming it beyond the job's max_trainers,
  // FAILED_PRECONDITION naming it if a worker dropped it (TrainerDroppedUpdate). Nothing for
  // an empty id (GetOrCreateJob checked that the request and the job agree).
  absl::Status AdmitTrainerLocked(int64_t job_id, absl::string_view trainer_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Why a job ends before its data does (FailJobUpdate.released).
  enum class JobEnd {
    kFailed,    // a task's error, a quarantine, a plan that cannot be made, no consumer left
    kReleased,  // its last consumer released it (ReleaseConsumer)
  };
  // Ends an unfinished job with `error` (FailJobUpdate) for the reason `why`, which is what
  // status shows and the log says ("released by its consumers" or "failed"), whatever the
  // error's code; a finished job is left as it is.
  absl::Status FailJobLocked(int64_t job_id, JobEnd why, const absl::Status& error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Declares `worker_id` dead (not drained): records the loss of each unfinished task it
  // held, with the evidence against the task when the death is some (PoisonEvidenceLocked),
  // then fails the jobs of the tasks whose evidence reached max_task_worker_deaths.
  absl::Status WorkerDiedLocked(int64_t worker_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Failure policy: why the death of `worker_id`, last heard from at `last_heartbeat`, is
  // evidence against `task_id` (it had been handed the task within task_death_window before,
  // and reported no step of it); empty when it is none.
  std::string PoisonEvidenceLocked(int64_t task_id, int64_t worker_id,
                                   std::optional<absl::Time> last_heartbeat) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Failure policy, from a worker's heartbeat: the tasks it runs that it has now been handed
  // (the answer lists them, or it knows them) and those it produced a step of. A step clears
  // a task's evidence (TaskProgressedUpdate, journaled only when there was some).
  absl::Status NoteTaskRunsLocked(int64_t worker_id, const proto::WorkerHeartbeatRequest& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Failure policy: whether `task`'s current worker reported a step of it since it was
  // handed the task (TaskInfo.progressed_on_worker).
  bool ProgressedOnWorkerLocked(const CoordinatorState::Task& task) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Keeps runs_ in step with `update`, right before it is applied.
  void TrackTaskRunsLocked(const proto::Update& update) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A worker's report that `failure.task_id` failed deterministically. The error may be local
  // to that worker (RESOURCE_EXHAUSTED caused by another job, its data root, a plugin it
  // lacks): the task moves to the least loaded live worker that has not failed it
  // (task_failures_). The job fails when a second worker reports the same error (code and
  // message), or when no live worker is left that has not failed the task.
  absl::Status TaskFailedLocked(int64_t worker_id, const proto::TaskFailure& failure)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A worker gave `failure.task_id` back after a transient error (WorkerHeartbeatRequest.
  // handed_back_tasks): the task is assigned again, to another live worker when there is one,
  // with no death and no evidence counted against it. A stale report is ignored.
  absl::Status TaskHandedBackLocked(int64_t worker_id, const proto::TaskFailure& failure)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves unfinished `task_id` to `worker_id` (AssignTaskUpdate) and logs why.
  absl::Status MoveTaskLocked(int64_t task_id, int64_t worker_id, absl::string_view why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The error consumers of `job` get (its failure, or a RANGES planning failure); OK if none.
  absl::Status JobErrorLocked(const CoordinatorState::Job& job) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Dataset> JobDatasetLocked(const CoordinatorState::Job& job) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  proto::TaskDef TaskDefLocked(const CoordinatorState::Task& task) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FillTaskInfosLocked(const CoordinatorState::Job& job,
                           google::protobuf::RepeatedPtrField<proto::TaskInfo>* out) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string WorkerNameLocked(int64_t worker_id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One log line (options_.log, or stderr). Under a DurableLock on this thread the line is
  // kept and emitted once the lock is released, in order.
  void Log(absl::string_view line) const;
  void EmitLog(absl::string_view line) const;

  const CoordinatorOptions options_;
  Clock* const clock_;

  absl::Mutex mu_;
  CoordinatorState state_ ABSL_GUARDED_BY(mu_);
  // Not state: when each worker last heartbeated (by clock_), the live ones ordered by it. A
  // worker the state has alive but this does not watch (after a restart or a reload) counts
  // from the moment it is first noticed (liveness_synced_ false: CheckLivenessLocked looks).
  WorkerLiveness liveness_ ABSL_GUARDED_BY(mu_);
  bool liveness_synced_ ABSL_GUARDED_BY(mu_) = false;
  // When CheckLivenessLocked last ran (by clock_), to see the coordinator's own stalls
  // (options_.liveness_interval).
  std::optional<absl::Time> last_liveness_check_ ABSL_GUARDED_BY(mu_);
  // When each worker address's latest heartbeat arrived, stamped before mu_ is taken (taken
  // alone, or after mu_): CheckLivenessLocked counts a heartbeat still queued for mu_.
  absl::Mutex arrivals_mu_ ABSL_ACQUIRED_AFTER(mu_);
  absl::flat_hash_map<std::string, absl::Time> heartbeat_arrivals_ ABSL_GUARDED_BY(arrivals_mu_);
  // Not state: the workers' per-task progress reports, for GetStatus (thread-safe itself).
  TaskProgressTable progress_;
  // Not state: when each finished job was first seen finished (by clock_), for the GC: every
  // finished job has an entry, so that CollectFinishedJobsLocked looks at these only, not at
  // every job on every request. A job the state has finished that this coordinator did not
  // see finish (after a restart or a reload) is stamped when first noticed (finished_synced_
  // false: CollectFinishedJobsLocked walks every job once).
  absl::flat_hash_map<int64_t, absl::Time> finished_at_ ABSL_GUARDED_BY(mu_);
  bool finished_synced_ ABSL_GUARDED_BY(mu_) = false;
  // Not state: when each dead worker was declared dead or drained (or first seen dead after a
  // restart), for the GC.
  absl::flat_hash_map<int64_t, absl::Time> dead_since_ ABSL_GUARDED_BY(mu_);
  // Not state: each worker's process incarnation (WorkerHeartbeatRequest.process_incarnation)
  // and the ones it replaced (the last kRetiredIncarnations), whose heartbeats are refused.
  // After a restart the first heartbeat of each worker is taken as its incarnation.
  struct WorkerIncarnations {
    uint64_t current = 0;
    std::vector<uint64_t> retired;
  };
  static constexpr size_t kRetiredIncarnations = 8;
  absl::flat_hash_map<int64_t, WorkerIncarnations> incarnations_ ABSL_GUARDED_BY(mu_);
  // Not state: which process speaks for each consumer (ClientHeartbeat's consumer_secret).
  ConsumerClaims consumer_claims_ ABSL_GUARDED_BY(mu_);
  // A heartbeat's process incarnation against the worker's: OK and *restarted false for the
  // current one (or one of 0, or the first one seen); *restarted true for a new one (recorded;
  // the caller declares the old process dead); FAILED_PRECONDITION for a retired one.
  absl::Status CheckIncarnationLocked(int64_t worker_id, const std::string& address,
                                      uint64_t incarnation, bool* restarted)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Not state: when each consumer of each coordinated job last sent a ClientHeartbeat (by
  // clock_), indexed by consumer; made when the coordinator first needs it (every consumer
  // counts from then). Those declared gone are logged once (gone_logged_).
  struct ConsumerSeen {
    std::vector<absl::Time> last;
    std::vector<bool> gone_logged;
  };
  ConsumerSeen& ConsumerSeenLocked(const CoordinatorState::Job& job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fills response->gone_consumers for the coordinated jobs of worker_id's unfinished tasks.
  void FillGoneConsumersLocked(int64_t worker_id, proto::WorkerHeartbeatResponse* response)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::flat_hash_map<int64_t, ConsumerSeen> consumer_seen_ ABSL_GUARDED_BY(mu_);
  // True if consumer `c` of `job` (coordinated, 2 or more consumers) released its place
  // (ReleaseConsumer), or (consumer_timeout set) has sent no ClientHeartbeat for
  // consumer_timeout: declared gone.
  bool ConsumerGoneLocked(const CoordinatorState::Job& job, int64_t c)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Finishes the unfinished task `task_id` when every consumer of its job has reported reading
  // it to its end (Task::completed_by, journaled), or when at least one has and each of the
  // others is declared gone (ConsumerGoneLocked). Sets *finished when it did.
  absl::Status FinishIfConsumersDoneLocked(int64_t task_id, bool* finished)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Consumer `consumer` of the task's job has read unfinished task `task_id` to its end (its
  // own report, or a worker's TaskProgress.ended_consumers): journaled once
  // (ConsumerCompletedTaskUpdate), then FinishIfConsumersDoneLocked. A finished or unknown
  // task, or a consumer index outside the job's, is ignored.
  absl::Status ConsumerCompletedTaskLocked(int64_t task_id, int64_t consumer, bool* finished)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ConsumerCompletedTaskLocked for each consumer in the request's
  // TaskProgress.ended_consumers (coordinated jobs' unfinished tasks only), for the tasks
  // worker `worker_id` holds or held (lost_on_workers): a worker speaks only for the
  // consumers it served, never for another worker's task.
  absl::Status RecordEndedConsumersLocked(const proto::WorkerHeartbeatRequest& request,
                                          int64_t worker_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Journals a TrainerDroppedUpdate for each trainer the request's
  // TaskProgress.dropped_trainer_ids name that is still a trainer of the task's job, for the
  // tasks worker `worker_id` holds or held (lost_on_workers). Ids the job does not have as a
  // trainer (dropped before, never admitted) are ignored: the worker repeats its list in
  // every heartbeat, and it is not trusted.
  absl::Status RecordDroppedTrainersLocked(const proto::WorkerHeartbeatRequest& request,
                                           int64_t worker_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Not state: each ranges job's dataset, plan and cut (a function of its options, which are
  // kept to tell an entry from one left by a request that failed and was undone).
  struct RangesJob {
    proto::JobOptions options;
    Dataset dataset;
    GlobalOrderPlan plan;
    RangeCut cut;
  };
  // `job`'s entry in ranges_jobs_, or nullptr when it has none (or a stale one).
  const RangesJob* CachedRangesJobLocked(const CoordinatorState::Job& job) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The graph of `job`'s next range (the one after its last made), and its place in *range.
  absl::StatusOr<Dataset> NextRangeLocked(const CoordinatorState::Job& job, const RangesJob& rj,
                                          GlobalRange* range) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::flat_hash_map<int64_t, std::unique_ptr<RangesJob>> ranges_jobs_ ABSL_GUARDED_BY(mu_);
  // Re-planning a RANGES job (after a restart: planning reads the data, a remote listing or a
  // large record index) off the lock. RequestReplanLocked copies what the plan needs and
  // schedules it on replanner_ (once per job: replans_ holds the job's ticket while it waits
  // or runs); ReplanRangesJob plans without the lock, then ApplyReplanLocked installs the plan
  // and makes the job's ranges, only if the ticket is still the job's (not removed meanwhile)
  // and the job is unfinished with the same options; otherwise the plan is discarded (the next
  // MakeRangesLocked asks again if the job still needs one). A failed plan counts as a failed
  // attempt (failed_jobs_).
  void RequestReplanLocked(const CoordinatorState::Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReplanRangesJob(int64_t job_id, uint64_t ticket, const proto::DatasetDef& dataset_def,
                       const proto::JobOptions& options, int64_t steps_per_epoch)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status ApplyReplanLocked(int64_t job_id, uint64_t ticket,
                                 const proto::JobOptions& options,
                                 absl::StatusOr<std::unique_ptr<RangesJob>> planned)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records a failed attempt to make `job_id`'s next range (RangeRetry), failing the job
  // after the last (ranges_plan_attempts).
  absl::Status RangesAttemptFailedLocked(int64_t job_id, const absl::Status& error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::flat_hash_map<int64_t, uint64_t> replans_ ABSL_GUARDED_BY(mu_);
  uint64_t last_replan_ticket_ ABSL_GUARDED_BY(mu_) = 0;
  // Set by the destructor: a re-plan still queued does not start.
  std::atomic<bool> stopping_{false};
  // A new job's plan, made without the lock (GetOrCreateJob): its CreateJobUpdate but for the
  // id and name, its static tasks, its RANGES plan.
  struct JobPlan {
    proto::CreateJobUpdate create;
    std::vector<TaskPlan> tasks;
    std::unique_ptr<RangesJob> ranges_job;
    int64_t skip_steps = 0;
    bool dynamic = false;
  };
  // Needs no lock: reads only its arguments and options_ (and the data, to plan).
  absl::StatusOr<JobPlan> PlanJob(const proto::DatasetDef& dataset_def,
                                  const proto::JobOptions& options, int64_t live) const;
  // RANGES jobs whose last attempt to make a range failed, waiting to retry (TableSizes::
  // failed_jobs): attempts so far,
  // when the next may run and the last error (ranges_plan_attempts). The last attempt's
  // failure fails the job (journaled, FailJobUpdate), so an entry lives a few retries only.
  // Not journaled: a restarted coordinator counts afresh.
  struct RangeRetry {
    int64_t attempts = 0;
    absl::Time next;
    absl::Status error;
  };
  absl::flat_hash_map<int64_t, RangeRetry> failed_jobs_ ABSL_GUARDED_BY(mu_);
  // Not state: when a consumer last asked about each unfinished job (idle_job_ttl), and
  // whether a consumer has sent a ClientHeartbeat of it (consumer_timeout then ends it);
  // erased when the job finishes or is removed. A job the state has that this misses (after a
  // restart or a reload) counts from when it is first noticed, as not yet heartbeated.
  struct JobActivity {
    absl::Time last;
    bool heartbeated = false;
  };
  absl::flat_hash_map<int64_t, JobActivity> job_activity_ ABSL_GUARDED_BY(mu_);
  // Not state: since when each unused dataset (CoordinatorState::unused_datasets) is unused.
  absl::flat_hash_map<std::string, absl::Time> unused_since_ ABSL_GUARDED_BY(mu_);
  // Not state: the failure policy's view of each unfinished assigned task's current run: the
  // worker it was assigned to, when a heartbeat answer handed it to that worker, and whether
  // the worker reported a step of it since. Lost on restart (and rebuilt as tasks move): a
  // death on a run this coordinator did not see handed over is no evidence, which errs towards
  // retrying a task rather than failing a healthy job.
  struct TaskRun {
    int64_t worker_id = 0;
    std::optional<absl::Time> handed_at;
    bool progressed = false;
  };
  absl::flat_hash_map<int64_t, TaskRun> runs_ ABSL_GUARDED_BY(mu_);
  // Not state: the deterministic errors each unfinished task met, by worker (TaskFailedLocked),
  // dropped with the task's run (TrackTaskRunsLocked). Lost on restart: a task then gets one
  // more try before its job fails, which errs towards retrying, as runs_ does.
  struct WorkerFailure {
    int64_t worker_id = 0;
    absl::StatusCode code = absl::StatusCode::kUnknown;
    std::string message;
  };
  absl::flat_hash_map<int64_t, std::vector<WorkerFailure>> task_failures_ ABSL_GUARDED_BY(mu_);
  // Not state: each worker's memory limit of one element, from its heartbeats (a restarted
  // coordinator hears it again with the next one); where a task refused at one worker's element
  // limit may be tried again (TaskFailedLocked).
  absl::flat_hash_map<int64_t, int64_t> element_limits_ ABSL_GUARDED_BY(mu_);
  // Not state (coordinator_scaling.cc, docs/AUTOSCALING.md): the load reports of the current
  // decision interval, the policy, each running job's workers at the last decision (a window
  // in which they changed, or the one after it, is not measured), the last decision's per-job
  // loads for GetStatus.
  void NoteWorkerLoadLocked(int64_t worker_id, const proto::WorkerHeartbeatRequest& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NoteConsumerLoadLocked(int64_t job_id, const proto::ClientHeartbeatRequest& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Decides when scaling_interval has passed since the last decision.
  void MaybeDecideScalingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FillScalingStatusLocked(proto::ScalingStatus* s) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FillJobLoadLocked(int64_t job_id, proto::JobStatus* s) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  JobLoadTable load_ ABSL_GUARDED_BY(mu_);
  ScalingPolicy scaling_ ABSL_GUARDED_BY(mu_){options_.scaling};
  std::optional<absl::Time> last_scaling_decision_ ABSL_GUARDED_BY(mu_);
  struct JobWorkersSeen {
    int64_t workers = 0;
    int64_t unchanged = 0;  // consecutive decisions that saw the same count before this one
  };
  absl::flat_hash_map<int64_t, JobWorkersSeen> scaling_job_workers_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int64_t, proto::JobLoad> job_loads_ ABSL_GUARDED_BY(mu_);
  int64_t scaling_decisions_ ABSL_GUARDED_BY(mu_) = 0;
  std::string scaling_last_change_ ABSL_GUARDED_BY(mu_);
  // Not state: versions of the changes heartbeat answers show (versioned answers).
  HeartbeatVersions versions_ ABSL_GUARDED_BY(mu_);
  // Workers' assignment watches: notified under mu_ wherever versions_ records a worker's
  // change, so that a watch registered under mu_ after its version check misses none.
  AssignmentWatchers watchers_;
  // Records in versions_ what `update` changes; called right before it is applied.
  struct VersionedChanges {
    std::vector<std::pair<int64_t, int64_t>> tasks;  // (job id, task id; 0: the job)
    std::vector<int64_t> workers;
  };
  VersionedChanges ChangesOfLocked(const proto::Update& update) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FillTaskInfoLocked(const CoordinatorState::Task& task, proto::TaskInfo* info) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Set by Create() with a work_dir.
  std::unique_ptr<Journal> journal_ ABSL_GUARDED_BY(mu_);
  // The open JournalBatch's updates, applied but not yet journaled.
  bool in_batch_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<proto::Update> batch_ ABSL_GUARDED_BY(mu_);
  // A snapshot the journal started (Journal::StartSnapshot) and that the next DurableLock
  // writes once it released mu_: the state copied under the lock, written outside it.
  struct PendingSnapshot {
    int64_t seq = 0;
    proto::StateSnapshot state;
  };
  std::optional<PendingSnapshot> pending_snapshot_ ABSL_GUARDED_BY(mu_);
  // The thread re-plans run on (RequestReplanLocked). Last: destroyed first, while everything
  // a running re-plan touches is still alive.
  std::unique_ptr<ThreadPool> replanner_;
};

}  // namespace sluice

#endif  // SLUICE_SERVER_COORDINATOR_H_
