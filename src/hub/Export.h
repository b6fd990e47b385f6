#pragma once
// A trained model out to a Hugging Face directory that transformers' from_pretrained loads with no missing or
// unexpected keys: config.json (both rope forms), model.safetensors (or shards with model.safetensors.index.json),
// and the tokenizer and generation files the run carried from its model directory.
//
//   export_model_dir(cfg, *model, run_dir, out_dir, {"auto", 5LL << 30});
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "config/Config.h"

namespace torch::nn {
class Module;
}

namespace shadowgrad::hub {

struct ExportOptions {
  // float32 | bfloat16 | float16 | auto: the dtype the model came in (config.json), else the weight dtype.
  std::string dtype = "auto";
  // Above this many bytes the weights are split into shards of at most this size (one tensor may exceed it).
  int64_t shard_bytes = int64_t(5) << 30;
};

// `model` is a Decoder built from `cfg` (the run's config.yml) holding the weights to write: its parameters, or with
// lora_rank > 0 its buffers (the frozen base) with each layer{i}_{w}_lora_a / _lora_b parameter pair merged into
// layer{i}_{w}. A run that started from a model directory keeps its family and extra config fields; a from-scratch
// run is written as LlamaForCausalLM.
void export_model_dir(const config::Config& cfg, torch::nn::Module& model, const std::string& run_dir,
                      const std::string& out_dir, const ExportOptions& options);

// Before an export writes into out_dir (export_hf's OUT_DIR): throws InputError when out_dir holds an export of the
// other kind, which would mix with this one into a directory that loads as neither (a merged model: config.json or
// model*.safetensors; a peft adapter: adapter_config.json or adapter_model.safetensors), or when it is one of
// `protected_dirs` (the run's base model directory, which a merged export would overwrite). An export of the same
// kind is replaced (export_model_dir drops stale shards). Nothing when out_dir does not exist.
//
//   check_export_destination(out_dir, /*adapter=*/false, {recorded_base_dir(run_dir)});
void check_export_destination(const std::string& out_dir, bool adapter, const std::vector<std::string>& protected_dirs);

// weight + scale * (b @ a), all in fp32 (peft's merge order: the product, then the scale, then the sum), for the
// export to round once to its dtype. a is [r, in], b is [out, r], weight [out, in] of any floating dtype.
at::Tensor merge_lora(const at::Tensor& weight, const at::Tensor& a, const at::Tensor& b, double scale);

} // namespace shadowgrad::hub
