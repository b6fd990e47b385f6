#pragma once
// A Hugging Face config.json of the Llama family, read in both transformers forms and written in both:
// v4 (rope_theta, rope_scaling, torch_dtype) and v5 (rope_parameters, dtype). transformers v4 reading a v5-only file
// silently falls back to theta = 10000, so a written file carries both.
//
//   HfConfig c = read_hf_config("model/config.json");   // ModelFileError on what we cannot train
//   write_hf_config("out/config.json", c);
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "hub/Families.h"
#include "model/RopeTable.h"

namespace shadowgrad::hub {

struct HfConfig {
  const Family* family = nullptr;
  int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_hidden_layers = 0;
  int64_t num_attention_heads = 0, num_key_value_heads = 0, head_dim = 0, max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000;
  model::RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  std::optional<int64_t> sliding_window;  // when the model attends only this far back
  std::string dtype = "float32";  // the dtype the weights were saved in (torch_dtype / dtype)
  // Everything else the file held (token ids, initializer_range, ...), carried to an export unchanged.
  nlohmann::json original = nlohmann::json::object();
};

// Reads and checks `path`. Refuses, naming the field and its value: an architecture outside Families.h, hidden_act
// other than silu, mlp_bias, attention_bias where the family has none, rope types other than default/linear/llama3.
HfConfig read_hf_config(const std::string& path);

// The JSON of `c`: `c.original` with every field we own overwritten, both rope forms.
nlohmann::json to_json(const HfConfig& c);
void write_json_file(const std::string& path, const nlohmann::json& j);

// The name transformers uses for a rope type ("default", "linear", "llama3").
const char* hf_rope_type(config::RopeType type);

} // namespace shadowgrad::hub
