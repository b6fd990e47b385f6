#include "hub/Families.h"

#include <fmt/format.h>

namespace shadowgrad::hub {

const std::vector<Family>& families() {
  static const std::vector<Family> all = {
      {"LlamaForCausalLM", "llama", false, false, false, 0},
      {"MistralForCausalLM", "mistral", false, false, true, 0},
      {"Qwen2ForCausalLM", "qwen2", true, false, true, 0},
      {"Qwen3ForCausalLM", "qwen3", false, true, true, 128},
  };
  return all;
}

const Family* find_family(const std::string& architecture) {
  for (const auto& f : families())
    if (architecture == f.architecture) return &f;
  return nullptr;
}

const Family& llama_family() { return families().front(); }

std::vector<std::pair<std::string, std::string>> tensor_names(const Family& family, int64_t layers, bool tied) {
  std::vector<std::pair<std::string, std::string>> names = {{"model.embed_tokens.weight", "embedding"}};
  for (int64_t i = 0; i < layers; ++i) {
    const std::string hf = fmt::format("model.layers.{}.", i), ours = fmt::format("layer{}_", i);
    auto add = [&](const std::string& a, const std::string& b) { names.emplace_back(hf + a, ours + b); };
    add("input_layernorm.weight", "attn_norm");
    add("self_attn.q_proj.weight", "wq");
    add("self_attn.k_proj.weight", "wk");
    add("self_attn.v_proj.weight", "wv");
    add("self_attn.o_proj.weight", "wo");
    if (family.qkv_bias) {
      add("self_attn.q_proj.bias", "bq");
      add("self_attn.k_proj.bias", "bk");
      add("self_attn.v_proj.bias", "bv");
    }
    if (family.qk_norm) {
      add("self_attn.q_norm.weight", "q_norm");
      add("self_attn.k_norm.weight", "k_norm");
    }
    add("post_attention_layernorm.weight", "mlp_norm");
    add("mlp.gate_proj.weight", "w_gate");
    add("mlp.up_proj.weight", "w_up");
    add("mlp.down_proj.weight", "w_down");
  }
  names.emplace_back("model.norm.weight", "final_norm");
  if (!tied) names.emplace_back("lm_head.weight", "output");
  return names;
}

} // namespace shadowgrad::hub
