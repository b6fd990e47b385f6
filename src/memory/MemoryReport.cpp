#include "memory/MemoryReport.h"

#include <fmt/format.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/sgd.h>

#include "accumulate/ShadowAccumulator.h"
#include "memory/MemoryMeter.h"

namespace shadowgrad::memory {
namespace {

int64_t bytes_of(const at::Tensor& t) {
  return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0;
}

std::string mib_or_na(int64_t bytes) { return bytes < 0 ? "n/a" : fmt::format("{:.1f}", bytes / 1048576.0); }

} // namespace

int64_t tensor_bytes(const std::vector<at::Tensor>& tensors) {
  int64_t total = 0;
  for (const auto& t : tensors) total += bytes_of(t);
  return total;
}

int64_t optimizer_state_bytes(const torch::optim::Optimizer& optimizer) {
  int64_t total = 0;
  for (const auto& [key, state] : optimizer.state()) {
    if (auto* s = dynamic_cast<const torch::optim::AdamWParamState*>(state.get()))
      total += bytes_of(s->exp_avg()) + bytes_of(s->exp_avg_sq()) + bytes_of(s->max_exp_avg_sq());
    else if (auto* s = dynamic_cast<const torch::optim::AdamParamState*>(state.get()))
      total += bytes_of(s->exp_avg()) + bytes_of(s->exp_avg_sq()) + bytes_of(s->max_exp_avg_sq());
    else if (auto* s = dynamic_cast<const torch::optim::SGDParamState*>(state.get()))
      total += bytes_of(s->momentum_buffer());
  }
  return total;
}

MemoryReport make_report(const std::vector<at::Tensor>& params, const torch::optim::Optimizer& optimizer,
                         const accumulate::ShadowAccumulator& accumulator, const MemoryMeter& meter, int64_t steps) {
  MemoryReport r;
  for (const auto& p : params) r.param_count += p.numel();
  r.params_bytes = tensor_bytes(params);
  r.optimizer_state_bytes = optimizer_state_bytes(optimizer);
  r.grad_accumulator_bytes = accumulator.bytes();
  r.grad_reference_bytes = accumulator.reference_bytes();
  r.peak_bytes = meter.run_peak();
  r.peak_step_bytes = meter.max_step_peak();
  r.steps = steps;
  r.source = meter.source();
  return r;
}

std::string to_json(const MemoryReport& r) {
  return fmt::format(
      "{{\n"
      "  \"param_count\": {},\n"
      "  \"params_bytes\": {},\n"
      "  \"optimizer_state_bytes\": {},\n"
      "  \"grad_accumulator_bytes\": {},\n"
      "  \"weight_cast_cache_bytes\": {},\n"
      "  \"grad_reference_bytes\": {},\n"
      "  \"peak_bytes\": {},\n"
      "  \"peak_step_bytes\": {},\n"
      "  \"steps\": {},\n"
      "  \"source\": \"{}\"\n"
      "}}\n",
      r.param_count, r.params_bytes, r.optimizer_state_bytes, r.grad_accumulator_bytes, r.weight_cast_cache_bytes,
      r.grad_reference_bytes, r.peak_bytes, r.peak_step_bytes, r.steps, r.source);
}

std::string format_table(const MemoryReport& r) {
  const std::pair<const char*, int64_t> rows[] = {
      {"params", r.params_bytes},
      {"optimizer state", r.optimizer_state_bytes},
      {"grad accumulator (shadow)", r.grad_accumulator_bytes},
      {"weight cast cache", r.weight_cast_cache_bytes},
      {"fp32 reference (fidelity)", r.grad_reference_bytes},  // grad_fidelity_period steps only
      {"peak, largest step", r.peak_step_bytes},
      {"peak, whole run", r.peak_bytes},
  };
  std::string out = fmt::format("memory ({} parameters, {} step(s), {})\n", r.param_count, r.steps, r.source);
  out += fmt::format("  {:<27} {:>10} {:>14}\n", "", "MiB", "bytes");
  for (const auto& [name, bytes] : rows) out += fmt::format("  {:<27} {:>10} {:>14}\n", name, mib_or_na(bytes), bytes);
  return out;
}

} // namespace shadowgrad::memory
