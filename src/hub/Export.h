#pragma once
// A trained model out to a Hugging Face directory that transformers' from_pretrained loads with no missing or
// unexpected keys: config.json (both rope forms), model.safetensors (or shards with model.safetensors.index.json),
// and the tokenizer and generation files the run carried from its model directory.
//
//   export_model_dir(cfg, *model, run_dir, out_dir, {"auto", 5LL << 30});
#include <cstdint>
#include <string>

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

// weight + scale * (b @ a), all in fp32 (peft's merge order: the product, then the scale, then the sum), for the
// export to round once to its dtype. a is [r, in], b is [out, r], weight [out, in] of any floating dtype.
at::Tensor merge_lora(const at::Tensor& weight, const at::Tensor& a, const at::Tensor& b, double scale);

} // namespace shadowgrad::hub
