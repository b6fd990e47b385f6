#pragma once
// What a LoRA run adds to the decoder (docs/lora.md): for each targeted projection y = W x (+ b), a low-rank branch
// y += scale * B (A dropout(x)), with A [rank, in] and B [out, rank]. The base is frozen; only A and B train.
// The model reads these options as it reads attention_bias: it knows no file format (peft's lives in src/hub).
//
//   LoraOptions lora = LoraOptions::from_config(cfg);   // rank 0: none, every weight trains as before
//   if (lora.targets(Projection::q)) ...
#include <array>
#include <cstdint>
#include <string>

namespace shadowgrad::config {
struct Config;
}

namespace shadowgrad::model {

// The seven linear projections of a block, in the order Hugging Face lists them.
enum class Projection : int { q, k, v, o, gate, up, down };
constexpr int kProjections = 7;
constexpr std::array<Projection, kProjections> kAllProjections = {
    Projection::q, Projection::k, Projection::v, Projection::o, Projection::gate, Projection::up, Projection::down};

// Hugging Face's module name (q_proj, ..., down_proj), which lora_target_modules and peft use.
const char* hf_projection_name(Projection p);
// Our parameter suffix (wq, ..., w_down): layer{i}_{suffix} is the weight, layer{i}_{suffix}_lora_a/_lora_b the adapter.
const char* projection_suffix(Projection p);

struct LoraOptions {
  int64_t rank = 0;        // 0: no adapters
  double scale = 0;        // alpha / rank, or alpha / sqrt(rank) (rsLoRA)
  double dropout = 0;      // on the branch's input, while training
  uint64_t dropout_seed = 0;
  std::array<bool, kProjections> targeted{};

  bool enabled() const { return rank > 0; }
  bool targets(Projection p) const { return enabled() && targeted[static_cast<int>(p)]; }
  static LoraOptions from_config(const config::Config& cfg);
};

// "q_proj,v_proj" or "all-linear" -> the targeted set; throws ConfigError naming an unknown or empty entry.
std::array<bool, kProjections> parse_lora_targets(const std::string& list);
// The inverse, in Hugging Face order: "q_proj,k_proj,..."
std::string lora_targets_string(const std::array<bool, kProjections>& targeted);
// One spelling per targeted set, the one a checkpoint pins: "all-linear" for all seven, else lora_targets_string's
// ("v_proj, q_proj" -> "q_proj,v_proj"). Throws as parse_lora_targets.
std::string canonical_lora_targets(const std::string& list);

} // namespace shadowgrad::model
