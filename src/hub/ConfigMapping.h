#pragma once
// Between a Hugging Face config.json (HfConfig) and the trainer's model keys (config::Config).
//
//   HfConfig hf = read_hf_config(dir + "/config.json");
//   apply_hf_config(hf, cfg, dir);              // cfg's model keys := the file's; a given key that differs throws
//   HfConfig out = hf_config_from(cfg, &hf);     // for an export (null: a from-scratch run, as Llama)
//   for (auto& [name, shape] : tensor_shapes(hf)) ...  // "model.embed_tokens.weight" -> {vocab_size, hidden_size}
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "config/Config.h"
#include "hub/HfConfig.h"

namespace shadowgrad::hub {

// Sets the model keys (width, heads, head_dim, MLP, layers, vocab, eps, RoPE, tie, biases, q/k norms) from `hf`.
// A key in cfg.given_keys with another value throws ConfigError naming both values. Refuses a sliding window shorter
// than max_target_length; warns when max_target_length exceeds max_position_embeddings. Validates cfg after.
void apply_hf_config(const HfConfig& hf, config::Config& cfg, const std::string& dir);

// Throws ConfigError when `hf` has a sliding window shorter than `context` (tokens attended at once): the trainer and
// the decoder attend to the whole sequence, so past the window the model is not the one trained. `config_json` and
// `context_key` (max_target_length, --max-length) name the two sides in the message. apply_hf_config checks it for
// training; generate checks it for a run (its hf/config.json) at the context it decodes to.
void refuse_past_sliding_window(const HfConfig& hf, int64_t context, const std::string& config_json,
                                const std::string& context_key);

// The HfConfig describing cfg's model: `original`'s family and extra fields when the run came from one, else the
// family the options need (Llama; Qwen2 for attention_bias, Qwen3 for use_qk_norm). `dtype`: the saved dtype name.
HfConfig hf_config_from(const config::Config& cfg, const HfConfig* original, const std::string& dtype);

// The Hugging Face name and shape of every tensor `hf` describes (tensor_names' order), as transformers shapes them:
// known from config.json alone, before any weight is read or allocated.
std::vector<std::pair<std::string, std::vector<int64_t>>> tensor_shapes(const HfConfig& hf);

} // namespace shadowgrad::hub
