#pragma once
// peft's LoRA adapter directory (adapter_config.json + adapter_model.safetensors; docs/lora.md, "Adapters in and
// out"), read strictly and written. The model knows nothing of this format: it has parameters layer{i}_{wq..w_down}
// _lora_a [r, in] and _lora_b [out, r]; the names peft gives them are derived here from Families.h's one name map.
//
//   AdapterConfig a = configure_from_adapter_dir(cfg);     // cfg.lora_restore_path's adapter_config.json -> cfg
//   load_adapter_weights(cfg.lora_restore_path, cfg, *model); // every targeted A and B, or ModelFileError naming it
//   export_adapter(cfg, *model, run_dir, out_dir);          // a directory PeftModel.from_pretrained loads
#include <array>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "config/Config.h"
#include "model/LoraOptions.h"

namespace torch::nn {
class Module;
}

namespace shadowgrad::hub {

// What the trainer takes from adapter_config.json. Everything else in the file is either harmless (task_type,
// base_model_name_or_path, inference_mode, init_lora_weights' plain forms, ...) or refused when read.
struct AdapterConfig {
  std::string path;  // the adapter_config.json read, for messages
  int64_t r = 0;
  double lora_alpha = 0;
  double lora_dropout = 0;
  bool use_rslora = false;
  std::string base_model_name_or_path;
  // target_modules, per projection (model::Projection order): the layers it names, or every layer. peft matches an
  // entry against a module's name or a dot-separated tail of it, so "q_proj", "self_attn.q_proj" and (as peft saves
  // "all-linear") "model.layers.3.self_attn.q_proj" are all read.
  struct Target {
    bool every_layer = false;
    std::set<int64_t> layers;
  };
  std::array<Target, model::kProjections> targets;

  // lora_target_modules' form of the targets ("all-linear" or a comma list), for a base of `layers` blocks. Throws
  // ModelFileError naming target_modules when a projection is adapted in some layers only (a LoRA run adapts each
  // target in every layer) or in a layer the base does not have.
  std::string target_modules(int64_t layers) const;
};

// Reads and checks dir/adapter_config.json. Throws ModelFileError naming the file and the field for: a peft_type
// other than LORA, a task_type other than CAUSAL_LM, use_dora, fan_in_fan_out, a bias other than "none", lora_bias,
// modules_to_save, rank_pattern, alpha_pattern, layers_to_transform, layers_pattern, exclude_modules,
// layer_replication, trainable_token_indices, target_parameters, an init_lora_weights that rewrites the base (pissa,
// olora, corda, loftq) or makes a variant (mica), any other LoRA variant, a target_modules string other than
// "all-linear" (peft reads it as a regex), a target that is not one of the seven projections of a layer (lm_head, an
// embedding), and a field this reader does not know holding a value (null, false and empty are let through).
AdapterConfig read_adapter_config(const std::string& dir);

// Sets lora_rank, lora_alpha, lora_use_rslora and lora_target_modules from `a`, as apply_hf_config sets the model
// keys: a key in cfg.given_keys with another value throws ConfigError naming both (targets are compared as sets, so
// all-linear equals the list of seven). Each value goes through its key's parser, so it passes the key's range check
// (lora_alpha in [0, 1e6]; ModelFileError naming the file and the field otherwise). The adapter's lora_dropout is
// the default of lora_dropout, as peft trains on with it; a lora_dropout given wins. The targets are resolved for
// cfg.base_num_decoder_layers (set from load_parameters_path first, when there is one). Validates cfg after.
void apply_adapter_config(const AdapterConfig& a, config::Config& cfg, const std::string& dir);

// read_adapter_config(cfg.lora_restore_path) then apply_adapter_config. ConfigError when it is not a directory.
AdapterConfig configure_from_adapter_dir(config::Config& cfg);

// One adapter tensor: its name in adapter_model.safetensors and the model's parameter it fills.
struct AdapterTensor {
  std::string peft;  // base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight
  std::string ours;  // layer0_wq_lora_a
};

// Every adapter tensor of a model with `layers` blocks and the targets of lora_target_modules `targets`, in file
// order: layer by layer, projections in Hugging Face order, A before B.
std::vector<AdapterTensor> adapter_tensor_names(int64_t layers, const std::string& targets);

// Copies dir/adapter_model.safetensors into `model`'s adapter parameters (F32, BF16 or F16 in the file; converted to
// the parameters' dtype). `cfg` gives the layers and targets (after configure_from_adapter_dir). peft's ".default."
// infix (lora_A.default.weight) is accepted. Throws ModelFileError naming the file and the tensor for a tensor that is
// missing, unexpected (another target, layer or kind, DoRA's magnitude, a bias) or given twice, or whose shape does
// not fit the base (A [r, in], B [out, r]); nothing is copied then. The legacy adapter_model.bin is not read.
void load_adapter_weights(const std::string& dir, const config::Config& cfg, torch::nn::Module& model);

// Writes out_dir/adapter_config.json (peft_type LORA, task_type CAUSAL_LM, base_model_name_or_path: the run's
// load_parameters_path from its hf/source.json, else "", r, lora_alpha, lora_dropout, target_modules as a list of
// Hugging Face names, bias none, fan_in_fan_out false, use_rslora, use_dora false, inference_mode true) and
// out_dir/adapter_model.safetensors (fp32, peft's names without an infix, metadata format=pt). Throws InputError when
// cfg.lora_rank is 0 (a run without adapters).
void export_adapter(const config::Config& cfg, torch::nn::Module& model, const std::string& run_dir,
                    const std::string& out_dir);

} // namespace shadowgrad::hub
