#include "core/obs/metrics.h"

#include <cmath>
#include <cstdio>
#include <limits>

#include "absl/strings/str_cat.h"

namespace sluice {
namespace {

std::string RenderLabels(const MetricLabels& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i > 0) out += ",";
    absl::StrAppend(&out, SanitizeMetricName(labels[i].first), "=\"",
                    EscapeMetricLabelValue(labels[i].second), "\"");
  }
  out += "}";
  return out;
}

// One family as it is printed: its samples keyed by their rendered label set.
struct RenderedFamily {
  MetricType type = MetricType::kGauge;
  std::string help;
  std::map<std::string, double> samples;
};

class RenderSink : public MetricSink {
 public:
  void Emit(MetricType type, absl::string_view name, absl::string_view help,
            const MetricLabels& labels, double value) override {
    const std::string n = SanitizeMetricName(name);
    auto [it, inserted] = families_.try_emplace(n);
    if (inserted) {
      it->second.type = type;
      it->second.help = std::string(help);
    } else if (it->second.type != type) {
      return;  // the same name as another kind: keep the first, as the registry does
    }
    // Two sources reporting the same sample (e.g. two in-process workers) add up.
    it->second.samples[RenderLabels(labels)] += value;
  }

  std::string Render() const {
    std::string out;
    for (const auto& [name, f] : families_) {
      absl::StrAppend(&out, "# HELP ", name, " ", EscapeMetricHelp(f.help), "\n");
      absl::StrAppend(&out, "# TYPE ", name, " ",
                      f.type == MetricType::kCounter ? "counter" : "gauge", "\n");
      for (const auto& [labels, value] : f.samples) {
        absl::StrAppend(&out, name, labels, " ", FormatMetricValue(value), "\n");
      }
    }
    return out;
  }

 private:
  std::map<std::string, RenderedFamily> families_;
};

}  // namespace

std::string EscapeMetricLabelValue(absl::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '"': out += "\\\""; break;
      case '\n': out += "\\n"; break;
      default: out += c;
    }
  }
  return out;
}

std::string EscapeMetricHelp(absl::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      default: out += c;
    }
  }
  return out;
}

std::string FormatMetricValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == std::floor(value) && std::fabs(value) < 9007199254740992.0) {
    return absl::StrCat(static_cast<int64_t>(value));
  }
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.17g", value);
  return buf;
}

std::string SanitizeMetricName(absl::string_view name) {
  if (name.empty()) return "_";
  std::string out(name);
  for (size_t i = 0; i < out.size(); ++i) {
    const char c = out[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
                    (i > 0 && c >= '0' && c <= '9');
    if (!ok) out[i] = '_';
  }
  return out;
}

MetricFamily::MetricFamily(MetricType type, std::string name, std::string help,
                           std::vector<std::string> label_names)
    : type_(type),
      name_(std::move(name)),
      help_(std::move(help)),
      label_names_(std::move(label_names)) {}

std::vector<std::string> MetricFamily::Normalize(std::vector<std::string> label_values) const {
  label_values.resize(label_names_.size());
  return label_values;
}

double MetricFamily::Value(const std::vector<std::string>& label_values) const {
  const std::vector<std::string> key = Normalize(label_values);
  absl::MutexLock lock(&mu_);
  auto it = values_.find(key);
  return it == values_.end() ? 0 : it->second;
}

void MetricFamily::Collect(MetricSink& sink) const {
  std::vector<std::pair<MetricLabels, double>> samples;
  {
    absl::MutexLock lock(&mu_);
    samples.reserve(values_.size());
    for (const auto& [values, value] : values_) {
      MetricLabels labels;
      labels.reserve(values.size());
      for (size_t i = 0; i < values.size(); ++i) labels.emplace_back(label_names_[i], values[i]);
      samples.emplace_back(std::move(labels), value);
    }
  }
  for (const auto& [labels, value] : samples) sink.Emit(type_, name_, help_, labels, value);
}

void CounterFamily::Add(const std::vector<std::string>& label_values, double by) {
  if (!(by >= 0)) return;
  std::vector<std::string> key = Normalize(label_values);
  absl::MutexLock lock(&mu_);
  values_[std::move(key)] += by;
}

double* CounterFamily::AddAndBind(const std::vector<std::string>& label_values, double by) {
  std::vector<std::string> key = Normalize(label_values);
  absl::MutexLock lock(&mu_);
  double& value = values_[std::move(key)];  // std::map: the node never moves
  if (by >= 0) value += by;
  return &value;
}

void CounterFamily::AddAt(double* sample, double by) {
  if (!(by >= 0)) return;
  absl::MutexLock lock(&mu_);
  *sample += by;
}

void GaugeFamily::Set(const std::vector<std::string>& label_values, double value) {
  std::vector<std::string> key = Normalize(label_values);
  absl::MutexLock lock(&mu_);
  values_[std::move(key)] = value;
}

void GaugeFamily::Add(const std::vector<std::string>& label_values, double by) {
  std::vector<std::string> key = Normalize(label_values);
  absl::MutexLock lock(&mu_);
  values_[std::move(key)] += by;
}

void GaugeFamily::Remove(const std::vector<std::string>& label_values) {
  const std::vector<std::string> key = Normalize(label_values);
  absl::MutexLock lock(&mu_);
  values_.erase(key);
}

MetricsRegistry& MetricsRegistry::Default() {
  static MetricsRegistry* const registry = new MetricsRegistry();
  return *registry;
}

CounterFamily* MetricsRegistry::Counter(absl::string_view name, absl::string_view help,
                                        std::vector<std::string> label_names) {
  const std::string n = SanitizeMetricName(name);
  absl::MutexLock lock(&families_mu_);
  auto it = families_.find(n);
  if (it == families_.end()) {
    auto family = std::make_unique<CounterFamily>(MetricType::kCounter, n, std::string(help),
                                                  std::move(label_names));
    CounterFamily* raw = family.get();
    families_.emplace(n, std::move(family));
    return raw;
  }
  if (it->second->type() == MetricType::kCounter) {
    return static_cast<CounterFamily*>(it->second.get());
  }
  detached_.push_back(std::make_unique<CounterFamily>(MetricType::kCounter, n, std::string(help),
                                                      std::move(label_names)));
  return static_cast<CounterFamily*>(detached_.back().get());
}

GaugeFamily* MetricsRegistry::Gauge(absl::string_view name, absl::string_view help,
                                    std::vector<std::string> label_names) {
  const std::string n = SanitizeMetricName(name);
  absl::MutexLock lock(&families_mu_);
  auto it = families_.find(n);
  if (it == families_.end()) {
    auto family = std::make_unique<GaugeFamily>(MetricType::kGauge, n, std::string(help),
                                                std::move(label_names));
    GaugeFamily* raw = family.get();
    families_.emplace(n, std::move(family));
    return raw;
  }
  if (it->second->type() == MetricType::kGauge) {
    return static_cast<GaugeFamily*>(it->second.get());
  }
  detached_.push_back(std::make_unique<GaugeFamily>(MetricType::kGauge, n, std::string(help),
                                                    std::move(label_names)));
  return static_cast<GaugeFamily*>(detached_.back().get());
}

MetricsRegistry::CollectorHandle MetricsRegistry::AddCollector(Collector collector) {
  absl::MutexLock lock(&collectors_mu_);
  const int64_t id = next_collector_id_++;
  collectors_.emplace(id, std::move(collector));
  return CollectorHandle(this, id);
}

void MetricsRegistry::RemoveCollector(int64_t id) {
  absl::MutexLock lock(&collectors_mu_);
  collectors_.erase(id);
}

MetricsRegistry::CollectorHandle& MetricsRegistry::CollectorHandle::operator=(
    CollectorHandle&& other) noexcept {
  if (this != &other) {
    Reset();
    registry_ = other.registry_;
    id_ = other.id_;
    other.registry_ = nullptr;
    other.id_ = 0;
  }
  return *this;
}

void MetricsRegistry::CollectorHandle::Reset() {
  if (registry_ != nullptr) registry_->RemoveCollector(id_);
  registry_ = nullptr;
  id_ = 0;
}

std::string MetricsRegistry::Scrape() const {
  RenderSink sink;
  {
    absl::MutexLock lock(&families_mu_);
    for (const auto& [name, family] : families_) family->Collect(sink);
  }
  {
    absl::MutexLock lock(&collectors_mu_);
    for (const auto& [id, collector] : collectors_) collector(sink);
  }
  return sink.Render();
}

}  // namespace sluice
