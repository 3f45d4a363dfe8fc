// Cluster configuration from flags, a JSON cluster spec and the environment
// (sluice/cluster_spec.h says which source wins).
#include "sluice/cluster_spec.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/util/json_value.h"
#include "core/util/status_macros.h"

namespace sluice {
namespace {

absl::Status SpecError(const std::string& source, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", message));
}

// cluster.<key> as a list of addresses: an array of strings (or, when `allow_string`, one
// string). Missing: an empty list.
absl::StatusOr<std::vector<std::string>> AddressList(const JsonValue& cluster,
                                                     const std::string& key, bool allow_string,
                                                     const std::string& source) {
  std::vector<std::string> out;
  const JsonValue* v = cluster.Find(key);
  if (v == nullptr) return out;
  if (allow_string && v->is_string()) {
    out.push_back(v->string_value());
  } else if (v->is_array()) {
    for (size_t i = 0; i < v->size(); ++i) {
      if (!(*v)[i].is_string()) {
        return SpecError(source, absl::StrCat("cluster.", key, "[", i, "] must be a string"));
      }
      out.push_back((*v)[i].string_value());
    }
  } else {
    return SpecError(source, absl::StrCat("cluster.", key, " must be a list of \"host:port\"",
                                          allow_string ? " (or one string)" : ""));
  }
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i].empty()) {
      return SpecError(source, absl::StrCat("cluster.", key, "[", i, "] is empty"));
    }
  }
  return out;
}

// The value of an integer environment variable; nullopt when unset or empty.
absl::StatusOr<std::optional<int64_t>> EnvInt(const ClusterSpecSources& sources,
                                              const std::string& name) {
  std::optional<std::string> text = sources.getenv(name);
  if (!text.has_value() || text->empty()) return std::optional<int64_t>();
  int64_t v = 0;
  if (!absl::SimpleAtoi(*text, &v)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": '", *text, "' is not an integer"));
  }
  return std::optional<int64_t>(v);
}

std::optional<std::string> EnvString(const ClusterSpecSources& sources, const std::string& name) {
  std::optional<std::string> text = sources.getenv(name);
  if (!text.has_value() || text->empty()) return std::nullopt;
  return text;
}

// One source's contribution; unset fields leave the choice to lower sources.
struct Layer {
  std::optional<std::string> coordinator;
  std::optional<int64_t> consumer_index;
  std::optional<int64_t> num_consumers;
  std::optional<std::string> role;
  std::string source;
};

absl::StatusOr<Layer> JsonLayer(const std::string& json, const std::string& source) {
  ASSIGN_OR_RETURN(ParsedClusterSpec spec, ParseClusterSpec(json, source));
  Layer layer;
  layer.source = source;
  layer.coordinator = spec.coordinator_address;
  if (spec.task_type.has_value()) {
    if (spec.consumer_index.has_value()) {
      layer.role = "trainer";
      layer.consumer_index = spec.consumer_index;
      layer.num_consumers = static_cast<int64_t>(spec.trainers.size());
    } else {
      layer.role = spec.task_type;
    }
  }
  return layer;
}

}  // namespace

std::string ClusterConfig::DebugString() const {
  return absl::StrCat(
      "coordinator ", coordinator_address.empty() ? "(none: in-process)" : coordinator_address,
      " (", coordinator_source, "); ", role, " ", consumer_index, " (", consumer_index_source,
      ") of ", num_consumers, " (", num_consumers_source, ")");
}

absl::StatusOr<ParsedClusterSpec> ParseClusterSpec(const std::string& json,
                                                   const std::string& source) {
  absl::StatusOr<JsonValue> parsed = ParseJson(json);
  if (!parsed.ok()) return SpecError(source, std::string(parsed.status().message()));
  const JsonValue& root = *parsed;
  if (!root.is_object()) return SpecError(source, "the cluster spec must be a JSON object");
  static const JsonValue kEmptyObject = JsonValue::Object({});
  const JsonValue* cluster = root.Find("cluster");
  if (cluster == nullptr) cluster = &kEmptyObject;
  if (!cluster->is_object()) return SpecError(source, "cluster must be an object");

  ParsedClusterSpec spec;
  ASSIGN_OR_RETURN(std::vector<std::string> coordinators,
                   AddressList(*cluster, "coordinator", /*allow_string=*/true, source));
  if (cluster->Find("coordinator") != nullptr) {
    if (coordinators.size() != 1) {
      return SpecError(source, absl::StrCat("cluster.coordinator must hold exactly one address, "
                                            "has ",
                                            coordinators.size()));
    }
    spec.coordinator_address = coordinators[0];
  }
  ASSIGN_OR_RETURN(std::vector<std::string> workers,
                   AddressList(*cluster, "worker", /*allow_string=*/false, source));
  const bool sluice_style = cluster->Find("trainer") != nullptr;
  int64_t chief_count = 0;
  if (sluice_style) {
    ASSIGN_OR_RETURN(spec.trainers,
                     AddressList(*cluster, "trainer", /*allow_string=*/false, source));
    spec.input_workers = workers;
  } else {
    ASSIGN_OR_RETURN(std::vector<std::string> chief,
                     AddressList(*cluster, "chief", /*allow_string=*/false, source));
    if (chief.size() > 1) {
      return SpecError(source, absl::StrCat("cluster.chief must hold at most one address, has ",
                                            chief.size()));
    }
    chief_count = static_cast<int64_t>(chief.size());
    spec.trainers = chief;
    spec.trainers.insert(spec.trainers.end(), workers.begin(), workers.end());
  }

  const JsonValue* task = root.Find("task");
  if (task == nullptr) return spec;
  if (!task->is_object()) return SpecError(source, "task must be an object");
  const JsonValue* type = task->Find("type");
  if (type == nullptr || !type->is_string() || type->string_value().empty()) {
    return SpecError(source, "task.type must be a non-empty string");
  }
  spec.task_type = type->string_value();
  if (const JsonValue* index = task->Find("index"); index != nullptr) {
    std::optional<int64_t> i = index->int_value();
    if (!i.has_value() || *i < 0) {
      return SpecError(source, absl::StrCat("task.index must be a non-negative integer, got ",
                                            index->ToString()));
    }
    spec.task_index = *i;
  }
  const std::string& t = *spec.task_type;
  const bool is_trainer = sluice_style ? t == "trainer" : (t == "chief" || t == "worker");
  if (is_trainer) {
    const int64_t members = sluice_style ? static_cast<int64_t>(spec.trainers.size())
                            : t == "chief"
                                ? chief_count
                                : static_cast<int64_t>(spec.trainers.size()) - chief_count;
    if (members == 0) {
      return SpecError(source, absl::StrCat("task.type '", t, "' but cluster.", t,
                                            " is missing or empty"));
    }
    if (spec.task_index >= members) {
      return SpecError(source, absl::StrCat("task.index ", spec.task_index, " out of range for ",
                                            members, " ",
                                            t == "trainer" ? "trainers" : t + " entries"));
    }
    spec.consumer_index = (t == "worker" && !sluice_style) ? chief_count + spec.task_index
                                                           : spec.task_index;
    return spec;
  }
  // Not a trainer: the type must still name a cluster entry and the index be within it.
  const JsonValue* members = cluster->Find(t);
  if (members == nullptr) {
    return SpecError(source, absl::StrCat("task.type '", t, "' names no entry of cluster"));
  }
  const size_t count = members->is_array() ? members->size() : (members->is_string() ? 1 : 0);
  if (static_cast<size_t>(spec.task_index) >= count) {
    return SpecError(source, absl::StrCat("task.index ", spec.task_index, " out of range for ",
                                          count, " cluster.", t, " entries"));
  }
  return spec;
}

ClusterSpecSources ClusterSpecSources::FromProcess() {
  ClusterSpecSources s;
  s.getenv = [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
  s.read_file = [](const std::string& path) -> absl::StatusOr<std::string> {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      return absl::NotFoundError(
          absl::StrCat("cannot open cluster spec file ", path, ": ", std::strerror(errno)));
    }
    std::ostringstream text;
    text << in.rdbuf();
    if (in.bad()) return absl::DataLossError(absl::StrCat("cannot read ", path));
    return text.str();
  };
  return s;
}

absl::StatusOr<ClusterConfig> ResolveClusterConfig(const ClusterSpecSources& sources) {
  std::vector<Layer> layers;

  // 1. Flags, each field its own source.
  Layer flags;
  flags.coordinator = sources.flag_coordinator;
  flags.consumer_index = sources.flag_consumer_index;
  flags.num_consumers = sources.flag_num_consumers;
  layers.push_back(flags);

  // 2./3. One JSON spec: the file, else SLUICE_CLUSTER, else TF_CONFIG.
  if (!sources.spec_file.empty()) {
    if (!sources.read_file) return absl::InternalError("ClusterSpecSources.read_file is unset");
    ASSIGN_OR_RETURN(std::string text, sources.read_file(sources.spec_file));
    ASSIGN_OR_RETURN(Layer layer, JsonLayer(text, "--cluster_spec=" + sources.spec_file));
    layers.push_back(std::move(layer));
  }
  if (!sources.getenv) return absl::InternalError("ClusterSpecSources.getenv is unset");
  for (const char* name : {"SLUICE_CLUSTER", "TF_CONFIG"}) {
    std::optional<std::string> text = EnvString(sources, name);
    if (!text.has_value()) continue;
    ASSIGN_OR_RETURN(Layer layer, JsonLayer(*text, name));
    layers.push_back(std::move(layer));
    break;
  }

  // 4. Plain Sluice environment variables.
  {
    Layer env;
    env.source = "env";
    env.coordinator = EnvString(sources, "SLUICE_COORDINATOR");
    ASSIGN_OR_RETURN(env.consumer_index, EnvInt(sources, "SLUICE_CONSUMER_INDEX"));
    ASSIGN_OR_RETURN(env.num_consumers, EnvInt(sources, "SLUICE_NUM_CONSUMERS"));
    layers.push_back(env);
  }

  // 5. Slurm: one trainer per task of the step.
  {
    ASSIGN_OR_RETURN(std::optional<int64_t> procid, EnvInt(sources, "SLURM_PROCID"));
    ASSIGN_OR_RETURN(std::optional<int64_t> ntasks, EnvInt(sources, "SLURM_NTASKS"));
    if (procid.has_value() && ntasks.has_value()) {
      Layer slurm;
      slurm.source = "SLURM_PROCID/SLURM_NTASKS";
      slurm.consumer_index = procid;
      slurm.num_consumers = ntasks;
      layers.push_back(slurm);
    }
  }

  // 6. Kubernetes Indexed Job (the count comes from SLUICE_NUM_CONSUMERS, layer 4).
  {
    ASSIGN_OR_RETURN(std::optional<int64_t> index, EnvInt(sources, "JOB_COMPLETION_INDEX"));
    if (index.has_value()) {
      Layer k8s;
      k8s.source = "JOB_COMPLETION_INDEX";
      k8s.consumer_index = index;
      layers.push_back(k8s);
    }
  }

  ClusterConfig config;
  bool have_coordinator = false, have_index = false, have_count = false, have_role = false;
  for (const Layer& layer : layers) {
    const bool is_flags = &layer == &layers[0];
    if (!have_coordinator && layer.coordinator.has_value()) {
      config.coordinator_address = *layer.coordinator;
      config.coordinator_source = is_flags ? "--coordinator" : layer.source;
      have_coordinator = true;
    }
    if (!have_index && layer.consumer_index.has_value()) {
      config.consumer_index = *layer.consumer_index;
      config.consumer_index_source =
          is_flags ? "--consumer_index"
          : layer.source == "env" ? "SLUICE_CONSUMER_INDEX" : layer.source;
      have_index = true;
    }
    if (!have_count && layer.num_consumers.has_value()) {
      config.num_consumers = *layer.num_consumers;
      config.num_consumers_source =
          is_flags ? "--num_consumers"
          : layer.source == "env" ? "SLUICE_NUM_CONSUMERS" : layer.source;
      have_count = true;
    }
    if (!have_role && layer.role.has_value()) {
      config.role = *layer.role;
      config.role_source = layer.source;
      have_role = true;
    }
  }
  if (config.coordinator_source == "env") config.coordinator_source = "SLUICE_COORDINATOR";

  if (config.num_consumers < 1) {
    return absl::InvalidArgumentError(absl::StrCat(config.num_consumers_source,
                                                   ": the number of consumers must be at least "
                                                   "1, got ",
                                                   config.num_consumers));
  }
  if (config.consumer_index < 0 || config.consumer_index >= config.num_consumers) {
    return absl::InvalidArgumentError(absl::StrCat(
        config.consumer_index_source, ": consumer index ", config.consumer_index,
        " out of range for ", config.num_consumers, " consumers (from ",
        config.num_consumers_source, ")"));
  }
  return config;
}

}  // namespace sluice
