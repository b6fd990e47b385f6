#include "checkpoint/FlatOptimizerState.h"

#include <algorithm>
#include <memory>
#include <stdexcept>

#include <ATen/ATen.h>
#include <c10/util/string_utils.h>
#include <fmt/format.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include "checkpoint/Archive.h"
#include "checkpoint/Manifest.h"
#include "util/OptimizerStateKey.h"

namespace shadowgrad::checkpoint {
namespace {

using torch::optim::OptimizerParamState;

const char* const kFieldNames[] = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer"};

// The per-parameter state of one optimizer kind, seen through names.
struct StateOps {
  virtual ~StateOps() = default;
  virtual std::unique_ptr<OptimizerParamState> create() const = 0;
  virtual int64_t step(OptimizerParamState&) const { return 0; }
  virtual void set_step(OptimizerParamState&, int64_t) const {}
  virtual at::Tensor field(OptimizerParamState&, const std::string& name) const = 0;  // undefined when absent
  virtual void set_field(OptimizerParamState&, const std::string& name, const at::Tensor& t) const = 0;
};

template <class S>
struct AdamOps : StateOps {  // AdamParamState and AdamWParamState have the same fields
  std::unique_ptr<OptimizerParamState> create() const override { return std::make_unique<S>(); }
  int64_t step(OptimizerParamState& s) const override { return static_cast<S&>(s).step(); }
  void set_step(OptimizerParamState& s, int64_t v) const override { static_cast<S&>(s).step(v); }
  at::Tensor field(OptimizerParamState& s, const std::string& name) const override {
    auto& a = static_cast<S&>(s);
    if (name == "exp_avg") return a.exp_avg();
    if (name == "exp_avg_sq") return a.exp_avg_sq();
    if (name == "max_exp_avg_sq") return a.max_exp_avg_sq();
    return {};
  }
  void set_field(OptimizerParamState& s, const std::string& name, const at::Tensor& t) const override {
    auto& a = static_cast<S&>(s);
    if (name == "exp_avg") a.exp_avg(t);
    if (name == "exp_avg_sq") a.exp_avg_sq(t);
    if (name == "max_exp_avg_sq") a.max_exp_avg_sq(t);
  }
};

struct SgdOps : StateOps {
  std::unique_ptr<OptimizerParamState> create() const override {
    return std::make_unique<torch::optim::SGDParamState>();
  }
  at::Tensor field(OptimizerParamState& s, const std::string& name) const override {
    return name == "momentum_buffer" ? static_cast<torch::optim::SGDParamState&>(s).momentum_buffer() : at::Tensor();
  }
  void set_field(OptimizerParamState& s, const std::string& name, const at::Tensor& t) const override {
    if (name == "momentum_buffer") static_cast<torch::optim::SGDParamState&>(s).momentum_buffer(t);
  }
};

const StateOps& ops_for(const torch::optim::Optimizer& optimizer) {
  static const AdamOps<torch::optim::AdamWParamState> adamw;  // FusedAdamW is an AdamW
  static const AdamOps<torch::optim::AdamParamState> adam;
  static const SgdOps sgd;
  if (dynamic_cast<const torch::optim::AdamW*>(&optimizer)) return adamw;
  if (dynamic_cast<const torch::optim::Adam*>(&optimizer)) return adam;
  if (dynamic_cast<const torch::optim::SGD*>(&optimizer)) return sgd;
  throw std::invalid_argument("optimizer state: only Adam, AdamW and SGD can be resharded");
}


// Calls fn(param, offset of its first element, lo, hi) for each parameter holding part of [begin, begin + count),
// where [lo, hi) is that part in flat indices.
template <class F>
void for_each_overlap(const torch::optim::Optimizer& optimizer, int64_t begin, int64_t count, F&& fn) {
  int64_t offset = 0;
  for (const auto& group : optimizer.param_groups())
    for (const auto& p : group.params()) {
      const int64_t lo = std::max(begin, offset), hi = std::min(begin + count, offset + p.numel());
      if (lo < hi) fn(p, offset, lo, hi);
      offset += p.numel();
    }
}

} // namespace

int64_t flat_size(const torch::optim::Optimizer& optimizer) {
  int64_t n = 0;
  for (const auto& group : optimizer.param_groups())
    for (const auto& p : group.params()) n += p.numel();
  return n;
}

FlatOptimizerState flatten(torch::optim::Optimizer& optimizer, int64_t begin, int64_t count) {
  const StateOps& ops = ops_for(optimizer);
  FlatOptimizerState out;
  out.begin = begin;
  out.count = count;
  bool seen = false;
  at::NoGradGuard no_grad;
  for_each_overlap(optimizer, begin, count, [&](const at::Tensor& p, int64_t offset, int64_t lo, int64_t hi) {
    auto it = optimizer.state().find(util::optimizer_state_key(p));
    if (it == optimizer.state().end()) return;  // no update reached this parameter yet: zeros
    const int64_t step = ops.step(*it->second);
    if (seen && step != out.step)
      throw std::invalid_argument(fmt::format("optimizer state: parameters disagree on the update count ({} vs {})",
                                              step, out.step));
    out.step = step;
    seen = true;
    for (const char* name : kFieldNames) {
      const at::Tensor t = ops.field(*it->second, name);
      if (!t.defined()) continue;
      auto f = std::find_if(out.fields.begin(), out.fields.end(), [&](const auto& kv) { return kv.first == name; });
      if (f == out.fields.end()) f = out.fields.insert(out.fields.end(), {name, at::zeros({count}, t.options())});
      f->second.narrow(0, lo - begin, hi - lo).copy_(t.reshape(-1).narrow(0, lo - offset, hi - lo));
    }
  });
  return out;
}

void unflatten_into(torch::optim::Optimizer& optimizer, int64_t at, const FlatOptimizerState& state) {
  if (state.fields.empty()) return;  // nothing was updated yet (or SGD without momentum): nothing to restore
  const StateOps& ops = ops_for(optimizer);
  at::NoGradGuard no_grad;
  for_each_overlap(optimizer, at, state.count, [&](const at::Tensor& p, int64_t offset, int64_t lo, int64_t hi) {
    auto& slot = optimizer.state()[util::optimizer_state_key(p)];
    if (!slot) slot = ops.create();
    ops.set_step(*slot, state.step);
    for (const auto& [name, flat] : state.fields) {
      at::Tensor dst = ops.field(*slot, name);
      if (!dst.defined() || !dst.is_contiguous()) {
        dst = dst.defined() ? dst.contiguous() : at::zeros_like(p, at::MemoryFormat::Contiguous);
        ops.set_field(*slot, name, dst);
      }
      dst.view(-1).narrow(0, lo - offset, hi - lo).copy_(flat.narrow(0, lo - at, hi - lo));
    }
  });
}

void write_flat_state(torch::serialize::OutputArchive& archive, const FlatOptimizerState& state, int64_t total) {
  archive.write("begin", c10::IValue(state.begin));
  archive.write("count", c10::IValue(state.count));
  archive.write("total", c10::IValue(total));
  archive.write("step", c10::IValue(state.step));
  for (const auto& [name, t] : state.fields) archive.write("field." + name, t);
}

FlatOptimizerState read_flat_state(const std::string& bytes, const std::string& file, int64_t* total) {
  FlatOptimizerState s;
  deserialize(bytes, file, [&](torch::serialize::InputArchive& archive) {
    auto read_int = [&](const char* key) {
      c10::IValue v;
      if (!archive.try_read(key, v) || !v.isInt())
        throw CorruptCheckpointError(fmt::format("optimizer shard '{}' has no '{}'", file, key));
      return v.toInt();
    };
    s.begin = read_int("begin");
    s.count = read_int("count");
    *total = read_int("total");
    s.step = read_int("step");
    if (s.begin < 0 || s.count < 0 || s.step < 0 || *total < 0 || s.begin > *total - s.count)
      throw CorruptCheckpointError(fmt::format("optimizer shard '{}' holds elements [{}, {}) of {} at update {}", file,
                                               s.begin, s.begin + s.count, *total, s.step));
    for (const char* name : kFieldNames) {
      at::Tensor t;
      if (!archive.try_read(std::string("field.") + name, t)) continue;
      if (t.dim() != 1 || t.numel() != s.count || !t.is_floating_point())
        throw CorruptCheckpointError(fmt::format("optimizer shard '{}': field {} is {}, expected {} floating-point "
                                                 "elements",
                                                 file, name, c10::str(t.scalar_type(), t.sizes()), s.count));
      s.fields.emplace_back(name, t);
    }
  });
  return s;
}

void check_state_shapes(torch::optim::Optimizer& optimizer, const std::string& file) {
  const StateOps* ops = nullptr;
  try {
    ops = &ops_for(optimizer);
  } catch (const std::invalid_argument&) {
    return;  // a kind whose fields we do not know: LibTorch's own load() is all there is
  }
  for (const auto& group : optimizer.param_groups())
    for (const auto& p : group.params()) {
      auto it = optimizer.state().find(util::optimizer_state_key(p));
      if (it == optimizer.state().end()) continue;
      if (ops->step(*it->second) < 0)
        throw CorruptCheckpointError(fmt::format("checkpoint file '{}' is corrupt: an update count of {}", file,
                                                 ops->step(*it->second)));
      for (const char* name : kFieldNames) {
        const at::Tensor t = ops->field(*it->second, name);
        if (t.defined() && (t.sizes() != p.sizes() || !t.is_floating_point()))
          throw CorruptCheckpointError(fmt::format("checkpoint file '{}' is corrupt: optimizer field {} is {} for a "
                                                   "parameter of {}",
                                                   file, name, c10::str(t.scalar_type(), t.sizes()), c10::str(p.sizes())));
      }
    }
}

} // namespace shadowgrad::checkpoint
