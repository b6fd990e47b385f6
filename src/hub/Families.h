#pragma once
// The Hugging Face architectures we train, as data: what each one's blocks have beyond Llama's, and the name of
// every tensor in its files. All four share Llama's tensor names; they differ in the optional tensors.
//
//   const Family* f = find_family("Qwen2ForCausalLM");          // null when unsupported
//   for (auto& [hf, ours] : tensor_names(*f, layers, tied)) ...  // "model.layers.0.self_attn.q_proj.weight" -> "layer0_wq"
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace shadowgrad::hub {

struct Family {
  const char* architecture;  // config.json "architectures"[0]
  const char* model_type;
  bool qkv_bias;             // q/k/v projections have biases (o_proj none)
  bool qk_norm;              // per-head RMSNorm of q and k before RoPE
  bool sliding_window;       // has a sliding_window field that must not cut attention inside max_target_length
  int64_t head_dim;          // a config.json without head_dim: transformers' default for the family (Qwen3Config's
                             // 128), or 0 for hidden_size / num_attention_heads
};

const Family* find_family(const std::string& architecture);
const std::vector<Family>& families();
// For a from-scratch run: LlamaForCausalLM.
const Family& llama_family();

// (Hugging Face name, our parameter name) of every tensor a model of this family holds; a tied model has no
// lm_head.weight.
std::vector<std::pair<std::string, std::string>> tensor_names(const Family& family, int64_t layers, bool tied);

} // namespace shadowgrad::hub
