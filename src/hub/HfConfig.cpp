#include "hub/HfConfig.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "hub/SafeTensors.h"

namespace shadowgrad::hub {

namespace {

using nlohmann::json;

// One config.json being read: each accessor names the file and the field when the value is unusable.
struct Reader {
  const json& j;
  const std::string& path;

  [[noreturn]] void refuse(const std::string& field, const json& value, const std::string& why) const {
    throw ModelFileError(fmt::format("{}: {} = {}: {}", path, field, value.dump().substr(0, 80), why));
  }
  bool has(const char* key) const { return j.contains(key) && !j.at(key).is_null(); }
  int64_t integer(const char* key, std::optional<int64_t> fallback = std::nullopt) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      throw ModelFileError(fmt::format("{}: '{}' is missing", path, key));
    }
    const json& v = j.at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < 1) refuse(key, v, "expected a positive integer");
    return v.get<int64_t>();
  }
  double number(const json& obj, const char* key, double fallback, const std::string& where) const {
    if (!obj.contains(key) || obj.at(key).is_null()) return fallback;
    const json& v = obj.at(key);
    if (!v.is_number() || !(v.get<double>() > 0)) refuse(where + key, v, "expected a positive number");
    return v.get<double>();
  }
  bool flag(const char* key) const {
    if (!has(key)) return false;
    if (!j.at(key).is_boolean()) refuse(key, j.at(key), "expected true or false");
    return j.at(key).get<bool>();
  }
};

const Family& family_of(const Reader& r) {
  if (r.has("architectures")) {
    const json& a = r.j.at("architectures");
    if (!a.is_array() || a.size() != 1 || !a[0].is_string()) r.refuse("architectures", a, "expected one architecture");
    const Family* f = find_family(a[0].get<std::string>());
    if (!f) {
      std::string known;
      for (const auto& k : families()) known += std::string(known.empty() ? "" : ", ") + k.architecture;
      r.refuse("architectures", a, "not a supported family (" + known + ")");
    }
    return *f;
  }
  if (r.has("model_type") && r.j.at("model_type").is_string())
    for (const auto& f : families())
      if (r.j.at("model_type").get<std::string>() == f.model_type) return f;
  throw ModelFileError(fmt::format("{}: neither 'architectures' nor a supported 'model_type'", r.path));
}

// As transformers 5 reads them (RotaryEmbeddingConfigMixin.convert_rope_params_to_dict): a non-empty rope_scaling
// (v4), else rope_parameters (v5); rope_theta from that object, else the top-level rope_theta, else 10000; the type
// from rope_type, else the legacy type, else default.
void read_rope(const Reader& r, HfConfig& c) {
  const bool v4 = r.has("rope_scaling") && !(r.j.at("rope_scaling").is_object() && r.j.at("rope_scaling").empty());
  const json none = json::object();
  const json& params = v4 ? r.j.at("rope_scaling") : r.has("rope_parameters") ? r.j.at("rope_parameters") : none;
  const std::string where = v4 ? "rope_scaling." : "rope_parameters.";
  if (!params.is_object()) r.refuse(where.substr(0, where.size() - 1), params, "expected an object");
  c.rope_theta = r.number(params, "rope_theta", r.number(r.j, "rope_theta", 10000, ""), where);
  std::string type = "default";
  for (const char* key : {"type", "rope_type"})  // the last present wins
    if (params.contains(key) && params.at(key).is_string()) type = params.at(key).get<std::string>();
  if (type == "default") return;
  if (type == "linear") c.rope_scaling.type = config::RopeType::linear;
  else if (type == "llama3") c.rope_scaling.type = config::RopeType::llama3;
  else r.refuse(where + "rope_type", type, "supported rope types are default, linear and llama3");
  c.rope_scaling.factor = r.number(params, "factor", 1, where);
  if (c.rope_scaling.type == config::RopeType::llama3) {
    c.rope_scaling.low_freq_factor = r.number(params, "low_freq_factor", 1, where);
    c.rope_scaling.high_freq_factor = r.number(params, "high_freq_factor", 4, where);
    c.rope_scaling.original_max_position =
        int64_t(r.number(params, "original_max_position_embeddings", 8192, where));
    if (!(c.rope_scaling.high_freq_factor > c.rope_scaling.low_freq_factor))
      r.refuse(where + "high_freq_factor", c.rope_scaling.high_freq_factor, "must exceed low_freq_factor");
  }
}

} // namespace

HfConfig read_hf_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ModelFileError(fmt::format("{}: cannot read", path));
  std::stringstream text;
  text << in.rdbuf();
  json j;
  try {
    j = json::parse(text.str());
  } catch (const json::exception& e) {
    throw ModelFileError(fmt::format("{}: not valid JSON ({})", path, e.what()));
  }
  if (!j.is_object()) throw ModelFileError(fmt::format("{}: not a JSON object", path));
  const Reader r{j, path};
  HfConfig c;
  c.family = &family_of(r);
  c.original = j;
  c.vocab_size = r.integer("vocab_size");
  c.hidden_size = r.integer("hidden_size");
  c.intermediate_size = r.integer("intermediate_size");
  c.num_hidden_layers = r.integer("num_hidden_layers");
  c.num_attention_heads = r.integer("num_attention_heads");
  c.num_key_value_heads = r.integer("num_key_value_heads", c.num_attention_heads);
  c.head_dim = r.integer("head_dim", c.family->head_dim ? c.family->head_dim : c.hidden_size / c.num_attention_heads);
  c.max_position_embeddings = r.integer("max_position_embeddings", int64_t(0));
  c.rms_norm_eps = r.number(j, "rms_norm_eps", 1e-6, "");
  c.tie_word_embeddings = r.flag("tie_word_embeddings");
  if (r.has("hidden_act") && j.at("hidden_act") != "silu")
    r.refuse("hidden_act", j.at("hidden_act"), "only silu (SwiGLU) is supported");
  if (r.flag("mlp_bias")) r.refuse("mlp_bias", true, "MLP biases are not supported");
  if (r.flag("attention_bias"))
    r.refuse("attention_bias", true, fmt::format("{} with attention biases (o_proj too) is not supported",
                                                 c.family->architecture));
  if (r.has("partial_rotary_factor") && j.at("partial_rotary_factor") != 1 && j.at("partial_rotary_factor") != 1.0)
    r.refuse("partial_rotary_factor", j.at("partial_rotary_factor"), "only full rotary embeddings are supported");
  if (c.head_dim % 2 != 0) r.refuse("head_dim", c.head_dim, "RoPE needs an even head_dim");
  read_rope(r, c);
  for (const char* key : {"torch_dtype", "dtype"})  // the last present wins: v5's dtype, as in transformers
    if (r.has(key) && j.at(key).is_string()) c.dtype = j.at(key).get<std::string>();
  // Qwen2/3 use a sliding window only with use_sliding_window; Mistral whenever sliding_window is set.
  if (c.family->sliding_window && r.has("sliding_window") &&
      (std::string(c.family->model_type) == "mistral" || r.flag("use_sliding_window")))
    c.sliding_window = r.integer("sliding_window");
  return c;
}

const char* hf_rope_type(config::RopeType type) {
  switch (type) {
    case config::RopeType::none: return "default";
    case config::RopeType::linear: return "linear";
    case config::RopeType::llama3: return "llama3";
  }
  return "default";
}

json to_json(const HfConfig& c) {
  json j = c.original.is_object() ? c.original : json::object();
  j["architectures"] = {c.family->architecture};
  j["model_type"] = c.family->model_type;
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["head_dim"] = c.head_dim;
  if (c.max_position_embeddings > 0) j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["hidden_act"] = "silu";
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  if (!c.family->qkv_bias) j["attention_bias"] = false;
  if (std::string(c.family->model_type) == "llama") j["mlp_bias"] = false;
  j["dtype"] = c.dtype;
  j["torch_dtype"] = c.dtype;
  // Both rope forms, so that transformers v4 and v5 read the same theta and scaling.
  json params = {{"rope_type", hf_rope_type(c.rope_scaling.type)}, {"rope_theta", c.rope_theta}};
  if (c.rope_scaling.type != config::RopeType::none) params["factor"] = c.rope_scaling.factor;
  if (c.rope_scaling.type == config::RopeType::llama3) {
    params["low_freq_factor"] = c.rope_scaling.low_freq_factor;
    params["high_freq_factor"] = c.rope_scaling.high_freq_factor;
    params["original_max_position_embeddings"] = c.rope_scaling.original_max_position;
  }
  j["rope_parameters"] = params;
  j["rope_theta"] = c.rope_theta;
  if (c.rope_scaling.type == config::RopeType::none) {
    j["rope_scaling"] = nullptr;
  } else {
    json scaling = params;
    scaling.erase("rope_theta");
    j["rope_scaling"] = scaling;
  }
  return j;
}

void write_json_file(const std::string& path, const nlohmann::json& j) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << j.dump(2) << "\n";
    if (!out) throw std::runtime_error(fmt::format("cannot write {}", tmp));
  }
  std::filesystem::rename(tmp, path);
}

} // namespace shadowgrad::hub
