#pragma once
// Where a training step's memory goes: the persistent trees (parameters, optimizer state, the GA
// shadow tree) counted from the tensors themselves, and the peaks measured by a MemoryMeter.
// Written to <run_dir>/memory_report.json and printed as a table.
//
//   MemoryReport r = make_report(model->parameters(), optimizer, accumulator, meter);
//   write_file_atomically(dir.file("memory_report.json"), to_json(r));
//   std::cout << format_table(r);
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace torch::optim {
class Optimizer;
}
namespace shadowgrad::accumulate {
class ShadowAccumulator;
}

namespace shadowgrad::memory {

class MemoryMeter;

struct MemoryReport {
  int64_t param_count = 0;
  int64_t params_bytes = 0;           // the master weights, in weight_dtype
  int64_t optimizer_state_bytes = 0;  // e.g. AdamW's two moments; created at the first update
  int64_t grad_accumulator_bytes = 0; // the shadow tree, in grad_dtype
  int64_t weight_cast_cache_bytes = 0;  // hoist_weight_cast: compute-dtype weights held during the GA loop
  int64_t grad_reference_bytes = 0;   // grad_fidelity_period: the fp32 reference tree, held during measured steps only
  int64_t peak_bytes = -1;            // whole run, including set-up; -1 when not measured
  int64_t peak_step_bytes = -1;       // the largest single-step peak
  int64_t steps = 0;                  // steps measured
  std::string source;                 // what measured the peaks
};

// Bytes of storage the tensors need (numel x element size; views are not deduplicated).
int64_t tensor_bytes(const std::vector<at::Tensor>& tensors);

// Bytes of torch::optim state for adam, adamw and sgd (momentum buffers); 0 before the first step.
int64_t optimizer_state_bytes(const torch::optim::Optimizer& optimizer);

MemoryReport make_report(const std::vector<at::Tensor>& params, const torch::optim::Optimizer& optimizer,
                         const accumulate::ShadowAccumulator& accumulator, const MemoryMeter& meter, int64_t steps);

// A JSON object, one key per line.
std::string to_json(const MemoryReport& report);
// A small aligned table in MiB (and exact bytes), for the console.
std::string format_table(const MemoryReport& report);

} // namespace shadowgrad::memory
