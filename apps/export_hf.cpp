// export_hf RUN_DIR OUT_DIR [--step N | --best] [--dtype bfloat16|float32|float16|auto] [--adapter]: writes a run's checkpoint as
// a Hugging Face model directory (config.json, safetensors, the tokenizer files the run brought) that transformers'
// from_pretrained loads, a LoRA run's adapters merged in; with --adapter, a LoRA run's adapters alone as a peft
// adapter directory (docs/lora.md). Thin by design: parse, call src/hub, choose the exit code (docs/huggingface.md).
// Exit codes: 0 written; 1 runtime failure; 2 bad input (no run, no checkpoint, a damaged checkpoint, bad flag, an
// OUT_DIR holding the other kind of export or the run's base model).
#include <filesystem>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>
#include <c10/util/Exception.h>
#include <fmt/format.h>

#include "VersionLine.h"
#include "checkpoint/MetricsTail.h"
#include "config/ConfigLoader.h"
#include "hub/BaseRecord.h"
#include "hub/Export.h"
#include "hub/ExportSurvival.h"
#include "hub/ModelWeights.h"
#include "hub/PeftAdapter.h"
#include "model/Decoder.h"
#include "model/WeightCount.h"
#include "util/Errors.h"

namespace {

constexpr int kExitFailure = 1;
constexpr int kExitBadInput = 2;

int export_run(const std::string& run_dir, const std::string& out_dir, int64_t step, const std::string& dtype,
               bool adapter) {
  namespace sg = shadowgrad;
  if (std::filesystem::exists(out_dir) && !std::filesystem::is_directory(out_dir))
    throw sg::InputError(fmt::format("{}: exists and is not a directory; give OUT_DIR a new or existing directory",
                                     out_dir));
  const std::string config_path = run_dir + "/config.yml";
  if (!std::filesystem::exists(config_path))
    throw sg::InputError(fmt::format("{}: no config.yml: not a run directory", run_dir));
  // The run's own config: its model keys already hold the shape load_parameters_path gave it.
  auto cfg = sg::config::load_config(config_path, {});
  // The base as the run recorded it (absolute); a relative load_parameters_path in config.yml names a directory
  // relative to where the trainer ran, not to here.
  const std::string given_base =
      std::filesystem::path(cfg.load_parameters_path).is_absolute() ? cfg.load_parameters_path : "";
  sg::hub::check_export_destination(out_dir, adapter, {sg::hub::recorded_base_dir(run_dir), given_base});
  sg::model::refuse_weights_beyond_headroom(sg::model::DecoderOptions::from_config(cfg), run_dir);  // before building
  sg::model::Decoder model(sg::model::DecoderOptions::from_config(cfg));
  // The weights alone (no optimizer state), and nothing in the run directory touched: a trainer may be writing it.
  // A LoRA checkpoint holds the adapters: the merge needs the base the run was built on, the adapter directory not.
  auto sources = sg::hub::run_weights(cfg, run_dir, step);
  if (adapter) sources.base.clear();
  step = sg::hub::load_model_weights(sources, cfg, *model).step;
  if (adapter) {
    sg::hub::export_adapter(cfg, *model, run_dir, out_dir);
    std::cout << fmt::format("wrote the peft adapter {} from {} step {}\n", out_dir, run_dir, step);
    return 0;
  }
  sg::hub::ExportOptions options;
  options.dtype = dtype;
  sg::hub::export_model_dir(cfg, *model, run_dir, out_dir, options);
  std::cout << fmt::format("wrote {} from {} step {}\n", out_dir, run_dir, step);
  // What of the fine-tune the written dtype kept (hub/ExportSurvival.h); with LoRA, of the merged adapters.
  const auto survival = sg::hub::measure_export_survival(cfg, run_dir, out_dir, *model);
  if (!survival.measured) {
    std::cout << fmt::format("export survival: not measured: {}\n", survival.why_not);
    return 0;
  }
  std::cout << fmt::format("export survival {:.6f}: ||export - start|| / ||master - start|| over {} tensors, {} "
                           "written, start {}, ||master - start|| = {:.4g}\n",
                           survival.fraction, survival.tensors, survival.export_dtype, survival.start_dir,
                           survival.update_norm);
  if (survival.fraction < sg::hub::kSurvivalWarning)
    std::cerr << fmt::format("export_hf: warning: survival {:.6f} < {}: the {} export moved the weights by {:.1f}% "
                             "of what training moved them (an update under half a {} step rounds back to the start); "
                             "export with --dtype float32 to keep the fine-tune\n",
                             survival.fraction, sg::hub::kSurvivalWarning, survival.export_dtype,
                             100 * survival.fraction, survival.export_dtype);
  return 0;
}

// --best: the step of the lowest eval_loss in metrics.jsonl, whose checkpoint keep_best_checkpoint kept.
int64_t best_step(const std::string& run_dir) {
  namespace sg = shadowgrad;
  const auto evaluations = sg::checkpoint::read_evaluations(run_dir + "/metrics.jsonl");
  const auto* best = sg::checkpoint::best_evaluation(evaluations);
  if (!best)
    throw sg::InputError(fmt::format("{}: --best needs an eval_loss in metrics.jsonl, and the run has none (train with "
                                     "eval_interval=N and eval_dataset_path)",
                                     run_dir));
  const std::string dir = fmt::format("{}/checkpoints/step-{}", run_dir, best->step);
  if (!std::filesystem::exists(dir))
    throw sg::InputError(fmt::format("{}: the best eval_loss {:.6g} was at step {}, whose checkpoint is not there "
                                     "(rotated out: train with keep_best_checkpoint=true to keep it)",
                                     run_dir, best->eval_loss, best->step));
  std::cout << fmt::format("best eval_loss {:.6g} at step {}\n", best->eval_loss, best->step);
  return best->step;
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"Write a run's checkpoint as a Hugging Face model directory (config.json, model.safetensors or shards, "
               "tokenizer files).",
               "export_hf"};
  std::string run_dir, out_dir, dtype = "auto";
  int64_t step = -1;
  bool adapter = false, best = false;
  app.add_option("RUN_DIR", run_dir, "the run directory (holds config.yml and checkpoints/)")->required();
  app.add_option("OUT_DIR", out_dir, "where to write the model directory")->required();
  auto* step_option = app.add_option("--step", step, "checkpoint step to export (default: the latest)");
  app.add_flag("--best", best, "export the checkpoint of the lowest eval_loss in metrics.jsonl (a run trained with "
                               "keep_best_checkpoint=true keeps it)")
      ->excludes(step_option);
  app.add_option("--dtype", dtype, "float32, bfloat16, float16, or auto: the dtype the model came in, else the "
                                   "weight dtype")->capture_default_str();
  app.add_flag("--adapter", adapter, "a LoRA run: write its adapters as a peft directory (adapter_config.json, "
                                     "adapter_model.safetensors) instead of the merged model");
  app.set_version_flag("--version", version_line("export_hf"));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : kExitBadInput;
  }
  try {
    if (best) step = best_step(run_dir);
    return export_run(run_dir, out_dir, step, dtype, adapter);
  } catch (const shadowgrad::InputError& e) {
    std::cerr << "export_hf: error: " << e.what() << "\n";
    return kExitBadInput;
  } catch (const c10::Error& e) {
    std::cerr << "export_hf: error: " << e.what_without_backtrace() << "\n";
    return kExitFailure;
  } catch (const std::exception& e) {
    std::cerr << "export_hf: error: " << e.what() << "\n";
    return kExitFailure;
  }
}
