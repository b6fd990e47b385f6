#pragma once
// How much of a fine-tune an export keeps. Written in bf16, a weight moves only by whole bf16 steps: an update smaller
// than half a step (common in fp32 at learning rate 1e-5) rounds back to the starting value and is lost. The figure
//
//     survival = ||export - start|| / ||master - start||     (Frobenius, over every exported tensor together)
//
// compares what the export moved against what training moved: 1 for a float32 export, lower as updates vanish. The
// start is the model directory the run began from (run_dir/hf/source.json names it), read through SafeTensorsFile;
// the export is read back from the files just written, so the figure is of what is on disk.
//
//   export_model_dir(cfg, *model, run_dir, out_dir, options);
//   const ExportSurvival s = measure_export_survival(cfg, run_dir, out_dir, *model);
//   if (s.measured && s.fraction < kSurvivalWarning) ... suggest --dtype float32
#include <cstdint>
#include <string>

#include "config/Config.h"

namespace torch::nn {
class Module;
}

namespace shadowgrad::hub {

// Below this, export_hf warns and names --dtype float32.
inline constexpr double kSurvivalWarning = 0.9;

struct ExportSurvival {
  bool measured = false;
  std::string why_not;        // when not measured: no start recorded (a from-scratch run), the start moved, ...
  double fraction = 0;        // ||export - start|| / ||master - start||
  double update_norm = 0;     // ||master - start||
  int64_t tensors = 0;        // compared
  std::string start_dir;      // the model directory the run began from
  std::string export_dtype;   // as the export's safetensors say: F32, BF16, F16 (the first tensor's)
};

// `model` (built from `cfg`, the run's config) holds the masters the export was written from, by our parameter names;
// with lora_rank > 0 a written weight's master is its frozen base (a buffer) with its adapters merged in, in fp32, as
// export_model_dir merges them. out_dir is the export (config.json and its model*.safetensors). Not measured (why_not
// says why) when the run has no hf/source.json, when the start's weight files are gone or differ in size from what
// source.json recorded, when the export and the start do not hold the same tensors, or when training moved nothing
// (||master - start|| = 0).
ExportSurvival measure_export_survival(const config::Config& cfg, const std::string& run_dir,
                                       const std::string& out_dir, torch::nn::Module& model);

} // namespace shadowgrad::hub
