#include "server/coordinator_metrics.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace sluice {

CoordinatorMetrics::CoordinatorMetrics(Coordinator* coordinator, MetricsRegistry* registry) {
  if (registry == nullptr) registry = &MetricsRegistry::Default();
  handle_ = registry->AddCollector([coordinator](MetricSink& sink) {
    // Page by page (each page holds the coordinator's lock briefly), into one answer.
    proto::GetStatusResponse status;
    proto::GetStatusRequest request;
    request.set_page_size(coordinator->options().max_status_page_size);
    while (true) {
      proto::GetStatusResponse page;
      if (!coordinator->GetStatus(request, &page).ok()) return;
      status.mutable_workers()->MergeFrom(page.workers());
      status.mutable_jobs()->MergeFrom(page.jobs());
      status.set_num_datasets(page.num_datasets());
      *status.mutable_scaling() = page.scaling();
      if (page.next_page_token().empty() || page.workers_size() + page.jobs_size() == 0) break;
      request.set_page_token(page.next_page_token());
    }
    int64_t alive = 0;
    int64_t dead = 0;
    for (const proto::WorkerStatus& w : status.workers()) {
      (w.alive() ? alive : dead) += 1;
      const MetricLabels labels = {{"worker", absl::StrCat(w.worker_id())},
                                   {"address", w.address()}};
      if (w.alive()) {
        sink.Gauge("sluice_coordinator_worker_heartbeat_age_seconds",
                   "Seconds since the live worker's last heartbeat (-1: none seen yet).", labels,
                   w.seconds_since_heartbeat());
      }
      sink.Gauge("sluice_coordinator_worker_tasks", "Unfinished tasks assigned to the worker.", labels,
                 w.task_ids_size());
    }
    sink.Gauge("sluice_coordinator_workers", "Workers known to the coordinator, by state.",
               {{"state", "alive"}}, static_cast<double>(alive));
    sink.Gauge("sluice_coordinator_workers", "Workers known to the coordinator, by state.",
               {{"state", "dead"}}, static_cast<double>(dead));
    sink.Gauge("sluice_coordinator_datasets", "Datasets registered.", {},
               static_cast<double>(status.num_datasets()));

    const proto::ScalingStatus& scaling = status.scaling();
    sink.Gauge("sluice_coordinator_desired_workers",
               "Input workers the autoscaling policy wants in all (docs/AUTOSCALING.md), in "
               "[--min_workers, --max_workers].",
               {}, static_cast<double>(scaling.desired_workers()));
    sink.Counter("sluice_coordinator_scaling_reports_refused_total",
                 "Load reports refused (negative, NaN or absurd values).", {},
                 static_cast<double>(scaling.reports_refused()));
    sink.Counter("sluice_coordinator_scaling_reports_clamped_total",
                 "Load reports clamped (a wait longer than its interval, CPU busy over 1).", {},
                 static_cast<double>(scaling.reports_clamped()));
    int64_t running = 0;
    int64_t finished_jobs = 0;
    for (const proto::JobStatus& j : status.jobs()) {
      (j.finished() ? finished_jobs : running) += 1;
      const std::string job = absl::StrCat(j.job_id());
      const MetricLabels labels = {{"job", job}, {"name", j.job_name()}};
      int64_t unassigned = 0;
      int64_t assigned = 0;
      int64_t done = 0;
      for (const proto::TaskInfo& t : j.tasks()) {
        if (t.finished()) {
          ++done;
        } else if (t.worker_address().empty()) {
          ++unassigned;
        } else {
          ++assigned;
        }
      }
      const char* tasks_help = "Tasks of the job by state (ranges under SHARDING_RANGES).";
      sink.Gauge("sluice_coordinator_tasks", tasks_help, {{"job", job}, {"state", "unassigned"}},
                 static_cast<double>(unassigned));
      sink.Gauge("sluice_coordinator_tasks", tasks_help, {{"job", job}, {"state", "assigned"}},
                 static_cast<double>(assigned));
      sink.Gauge("sluice_coordinator_tasks", tasks_help, {{"job", job}, {"state", "finished"}},
                 static_cast<double>(done));
      const int64_t total = j.tasks_size();
      sink.Gauge("sluice_coordinator_job_tasks_finished", "Finished tasks (ranges) of the job.",
                 labels, static_cast<double>(done));
      sink.Gauge("sluice_coordinator_job_tasks_total", "Tasks (ranges) of the job so far.",
                 labels, static_cast<double>(total));
      sink.Gauge("sluice_coordinator_job_progress_ratio",
                 "Finished tasks (ranges) over tasks; 1 once the job finished.", labels,
                 j.finished() ? 1.0 : total == 0 ? 0.0 : static_cast<double>(done) / total);
      sink.Counter("sluice_coordinator_job_steps_delivered_total",
                   "Steps the job's workers report delivered (each consumer's copy counts).",
                   labels, static_cast<double>(j.steps_delivered()));
      sink.Counter("sluice_coordinator_job_bytes_delivered_total",
                   "Frame bytes the job's workers report delivered.", labels,
                   static_cast<double>(j.bytes_delivered()));
      sink.Counter("sluice_coordinator_job_steps_produced_total",
                   "Steps the job's workers report produced.", labels,
                   static_cast<double>(j.steps_produced()));
      if (j.options().cross_trainer().enabled()) {
        const char* trainers_help =
            "Trainers of a shared job by state: joined (counted against max_trainers), or "
            "dropped by a worker after --drop_departed_trainers_after (refused if they return).";
        MetricLabels joined = labels;
        joined.emplace_back("state", "joined");
        sink.Gauge("sluice_coordinator_job_trainers", trainers_help, joined,
                   static_cast<double>(j.trainer_ids_size()));
        MetricLabels dropped = labels;
        dropped.emplace_back("state", "dropped");
        sink.Gauge("sluice_coordinator_job_trainers", trainers_help, dropped,
                   static_cast<double>(j.dropped_trainer_ids_size()));
      }
    }
    sink.Gauge("sluice_coordinator_jobs", "Jobs by state.", {{"state", "running"}},
               static_cast<double>(running));
    sink.Gauge("sluice_coordinator_jobs", "Jobs by state.", {{"state", "finished"}},
               static_cast<double>(finished_jobs));
  });
}

}  // namespace sluice
