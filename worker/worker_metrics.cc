#include "worker/worker_metrics.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "core/data/ops/map_iterator.h"
#include "core/rpc/job_shm_segment.h"
#include "core/tensor/host_memory.h"
#include "core/util/thread_pool.h"
#include "worker/cross_trainer_window.h"
#include "worker/worker_server.h"

namespace sluice {

void FillTaskProgress(TaskRunner& runner, proto::TaskProgress* progress) {
  const StepBuffer::Stats stats = runner.buffer()->stats();
  progress->set_task_id(runner.task().task_id());
  progress->set_steps_produced(stats.steps_produced);
  for (int64_t c : stats.confirmed_ends) progress->add_ended_consumers(c);
  progress->set_steps_delivered(runner.steps_delivered());
  progress->set_bytes_delivered(runner.bytes_delivered());
  if (const CrossTrainerWindow* window = runner.buffer()->cross_trainer_window()) {
    CrossTrainerWindow::Stats window_stats = window->stats();
    for (std::string& id : window_stats.dropped_trainer_ids) {
      progress->add_dropped_trainer_ids(std::move(id));
    }
    for (const CrossTrainerWindow::TrainerStats& t : window_stats.trainers) {
      proto::TrainerProgress* p = progress->add_trainers();
      p->set_trainer_id(t.trainer_id);
      p->set_steps_read(t.steps_read);
      p->set_skipped_steps(t.skipped_steps);
      p->set_lag_steps(t.lag_steps);
    }
  }
}

namespace {

constexpr const char* kReplaysHelp =
    "Private replays of the task started for streams that asked for steps no longer in memory.";
constexpr const char* kRetentionHitsHelp =
    "Streams that started at a released step still in the retention window: served from "
    "memory, each a replay avoided.";

// A task of a job shared across trainers (worker/cross_trainer_window.h): per trainer.
void ExportTrainers(const CrossTrainerWindow::Stats& stats, const MetricLabels& task,
                    MetricSink& sink) {
  sink.Counter("sluice_worker_window_evicted_steps_total",
               "Steps that left the task's cross-trainer window to make room.", task,
               static_cast<double>(stats.steps_evicted));
  sink.Counter("sluice_worker_window_dropped_trainers_total",
               "Trainers dropped from the task's window after no stream of theirs was open for "
               "--drop_departed_trainers_after.",
               task, static_cast<double>(stats.trainers_dropped));
  sink.Counter("sluice_worker_window_redelivered_steps_total",
               "Steps handed again to a trainer after a broken stream gave them back.", task,
               static_cast<double>(stats.steps_redelivered));
  for (const CrossTrainerWindow::TrainerStats& t : stats.trainers) {
    MetricLabels l = task;
    l.emplace_back("trainer", t.trainer_id);
    sink.Gauge("sluice_worker_trainer_lag_steps",
               "Steps of the task's window produced that the trainer has not read yet.", l,
               static_cast<double>(t.lag_steps));
    sink.Counter("sluice_worker_trainer_skipped_steps_total",
                 "Steps the trainer missed: it fell behind the window's start (skipping mode).",
                 l, static_cast<double>(t.skipped_steps));
    sink.Counter("sluice_worker_trainer_steps_read_total",
                 "Steps handed to the trainer's consumers.", l,
                 static_cast<double>(t.steps_read));
  }
}

// Shared jobs' job segments (core/rpc/job_shm_segment.h), over this process.
void ExportJobSegments(MetricSink& sink) {
  const JobShmCounts c = ProcessJobShmCounts();
  sink.Counter("sluice_worker_job_segment_steps_written_total",
               "Steps of shared jobs written into their task's job segment (once each, "
               "however many co-located trainers read them).",
               {}, static_cast<double>(c.steps_written));
  sink.Counter("sluice_worker_job_segment_frames_total",
               "Frames sent as a header naming a step in a job segment.", {},
               static_cast<double>(c.frames_placed));
  sink.Counter("sluice_worker_job_segment_no_room_total",
               "Steps that found no room in their job segment (sent the ordinary way).", {},
               static_cast<double>(c.no_room));
  sink.Counter("sluice_worker_job_segment_holders_reaped_total",
               "Consumer processes found exited, the job segment regions they held freed.", {},
               static_cast<double>(c.holders_reaped));
  sink.Counter("sluice_worker_job_segment_lost_frames_freed_total",
               "Frames naming a job segment region lost in broken calls (sent, never "
               "received), their holds freed when the consumer called again.",
               {}, static_cast<double>(c.lost_frames_freed));
}

}  // namespace

WorkerMetrics::WorkerMetrics(WorkerServer* worker, MetricsRegistry* registry) {
  if (registry == nullptr) registry = &MetricsRegistry::Default();
  handle_ = registry->AddCollector([worker](MetricSink& sink) {
    sink.Gauge("sluice_worker_registered",
               "1 once this worker's heartbeats reach the coordinator.", {},
               worker->registered() ? 1 : 0);
    ExportJobSegments(sink);
    int64_t running = 0;
    int64_t finished = 0;
    const WorkerServer::TaskSnapshot tasks = worker->Tasks();
    // The tasks this worker dropped, under task="stopped": their own series end with them, and
    // this one keeps each counter's sum over the worker's series monotone.
    const MetricLabels stopped = {{"job", "all"}, {"task", "stopped"}};
    sink.Counter("sluice_worker_steps_delivered_total",
                 "Steps written to consumers' streams (each consumer's copy counts).", stopped,
                 static_cast<double>(tasks.stopped.steps_delivered));
    sink.Counter("sluice_worker_bytes_delivered_total",
                 "Bytes of the step frames written to consumers' streams.", stopped,
                 static_cast<double>(tasks.stopped.bytes_delivered));
    sink.Counter("sluice_worker_task_steps_produced_total",
                 "Steps the task's pipeline produced on this worker.", stopped,
                 static_cast<double>(tasks.stopped.steps_produced));
    sink.Counter("sluice_worker_task_replays_total", kReplaysHelp, stopped,
                 static_cast<double>(tasks.stopped.replays));
    sink.Counter("sluice_worker_retention_hits_total", kRetentionHitsHelp, stopped,
                 static_cast<double>(tasks.stopped.retention_hits));
    for (const std::shared_ptr<TaskRunner>& runner : tasks.runners) {
      const MetricLabels task = {{"job", absl::StrCat(runner->task().job_id())},
                                 {"task", absl::StrCat(runner->task().task_id())}};
      if (runner->finished()) {
        ++finished;
      } else {
        ++running;
      }
      const StepBuffer::Stats stats = runner->buffer()->stats();
      sink.Counter("sluice_worker_steps_delivered_total",
                   "Steps written to consumers' streams (each consumer's copy counts).", task,
                   static_cast<double>(runner->steps_delivered()));
      sink.Counter("sluice_worker_bytes_delivered_total",
                   "Bytes of the step frames written to consumers' streams.", task,
                   static_cast<double>(runner->bytes_delivered()));
      sink.Counter("sluice_worker_task_steps_produced_total",
                   "Steps the task's pipeline produced on this worker.", task,
                   static_cast<double>(stats.steps_produced));
      sink.Gauge("sluice_worker_buffer_bytes", "Bytes of steps buffered for the task's consumers.",
                 task, static_cast<double>(stats.bytes));
      sink.Gauge("sluice_worker_buffer_capacity_bytes", "The task buffer's budget in bytes.", task,
                 static_cast<double>(stats.max_bytes));
      sink.Gauge("sluice_worker_buffer_steps", "Steps buffered for the task's consumers.", task,
                 static_cast<double>(stats.steps));
      sink.Gauge("sluice_worker_retained_bytes",
                 "Bytes of steps every consumer has read, kept for late or reconnecting consumers.",
                 task, static_cast<double>(stats.retained_bytes));
      sink.Gauge("sluice_worker_retained_steps",
                 "Steps every consumer has read, kept for late or reconnecting consumers.", task,
                 static_cast<double>(stats.retained_steps));
      sink.Gauge("sluice_worker_retention_capacity_bytes",
                 "The task's retention window in bytes (--retention_bytes; 0 for independent "
                 "reads).",
                 task, static_cast<double>(stats.retention_capacity));
      sink.Counter("sluice_worker_task_replays_total", kReplaysHelp, task,
                   static_cast<double>(runner->replays()));
      sink.Counter("sluice_worker_retention_hits_total", kRetentionHitsHelp, task,
                   static_cast<double>(stats.retention_hits));
      const char* lag_help =
          "Steps the task produced that the consumer has not taken yet (independent jobs: "
          "consumer=\"any\", the buffered steps).";
      if (const CrossTrainerWindow* window = runner->buffer()->cross_trainer_window()) {
        ExportTrainers(window->stats(), task, sink);
      } else if (stats.independent) {
        MetricLabels l = task;
        l.emplace_back("consumer", "any");
        sink.Gauge("sluice_worker_consumer_lag_steps", lag_help, l, static_cast<double>(stats.steps));
      } else {
        for (size_t c = 0; c < stats.cursors.size(); ++c) {
          if (stats.cursors[c] < 0) continue;  // done with this task
          MetricLabels l = task;
          l.emplace_back("consumer", absl::StrCat(c));
          sink.Gauge("sluice_worker_consumer_lag_steps", lag_help, l,
                     static_cast<double>(stats.steps_produced - stats.cursors[c]));
        }
      }
    }
    sink.Gauge("sluice_worker_tasks", "Tasks this worker holds, by state.", {{"state", "running"}},
               static_cast<double>(running));
    sink.Gauge("sluice_worker_tasks", "Tasks this worker holds, by state.", {{"state", "finished"}},
               static_cast<double>(finished));
    sink.Gauge("sluice_worker_memory_charged_bytes",
               "Bytes charged to the process's memory budget (--memory_limit): the steps and "
               "tensors this worker holds, whichever task or stream holds them.",
               {}, static_cast<double>(ProcessMemoryBudget().in_use()));
  });
}

ExecutorMetrics::ExecutorMetrics(std::shared_ptr<OpProfile> profile, MetricsRegistry* registry) {
  if (registry == nullptr) registry = &MetricsRegistry::Default();
  handle_ = registry->AddCollector([profile](MetricSink& sink) {
    sink.Gauge("sluice_worker_threads",
               "Threads of the process's pool, shared by every parallel op of every task.", {},
               ProcessThreadPoolSize());
    sink.Gauge("sluice_worker_autotune_parallelism",
               "The most num_parallel_calls=AUTOTUNE may use (the pool's size).", {},
               static_cast<double>(AutotuneParallelism()));
    for (const auto& [op, parallelism] : AutotunedMapParallelism()) {
      sink.Gauge("sluice_worker_map_parallelism",
                 "The parallelism AUTOTUNE chose for the op's parallel maps (their average).",
                 {{"op", op}}, parallelism);
    }
    if (profile == nullptr) return;
    for (const OpProfile::OpStats& op : profile->Snapshot()) {
      const MetricLabels l = {{"op", op.label}};
      sink.Counter("sluice_worker_op_elements_total", "Elements the op handed out.", l,
                   static_cast<double>(op.elements));
      sink.Counter("sluice_worker_op_calls_total", "Calls of the op's GetNext.", l,
                   static_cast<double>(op.calls));
      sink.Counter("sluice_worker_op_seconds_total",
                   "Wall time in the op's calls, the ops below it included.", l,
                   op.total_ns / 1e9);
      sink.Counter("sluice_worker_op_self_seconds_total",
                   "Wall time in the op's calls less the op below it.", l, op.self_ns / 1e9);
    }
  });
}

}  // namespace sluice
