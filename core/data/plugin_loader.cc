#include "core/data/plugin_loader.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data/op_iterator.h"
#include "core/util/status_macros.h"

// The host side of a transform call: the output being built and the plugin's error.
struct SluiceOutput {
  sluice::Tensor tensor;
  bool allocated = false;
  std::string error;
};

namespace sluice {
namespace {

bool ValidDType(int32_t d) { return d > 0 && d <= static_cast<int32_t>(DType::kString); }

void* HostAllocate(SluiceOutput* out, int32_t dtype, int32_t rank, const int64_t* dims) {
  if (out->allocated) {
    out->error = "allocate_output called twice";
    return nullptr;
  }
  if (!ValidDType(dtype)) {
    out->error = absl::StrCat("allocate_output: unknown dtype ", dtype);
    return nullptr;
  }
  if (rank < 0 || rank > SLUICE_PLUGIN_MAX_RANK || (rank > 0 && dims == nullptr)) {
    out->error = absl::StrCat("allocate_output: bad rank ", rank);
    return nullptr;
  }
  std::vector<int64_t> d(dims, dims + rank);
  int64_t n = 1;
  for (int64_t x : d) {
    if (x < 0 || (x != 0 && n > (int64_t{1} << 40) / x)) {
      out->error = absl::StrCat("allocate_output: bad dimension ", x);
      return nullptr;
    }
    n *= x;
  }
  absl::StatusOr<Tensor> t =
      Tensor::TryAllocate(static_cast<DType>(dtype), Shape(std::move(d)), "allocate_output");
  if (!t.ok()) {
    out->error = std::string(t.status().message());
    return nullptr;
  }
  out->tensor = *std::move(t);
  out->allocated = true;
  if (dtype == SLUICE_DT_STRING) return nullptr;
  return out->tensor.mutable_raw_data();
}

int HostSetString(SluiceOutput* out, int64_t index, const char* data, size_t length) {
  if (!out->allocated || out->tensor.dtype() != DType::kString || index < 0 ||
      index >= out->tensor.num_elements()) {
    return -1;
  }
  out->tensor.mutable_string(index)->assign(data, length);
  return 0;
}

void HostSetError(SluiceOutput* out, const char* message) {
  out->error = message != nullptr ? message : "(no message)";
}

const SluiceHost kHost = {&HostAllocate, &HostSetString, &HostSetError};

std::string ErrorText(const char* buffer) {
  std::string s(buffer);
  return s.empty() ? "(no reason given)" : s;
}

// A plugin op with its state, as a map fn.
class PluginComponentFn : public ComponentFn {
 public:
  PluginComponentFn(const SluiceOpDef* op, void* state, std::string op_name)
      : op_(op), state_(state), op_name_(std::move(op_name)) {}
  ~PluginComponentFn() override {
    if (op_->destroy != nullptr) op_->destroy(state_);
  }
  PluginComponentFn(const PluginComponentFn&) = delete;
  PluginComponentFn& operator=(const PluginComponentFn&) = delete;

  std::string Describe() const override { return absl::StrCat("plugin('", op_name_, "')"); }

  absl::StatusOr<ElementSpec> OutputSpec(const TensorSpec& input) const override {
    int32_t dtype = 0;
    int32_t rank = 0;
    int64_t dims[SLUICE_PLUGIN_MAX_RANK] = {};
    char error[512] = {};
    const std::vector<int64_t>& in = input.shape.dims();
    if (op_->output_spec(state_, static_cast<int32_t>(input.dtype), input.shape.rank(),
                         in.data(), &dtype, &rank, dims, error, sizeof(error) - 1) != 0) {
      return absl::InvalidArgumentError(ErrorText(error));
    }
    if (!ValidDType(dtype) || rank < 0 || rank > SLUICE_PLUGIN_MAX_RANK) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the plugin's output_spec gave dtype ", dtype, " and rank ", rank));
    }
    std::vector<int64_t> out(dims, dims + rank);
    for (int64_t& d : out) {
      if (d < 0) d = kUnknownDim;
    }
    return ElementSpec(TensorSpec{static_cast<DType>(dtype), Shape(std::move(out))});
  }

  absl::StatusOr<Element> Apply(const Tensor& input) const override {
    SluiceTensorView view = {};
    view.dtype = static_cast<int32_t>(input.dtype());
    view.rank = input.shape().rank();
    view.dims = input.shape().dims().data();
    view.num_elements = input.num_elements();
    std::vector<const char*> strings;
    std::vector<size_t> lengths;
    if (input.dtype() == DType::kString) {
      strings.reserve(static_cast<size_t>(view.num_elements));
      lengths.reserve(static_cast<size_t>(view.num_elements));
      for (int64_t i = 0; i < view.num_elements; ++i) {
        strings.push_back(input.string_at(i).data());
        lengths.push_back(input.string_at(i).size());
      }
      view.strings = strings.data();
      view.string_lengths = lengths.data();
    } else {
      view.data = input.raw_data();
    }
    SluiceOutput out;
    const int rc = op_->transform(state_, &view, &kHost, &out);
    if (rc != 0 || !out.error.empty()) {
      return absl::InvalidArgumentError(
          out.error.empty() ? absl::StrCat("the op failed with code ", rc) : out.error);
    }
    if (!out.allocated) {
      return absl::InvalidArgumentError("the op returned without allocating an output");
    }
    return Element(std::move(out.tensor));
  }

 private:
  const SluiceOpDef* const op_;
  void* const state_;
  const std::string op_name_;
};

}  // namespace

PluginRegistry& PluginRegistry::Global() {
  static auto* registry = new PluginRegistry();
  return *registry;
}

absl::Status PluginRegistry::Register(const SluicePlugin* plugin, const std::string& source) {
  if (plugin == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("plugin ", source, ": ", SLUICE_PLUGIN_INIT_SYMBOL, "() returned NULL"));
  }
  if (plugin->api_version != SLUICE_PLUGIN_API_VERSION) {
    return absl::FailedPreconditionError(absl::StrCat(
        "plugin ", source, " was built against Sluice plugin API version ", plugin->api_version,
        "; this build supports version ", SLUICE_PLUGIN_API_VERSION, " (rebuild the plugin)"));
  }
  if (plugin->num_ops < 0 || (plugin->num_ops > 0 && plugin->ops == nullptr)) {
    return absl::FailedPreconditionError(
        absl::StrCat("plugin ", source, ": bad op table (num_ops ", plugin->num_ops, ")"));
  }
  absl::MutexLock lock(&mu_);
  std::vector<std::string> names;
  for (int32_t i = 0; i < plugin->num_ops; ++i) {
    const SluiceOpDef& op = plugin->ops[i];
    if (op.name == nullptr || op.name[0] == '\0' || op.create == nullptr ||
        op.output_spec == nullptr || op.transform == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "plugin ", source, ": op ", i, " lacks a name, create, output_spec or transform"));
    }
    std::string name = op.name;
    if (ops_.contains(name) || std::find(names.begin(), names.end(), name) != names.end()) {
      return absl::AlreadyExistsError(absl::StrCat(
          "plugin ", source, ": op '", name, "' is already registered by another plugin"));
    }
    names.push_back(std::move(name));
  }
  for (int32_t i = 0; i < plugin->num_ops; ++i) ops_[plugin->ops[i].name] = &plugin->ops[i];
  return absl::OkStatus();
}

absl::Status PluginRegistry::Load(const std::string& path) {
  {
    absl::MutexLock lock(&mu_);
    if (std::find(loaded_paths_.begin(), loaded_paths_.end(), path) != loaded_paths_.end()) {
      return absl::OkStatus();
    }
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("plugin ", path, ": no such file"));
  }
  // A path without '/' would make dlopen search the library path instead of reading the file.
  const std::string open_path = path.find('/') == std::string::npos ? "./" + path : path;
  void* handle = ::dlopen(open_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    return absl::FailedPreconditionError(absl::StrCat("plugin ", path, ": cannot load: ",
                                                      why != nullptr ? why : "unknown error"));
  }
  void* symbol = ::dlsym(handle, SLUICE_PLUGIN_INIT_SYMBOL);
  if (symbol == nullptr) {
    ::dlclose(handle);
    return absl::FailedPreconditionError(
        absl::StrCat("plugin ", path, ": does not export ", SLUICE_PLUGIN_INIT_SYMBOL,
                     " (is it a Sluice plugin? see include/sluice/plugin_api.h)"));
  }
  auto init = reinterpret_cast<SluicePluginInitFn>(symbol);
  absl::Status s = Register(init(), path);
  if (!s.ok()) {
    ::dlclose(handle);
    return s;
  }
  // The handle stays open: the ops' code must outlive every iterator.
  absl::MutexLock lock(&mu_);
  loaded_paths_.push_back(path);
  return absl::OkStatus();
}

const SluiceOpDef* PluginRegistry::FindOp(absl::string_view name) const {
  absl::MutexLock lock(&mu_);
  auto it = ops_.find(name);
  return it == ops_.end() ? nullptr : it->second;
}

std::vector<std::string> PluginRegistry::OpNames() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> names;
  for (const auto& [name, op] : ops_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

absl::Status LoadPlugins(const std::vector<std::string>& paths) {
  for (const std::string& path : paths) {
    if (path.empty()) continue;
    RETURN_IF_ERROR(PluginRegistry::Global().Load(path));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ComponentFn>> MakePluginComponentFn(const proto::PluginFn& fn) {
  const SluiceOpDef* op = PluginRegistry::Global().FindOp(fn.op());
  if (op == nullptr) {
    std::vector<std::string> names = PluginRegistry::Global().OpNames();
    return absl::FailedPreconditionError(absl::StrCat(
        "plugin('", fn.op(), "'): no loaded plugin provides op '", fn.op(), "' (loaded ops: ",
        names.empty() ? "none" : absl::StrJoin(names, ", "),
        "); load its library with --plugin=PATH"));
  }
  std::vector<SluiceArg> args;
  args.reserve(static_cast<size_t>(fn.args_size()));
  for (const proto::PluginArg& a : fn.args()) {
    SluiceArg arg = {};
    arg.key = a.key().c_str();
    switch (a.value_case()) {
      case proto::PluginArg::kIntValue:
        arg.kind = SLUICE_ARG_INT;
        arg.int_value = a.int_value();
        arg.float_value = static_cast<double>(a.int_value());
        break;
      case proto::PluginArg::kFloatValue:
        arg.kind = SLUICE_ARG_FLOAT;
        arg.float_value = a.float_value();
        break;
      case proto::PluginArg::kStringValue:
        arg.kind = SLUICE_ARG_STRING;
        arg.string_value = a.string_value().c_str();
        break;
      case proto::PluginArg::kBoolValue:
        arg.kind = SLUICE_ARG_BOOL;
        arg.int_value = a.bool_value() ? 1 : 0;
        break;
      case proto::PluginArg::VALUE_NOT_SET:
        return absl::InvalidArgumentError(
            absl::StrCat("plugin('", fn.op(), "'): argument '", a.key(), "' has no value"));
    }
    args.push_back(arg);
  }
  char error[512] = {};
  void* state = op->create(args.data(), static_cast<int32_t>(args.size()), error,
                           sizeof(error) - 1);
  if (state == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("plugin('", fn.op(), "'): ", ErrorText(error)));
  }
  return std::unique_ptr<ComponentFn>(new PluginComponentFn(op, state, fn.op()));
}

}  // namespace sluice
