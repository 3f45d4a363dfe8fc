#include "client/local_step_source.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/util/status_macros.h"

namespace sluice {

absl::StatusOr<std::unique_ptr<LocalStepSource>> LocalStepSource::Create(
    std::vector<LocalPipeline> pipelines, LocalStepSourceOptions options) {
  bool any_local = false;
  std::vector<Running> running;
  running.reserve(pipelines.size());
  for (size_t i = 0; i < pipelines.size(); ++i) {
    LocalPipeline& p = pipelines[i];
    if (p.pieces_per_step <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("pipeline ", i, ": pieces_per_step must be "
                                                     "positive, got ", p.pieces_per_step));
    }
    any_local = any_local || p.local;
    Running r{std::move(p), nullptr, false};
    if (r.pipeline.local || options.run_remote_pipelines) {
      ASSIGN_OR_RETURN(std::unique_ptr<Iterator> it,
                       MakeIterator(r.pipeline.dataset, options.executor));
      r.steps = std::make_unique<StepIterator>(std::move(it), r.pipeline.pieces_per_step,
                                               r.pipeline.piece_spec);
    }
    running.push_back(std::move(r));
  }
  if (!any_local) return absl::InvalidArgumentError("LocalStepSource: no local pipeline");
  return std::unique_ptr<LocalStepSource>(new LocalStepSource(std::move(running), options));
}

absl::Status LocalStepSource::GetNextStep(std::vector<Element>* replicas, bool* end_of_data) {
  return Next(/*padded=*/false, replicas, end_of_data);
}

absl::Status LocalStepSource::GetNextStepPadded(std::vector<Element>* replicas,
                                                bool* end_of_data) {
  return Next(/*padded=*/true, replicas, end_of_data);
}

absl::Status LocalStepSource::Next(bool padded, std::vector<Element>* replicas,
                                   bool* end_of_data) {
  if (!status_.ok()) return status_;
  if (finished_) {
    *end_of_data = true;
    return absl::OkStatus();
  }
  std::vector<Element> out;
  bool any_data = false;  // TF's all-reduced "replicas with values > 0"
  bool partial = false;   // some local replica gets a dummy
  std::vector<Element> step;
  for (Running& r : running_) {
    const int64_t n = r.pipeline.pieces_per_step;
    if (r.steps == nullptr) {  // a remote pipeline known to run forever
      any_data = true;
      continue;
    }
    int64_t num_real = 0;
    bool end = r.ended;
    if (!end) {
      absl::Status s = r.steps->GetNextStep(&step, &num_real, &end);
      if (!s.ok()) {
        status_ = s;
        return s;
      }
      r.ended = end;
    }
    if (end) {
      if (r.pipeline.local) {
        partial = true;
        for (int64_t i = 0; i < n; ++i) out.push_back(DummyElement(r.pipeline.piece_spec));
      }
      continue;
    }
    any_data = true;
    if (r.pipeline.local) {
      if (num_real < n) partial = true;
      for (Element& e : step) out.push_back(std::move(e));
    }
  }
  if (!any_data || (partial && !padded && !options_.partial_batch_handling)) {
    finished_ = true;
    *end_of_data = true;
    return absl::OkStatus();
  }
  *replicas = std::move(out);
  *end_of_data = false;
  return absl::OkStatus();
}

}  // namespace sluice
