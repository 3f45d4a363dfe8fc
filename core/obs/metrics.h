// Metrics: a small registry of counters and gauges with label sets, rendered in the Prometheus
// text exposition format 0.0.4 (https://prometheus.io/docs/instrumenting/exposition_formats/).
//
// Two kinds of sources feed a scrape:
//  - families the code updates as things happen (CounterFamily::Add, GaugeFamily::Set), for
//    events such as steps delivered or RPCs handled;
//  - collectors, callbacks evaluated at scrape time that emit samples into a MetricSink, for
//    values that already live in some object (buffer fill, heartbeat ages, tasks by state).
//    They keep the hooks in the code being measured down to a registration.
//
//   MetricsRegistry& m = MetricsRegistry::Default();
//   CounterFamily* steps = m.Counter("sluice_worker_steps_delivered_total",
//                                    "Steps written to consumers' streams.", {"job", "task"});
//   steps->Add({"7", "12"}, 3);
//   auto handle = m.AddCollector([](MetricSink& sink) {
//     sink.Gauge("sluice_worker_buffer_bytes", "Bytes buffered.", {{"task", "12"}}, 4096);
//   });
//   std::string text = m.Scrape();
//
// Output is deterministic: families sorted by name, samples by label values; families of the
// same name from several sources are merged under one HELP/TYPE pair.
//
// Thread safety: everything here is thread-safe. A collector runs on the scraping thread and
// must not call back into the registry's Scrape().
#ifndef SLUICE_CORE_METRICS_H_
#define SLUICE_CORE_METRICS_H_

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace sluice {

// Label name/value pairs of one sample, in the order they are printed.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

enum class MetricType { kCounter, kGauge };

// Receives the samples a collector emits during one scrape.
class MetricSink {
 public:
  virtual ~MetricSink() = default;
  virtual void Emit(MetricType type, absl::string_view name, absl::string_view help,
                    const MetricLabels& labels, double value) = 0;
  void Gauge(absl::string_view name, absl::string_view help, const MetricLabels& labels,
             double value) {
    Emit(MetricType::kGauge, name, help, labels, value);
  }
  void Counter(absl::string_view name, absl::string_view help, const MetricLabels& labels,
               double value) {
    Emit(MetricType::kCounter, name, help, labels, value);
  }
};

// A family of samples that share a name, a HELP text and label names; one value per
// combination of label values. Label values are given in the order of the label names.
class MetricFamily {
 public:
  MetricFamily(MetricType type, std::string name, std::string help,
               std::vector<std::string> label_names);
  MetricFamily(const MetricFamily&) = delete;
  MetricFamily& operator=(const MetricFamily&) = delete;

  MetricType type() const { return type_; }
  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  const std::vector<std::string>& label_names() const { return label_names_; }

  // The value at these label values; 0 when never set.
  double Value(const std::vector<std::string>& label_values) const;
  // Every (labels, value) pair.
  void Collect(MetricSink& sink) const;

 protected:
  // Missing label values read as "", extra ones are dropped (a programming error that must not
  // take a server down).
  std::vector<std::string> Normalize(std::vector<std::string> label_values) const;

  const MetricType type_;
  const std::string name_;
  const std::string help_;
  const std::vector<std::string> label_names_;
  mutable absl::Mutex mu_;
  std::map<std::vector<std::string>, double> values_ ABSL_GUARDED_BY(mu_);
};

// Monotone counts (names end in _total by convention).
class CounterFamily : public MetricFamily {
 public:
  using MetricFamily::MetricFamily;
  // Adds `by` (negative amounts are ignored: a counter never goes down).
  void Add(const std::vector<std::string>& label_values, double by = 1);

  // For a hot path that adds to the same label values on every call (an RPC handler):
  // AddAndBind adds like Add and returns the sample's place; AddAt(place, by) then adds
  // without building the key or looking it up (one short lock). A place stays valid for the
  // family's life (a counter's samples are never removed) and belongs to this family only.
  double* AddAndBind(const std::vector<std::string>& label_values, double by = 1);
  void AddAt(double* sample, double by = 1);
};

class GaugeFamily : public MetricFamily {
 public:
  using MetricFamily::MetricFamily;
  void Set(const std::vector<std::string>& label_values, double value);
  void Add(const std::vector<std::string>& label_values, double by);
  // Drops the sample (e.g. for a task that ended).
  void Remove(const std::vector<std::string>& label_values);
};

class MetricsRegistry {
 public:
  using Collector = std::function<void(MetricSink&)>;

  // Unregisters its collector when destroyed; once the destructor returns the collector is not
  // running and will not run again. Must not outlive the registry.
  class CollectorHandle {
   public:
    CollectorHandle() = default;
    CollectorHandle(CollectorHandle&& other) noexcept { *this = std::move(other); }
    CollectorHandle& operator=(CollectorHandle&& other) noexcept;
    ~CollectorHandle() { Reset(); }
    void Reset();

   private:
    friend class MetricsRegistry;
    CollectorHandle(MetricsRegistry* registry, int64_t id) : registry_(registry), id_(id) {}
    MetricsRegistry* registry_ = nullptr;
    int64_t id_ = 0;
  };

  MetricsRegistry() = default;
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // The process-wide registry the binaries serve; never destroyed.
  static MetricsRegistry& Default();

  // Returns the family of that name, creating it on first use; the pointer lives as long as
  // the registry. A later call with the same name returns the same family whatever its help
  // and labels (the first registration wins). Registering a name as both a counter and a
  // gauge is a programming error: the second kind gets a detached family that is never
  // exported rather than crashing the process.
  CounterFamily* Counter(absl::string_view name, absl::string_view help,
                         std::vector<std::string> label_names = {});
  GaugeFamily* Gauge(absl::string_view name, absl::string_view help,
                     std::vector<std::string> label_names = {});

  CollectorHandle AddCollector(Collector collector);

  // Every family and every collector's samples in the text format, ending with a newline
  // (empty when there is nothing to export).
  std::string Scrape() const;

 private:
  void RemoveCollector(int64_t id);

  mutable absl::Mutex families_mu_;
  std::map<std::string, std::unique_ptr<MetricFamily>, std::less<>> families_
      ABSL_GUARDED_BY(families_mu_);
  std::vector<std::unique_ptr<MetricFamily>> detached_ ABSL_GUARDED_BY(families_mu_);
  // Held while collectors run, so that removing one waits for a scrape in progress.
  mutable absl::Mutex collectors_mu_;
  std::map<int64_t, Collector> collectors_ ABSL_GUARDED_BY(collectors_mu_);
  int64_t next_collector_id_ ABSL_GUARDED_BY(collectors_mu_) = 1;
};

// Text-format helpers, exposed for tests and for other renderers.
// A label value with backslash, double quote and newline escaped.
std::string EscapeMetricLabelValue(absl::string_view value);
// A HELP text with backslash and newline escaped.
std::string EscapeMetricHelp(absl::string_view help);
// A sample value: integers without a fraction, others with full precision, +Inf/-Inf/NaN.
std::string FormatMetricValue(double value);
// Replaces every character outside [a-zA-Z0-9_:] (and a leading digit) with '_'.
std::string SanitizeMetricName(absl::string_view name);

}  // namespace sluice

#endif  // SLUICE_CORE_METRICS_H_
