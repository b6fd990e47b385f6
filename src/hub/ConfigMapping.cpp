#include "hub/ConfigMapping.h"

#include <map>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "config/ConfigLoader.h"
#include "hub/SafeTensors.h"
#include "util/Errors.h"

namespace shadowgrad::hub {

namespace {

template <class T>
void adopt(config::Config& cfg, const char* key, T& field, T value, const char* hf_field, const std::string& dir) {
  if (cfg.given_keys.count(key) && field != value)
    throw ConfigError(fmt::format("{}={} was given, but load_parameters_path={} has {}={} in config.json; drop {} "
                                  "(the model's shape comes from its config.json)",
                                  key, field, dir, hf_field, value, key));
  field = value;
}

} // namespace

void refuse_past_sliding_window(const HfConfig& hf, int64_t context, const std::string& config_json,
                                const std::string& context_key) {
  if (hf.sliding_window && *hf.sliding_window < context)
    throw ConfigError(fmt::format("{}: sliding_window = {} is shorter than {}={}: shadowgrad attends to the whole "
                                  "sequence, so past the window the model would not be the one trained; set {} <= {}",
                                  config_json, *hf.sliding_window, context_key, context, context_key,
                                  *hf.sliding_window));
}

void apply_hf_config(const HfConfig& hf, config::Config& cfg, const std::string& dir) {
  adopt<int64_t>(cfg, "vocab_size", cfg.vocab_size, hf.vocab_size, "vocab_size", dir);
  adopt<int64_t>(cfg, "base_emb_dim", cfg.base_emb_dim, hf.hidden_size, "hidden_size", dir);
  adopt<int64_t>(cfg, "base_num_query_heads", cfg.base_num_query_heads, hf.num_attention_heads, "num_attention_heads", dir);
  adopt<int64_t>(cfg, "base_num_kv_heads", cfg.base_num_kv_heads, hf.num_key_value_heads, "num_key_value_heads", dir);
  adopt<int64_t>(cfg, "head_dim", cfg.head_dim, hf.head_dim, "head_dim", dir);
  adopt<int64_t>(cfg, "base_mlp_dim", cfg.base_mlp_dim, hf.intermediate_size, "intermediate_size", dir);
  adopt<int64_t>(cfg, "base_num_decoder_layers", cfg.base_num_decoder_layers, hf.num_hidden_layers, "num_hidden_layers", dir);
  adopt<double>(cfg, "normalization_layer_epsilon", cfg.normalization_layer_epsilon, hf.rms_norm_eps, "rms_norm_eps", dir);
  adopt<double>(cfg, "rope_max_timescale", cfg.rope_max_timescale, hf.rope_theta, "rope_theta", dir);
  if (cfg.given_keys.count("rope_type") && cfg.rope_type != hf.rope_scaling.type)
    throw ConfigError(fmt::format("rope_type={} was given, but load_parameters_path={} has rope_type {}", 
                                  config::to_string(cfg.rope_type), dir, hf_rope_type(hf.rope_scaling.type)));
  cfg.rope_type = hf.rope_scaling.type;
  if (hf.rope_scaling.type != config::RopeType::none) {
    adopt<double>(cfg, "rope_factor", cfg.rope_factor, hf.rope_scaling.factor, "factor", dir);
    adopt<double>(cfg, "rope_low_freq_factor", cfg.rope_low_freq_factor, hf.rope_scaling.low_freq_factor, "low_freq_factor", dir);
    adopt<double>(cfg, "rope_high_freq_factor", cfg.rope_high_freq_factor, hf.rope_scaling.high_freq_factor, "high_freq_factor", dir);
    adopt<int64_t>(cfg, "rope_original_max_position", cfg.rope_original_max_position,
                 hf.rope_scaling.original_max_position, "original_max_position_embeddings", dir);
  }
  adopt<bool>(cfg, "logits_via_embedding", cfg.logits_via_embedding, hf.tie_word_embeddings, "tie_word_embeddings", dir);
  adopt<bool>(cfg, "attention_bias", cfg.attention_bias, hf.family->qkv_bias, "architectures", dir);
  adopt<bool>(cfg, "use_qk_norm", cfg.use_qk_norm, hf.family->qk_norm, "architectures", dir);
  refuse_past_sliding_window(hf, cfg.max_target_length, dir + "/config.json", "max_target_length");
  if (hf.max_position_embeddings > 0 && cfg.max_target_length > hf.max_position_embeddings)
    spdlog::warn("max_target_length={} is above {}'s max_position_embeddings={}: positions past it were never trained "
                 "(RoPE extrapolates), so expect a higher loss there",
                 cfg.max_target_length, dir, hf.max_position_embeddings);
  config::validate(cfg);
}

HfConfig hf_config_from(const config::Config& cfg, const HfConfig* original, const std::string& dtype) {
  HfConfig c;
  if (original) {
    c = *original;
  } else {
    if (cfg.attention_bias && cfg.use_qk_norm)
      throw ConfigError("no supported Hugging Face family has both attention_bias and use_qk_norm");
    c.family = cfg.attention_bias ? find_family("Qwen2ForCausalLM")
               : cfg.use_qk_norm  ? find_family("Qwen3ForCausalLM")
                                  : &llama_family();
    c.max_position_embeddings = cfg.max_target_length;
  }
  c.vocab_size = cfg.vocab_size;
  c.hidden_size = cfg.base_emb_dim;
  c.intermediate_size = cfg.base_mlp_dim;
  c.num_hidden_layers = cfg.base_num_decoder_layers;
  c.num_attention_heads = cfg.base_num_query_heads;
  c.num_key_value_heads = cfg.base_num_kv_heads;
  c.head_dim = cfg.head_dim;
  c.rms_norm_eps = cfg.normalization_layer_epsilon;
  c.rope_theta = cfg.rope_max_timescale;
  c.rope_scaling = model::RopeScaling::from_config(cfg);
  c.tie_word_embeddings = cfg.logits_via_embedding;
  c.dtype = dtype;
  return c;
}

std::vector<std::pair<std::string, std::vector<int64_t>>> tensor_shapes(const HfConfig& hf) {
  auto width = [&](int64_t heads, const char* field) {  // a crafted config.json may make it overflow
    int64_t w = 0;
    if (__builtin_mul_overflow(heads, hf.head_dim, &w))
      throw ModelFileError(fmt::format("config.json: {} = {} x head_dim = {} is past 2^63", field, heads, hf.head_dim));
    return w;
  };
  const int64_t h = hf.hidden_size, q = width(hf.num_attention_heads, "num_attention_heads"),
                kv = width(hf.num_key_value_heads, "num_key_value_heads");
  const std::map<std::string, std::vector<int64_t>> by_role = {
      {"embedding", {hf.vocab_size, h}}, {"output", {hf.vocab_size, h}}, {"attn_norm", {h}}, {"mlp_norm", {h}},
      {"final_norm", {h}}, {"wq", {q, h}}, {"wk", {kv, h}}, {"wv", {kv, h}}, {"wo", {h, q}}, {"bq", {q}},
      {"bk", {kv}}, {"bv", {kv}}, {"q_norm", {hf.head_dim}}, {"k_norm", {hf.head_dim}},
      {"w_gate", {hf.intermediate_size, h}}, {"w_up", {hf.intermediate_size, h}}, {"w_down", {h, hf.intermediate_size}}};
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
  for (const auto& [name, ours] : tensor_names(*hf.family, hf.num_hidden_layers, hf.tie_word_embeddings)) {
    const auto layer_prefix = ours.rfind("layer", 0) == 0 ? ours.find('_') + 1 : 0;  // "layer0_wq" -> "wq"
    shapes.emplace_back(name, by_role.at(ours.substr(layer_prefix)));
  }
  return shapes;
}

} // namespace shadowgrad::hub
