// src/hub's peft side of LoRA (hub/PeftAdapter.h, hub/BaseRecord.h, the merged export of hub/Export.h): a crafted
// adapter_config.json or adapter_model.safetensors that peft would take with a warning (or silently) is refused with
// a ModelFileError (exit 2) naming the field, the tensor and the file; adapter_config.json sets the LoRA keys and a
// given key that disagrees names both values; an exported adapter reads back bit for bit; the merged export is
// W + s B A in fp32, rounded once; a base that changed under a LoRA run is named.
// The model here is a torch::nn::Module built by hand with the Decoder's names (base tensors as buffers, adapters as
// parameters), so these cases test the format alone.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <tuple>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/nn/module.h>

#include "Skip.h"
#include "TinyConfig.h"
#include "config/ConfigLoader.h"
#include "hub/BaseRecord.h"
#include "hub/Export.h"
#include "hub/Families.h"
#include "hub/Import.h"
#include "hub/PeftAdapter.h"
#include "hub/SafeTensors.h"
#include "util/File.h"

using namespace shadowgrad;
namespace fs = std::filesystem;
using nlohmann::json;
using Tensors = std::vector<std::pair<std::string, at::Tensor>>;

namespace {

fs::path peft_scratch(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("sg_peft_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// tiny.yml (emb 32, 2 layers, q 2x16, kv 1x16, mlp 64, vocab 64) with LoRA keys, none of them counted as given.
config::Config lora_config(int64_t rank, double alpha, const std::string& targets, bool rslora = false) {
  auto c = tiny_config();
  c.given_keys.clear();
  c.lora_rank = rank;
  c.lora_alpha = alpha;
  c.lora_target_modules = targets;
  c.lora_use_rslora = rslora;
  return c;
}

// The base tensor layer{i}_{suffix}'s shape in `c`'s model.
std::vector<int64_t> base_shape(const config::Config& c, const std::string& ours) {
  const int64_t E = c.base_emb_dim, Q = c.base_num_query_heads * c.head_dim, KV = c.base_num_kv_heads * c.head_dim,
                M = c.base_mlp_dim, V = c.vocab_size;
  auto ends = [&](const std::string& s) { return ours.size() >= s.size() && ours.compare(ours.size() - s.size(), s.size(), s) == 0; };
  if (ours == "embedding" || ours == "output") return {V, E};
  if (ends("_wq")) return {Q, E};
  if (ends("_wk") || ends("_wv")) return {KV, E};
  if (ends("_wo")) return {E, Q};
  if (ends("_w_gate") || ends("_w_up")) return {M, E};
  if (ends("_w_down")) return {E, M};
  return {E};  // the norms
}

// A Decoder's tensors by name, built by hand: with lora_rank > 0 the base is buffers (in `base_dtype`) and the
// adapters are fp32 parameters layer{i}_{w}_lora_a [r, in] / _lora_b [out, r], all random (B too, so that a merge
// is not the base).
struct HandModel : torch::nn::Module {
  HandModel(const config::Config& c, uint64_t seed, c10::ScalarType base_dtype = at::kFloat) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    for (const auto& [hf, ours] : hub::tensor_names(hub::llama_family(), c.base_num_decoder_layers, false)) {
      auto t = at::empty(base_shape(c, ours), at::kFloat).normal_(0, 0.5, gen).to(base_dtype);
      c.lora_rank > 0 ? register_buffer(ours, t) : register_parameter(ours, t);
    }
    if (c.lora_rank == 0) return;
    for (const auto& n : hub::adapter_tensor_names(c.base_num_decoder_layers, c.lora_target_modules)) {
      const bool is_a = n.ours.substr(n.ours.size() - 1) == "a";
      const auto w = base_shape(c, n.ours.substr(0, n.ours.size() - 7));
      const std::vector<int64_t> shape = is_a ? std::vector<int64_t>{c.lora_rank, w[1]} : std::vector<int64_t>{w[0], c.lora_rank};
      register_parameter(n.ours, at::empty(shape, at::kFloat).normal_(0, 0.5, gen));
    }
  }
};

// peft 0.21.2's LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM").to_dict()
// as save_pretrained writes it (every field a reader meets).
json peft_config() {
  return json::parse(R"({"task_type": "CAUSAL_LM", "peft_type": "LORA", "auto_mapping": null, "peft_version": "0.21.2",
    "base_model_name_or_path": "tiny", "revision": null, "inference_mode": true, "r": 4,
    "target_modules": ["v_proj", "q_proj"], "exclude_modules": null, "lora_alpha": 8, "lora_dropout": 0.0,
    "fan_in_fan_out": false, "bias": "none", "use_rslora": false, "modules_to_save": null, "init_lora_weights": true,
    "layers_to_transform": null, "layers_pattern": null, "rank_pattern": {}, "alpha_pattern": {},
    "megatron_config": null, "megatron_core": "megatron.core", "trainable_token_indices": null, "loftq_config": {},
    "eva_config": null, "corda_config": null, "lora_ga_config": null, "use_dora": false, "velora_config": null,
    "alora_invocation_tokens": null, "use_qalora": false, "qalora_group_size": 16, "monteclora_config": null,
    "layer_replication": null, "lora_bias": false, "target_parameters": null, "use_bdlora": null,
    "arrow_config": null, "kasa_config": null, "ensure_weight_tying": false})");
}

// A model's adapters under peft's names (in file order), from its parameters.
Tensors adapter_tensors(const config::Config& c, torch::nn::Module& m) {
  auto params = m.named_parameters();
  Tensors t;
  for (const auto& n : hub::adapter_tensor_names(c.base_num_decoder_layers, c.lora_target_modules))
    t.emplace_back(n.peft, params[n.ours].detach().clone());
  return t;
}

void write_adapter(const fs::path& dir, const json& config, const Tensors& tensors) {
  util::write_file_atomically((dir / "adapter_config.json").string(), config.dump(2));
  hub::write_safetensors((dir / "adapter_model.safetensors").string(), tensors, {{"format", "pt"}});
}

// tiny.yml with `overrides` given, configured from the adapter directory `dir` (lora_restore_path).
config::Config configure_from(const fs::path& dir, const std::vector<std::string>& overrides) {
  auto c = tiny_config();
  c.given_keys.clear();
  config::apply_overrides(c, overrides);
  c.lora_restore_path = dir.string();
  hub::configure_from_adapter_dir(c);
  return c;
}

// The message of the InputError `f` throws ("" when it throws none).
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

bool same_parameters(torch::nn::Module& a, torch::nn::Module& b) {
  auto pb = b.named_parameters();
  for (const auto& p : a.named_parameters())
    if (!pb.find(p.key()) || !at::equal(p.value(), pb[p.key()])) return false;
  return true;
}

// A safetensors file's header JSON.
json header_of(const fs::path& path) {
  const std::string bytes = util::read_whole_file(path.string());
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(static_cast<unsigned char>(bytes[i])) << (8 * i);
  return json::parse(bytes.substr(8, n));
}

} // namespace

TEST_CASE("adapter_config.json: what changes the adapter's math is refused naming the field", "[peft]") {
  const auto dir = peft_scratch("config");
  auto read = [&](const json& j) {
    util::write_file_atomically((dir / "adapter_config.json").string(), j.dump());
    return error_of([&] { hub::read_adapter_config(dir.string()); });
  };
  // The control: what peft writes for a plain adapter is read.
  REQUIRE(read(peft_config()).empty());
  const auto a = hub::read_adapter_config(dir.string());
  CHECK(a.r == 4);
  CHECK(a.lora_alpha == 8);
  CHECK(a.target_modules(2) == "q_proj,v_proj");
  CHECK(!a.use_rslora);
  CHECK(a.base_model_name_or_path == "tiny");

  const std::vector<std::tuple<std::string, json, std::string>> refused = {
      {"use_dora", true, "use_dora = true: DoRA"},
      {"fan_in_fan_out", true, "fan_in_fan_out = true"},
      {"bias", "all", "bias = \"all\""},
      {"bias", "lora_only", "bias = \"lora_only\""},
      {"lora_bias", true, "lora_bias = true"},
      {"modules_to_save", json::array({"lm_head"}), "modules_to_save = [\"lm_head\"]"},
      {"peft_type", "IA3", "peft_type = \"IA3\": only LORA"},
      {"task_type", "SEQ_CLS", "task_type = \"SEQ_CLS\""},
      {"rank_pattern", json::object({{"q_proj", 8}}), "rank_pattern = {\"q_proj\":8}"},
      {"alpha_pattern", json::object({{"q_proj", 8}}), "alpha_pattern"},
      {"layers_to_transform", json::array({0}), "layers_to_transform = [0]"},
      {"layers_pattern", "layers", "layers_pattern"},
      {"exclude_modules", json::array({"k_proj"}), "exclude_modules"},
      {"layer_replication", json::array({json::array({0, 2})}), "layer_replication"},
      {"trainable_token_indices", json::array({1, 2}), "trainable_token_indices"},
      {"target_parameters", json::array({"w"}), "target_parameters"},
      {"use_qalora", true, "use_qalora"},
      {"init_lora_weights", "pissa", "init_lora_weights = \"pissa\""},
      {"init_lora_weights", "loftq", "init_lora_weights = \"loftq\""},
      {"target_modules", ".*\\.(q|v)_proj", "target_modules = \".*\\\\.(q|v)_proj\": a string other than \"all-linear\" is a regular expression"},
      {"target_modules", json::array({"q_proj", "lm_head"}), "target_modules: 'lm_head' is not a projection of a "
                                                             "decoder layer"},
      {"target_modules", json::array({"self_attn.gate_proj"}), "'self_attn.gate_proj' is not a projection"},
      {"target_modules", json::array({"base_model.model.model.layers.0.self_attn.q_proj"}), "is not a projection"},
      {"target_modules", json::array(), "target_modules = []"},
      {"r", 0, "r = 0: expected a positive integer"},
      {"some_future_switch", true, "some_future_switch = true: a field this reader does not know"},
  };
  for (const auto& [field, value, expected] : refused) {
    auto j = peft_config();
    j[field] = value;
    INFO(field << " = " << value.dump());
    const std::string e = read(j);
    CHECK_THAT(e, Catch::Contains(expected));
    CHECK_THAT(e, Catch::Contains((dir / "adapter_config.json").string()));
  }
  // Accepted as the same adapter: "all-linear", the plain initialisations, unknown fields left unset, no task type.
  for (const auto& [field, value] : std::vector<std::pair<std::string, json>>{
           {"target_modules", "all-linear"}, {"init_lora_weights", false}, {"init_lora_weights", "gaussian"},
           {"some_future_switch", nullptr}, {"task_type", nullptr}, {"modules_to_save", json::array()}}) {
    auto j = peft_config();
    j[field] = value;
    INFO(field << " = " << value.dump());
    CHECK(read(j).empty());
  }
  // peft saves target_modules="all-linear" as the list of every module's full name; a name or tail of one is matched
  // as peft matches it, and a projection adapted in some layers only is refused.
  auto targets_of = [&](const json& list, int64_t layers) {
    auto j = peft_config();
    j["target_modules"] = list;
    util::write_file_atomically((dir / "adapter_config.json").string(), j.dump());
    std::string out;
    const std::string e = error_of([&] { out = hub::read_adapter_config(dir.string()).target_modules(layers); });
    return e.empty() ? out : e;
  };
  json every = json::array();
  for (int i = 1; i >= 0; --i)
    for (const char* p : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                          "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"})
      every.push_back(fmt::format("model.layers.{}.{}", i, p));
  CHECK(targets_of(every, 2) == "all-linear");
  CHECK(targets_of(json::array({"self_attn.q_proj", "layers.0.mlp.up_proj", "1.mlp.up_proj"}), 2) == "q_proj,up_proj");
  // Layers 0..n-1 of a deeper base: an adapter made for another, shallower model, which the message says (and,
  // where the adapter names it, its base_model_name_or_path, "tiny" here).
  CHECK_THAT(targets_of(json::array({"model.layers.0.self_attn.q_proj"}), 2),
             Catch::Contains("target_modules adapts q_proj in 1 of the base's 2 layers: it names layers 0 to 0 only, as "
                             "an adapter made for another model, of 1 layers, would (its base_model_name_or_path is "
                             "tiny)"));
  json layer0(every.begin() + 7, every.end());  // layer 0 alone, all seven projections: made for a 1-layer model
  CHECK_THAT(targets_of(layer0, 30), Catch::Contains("in 1 of the base's 30 layers: it names layers 0 to 0 only"));
  CHECK_THAT(targets_of(json::array({"model.layers.1.self_attn.q_proj"}), 3),  // not a prefix: no such guess
             Catch::Contains("in 1 of the base's 3 layers; a LoRA run adapts each target in every layer"));
  CHECK_THAT(targets_of(every, 1), Catch::Contains("target_modules names q_proj of layer 1, but the base has 1 layers"));
  auto j = peft_config();
  j.erase("peft_type");
  CHECK_THAT(read(j), Catch::Contains("no peft_type"));
  fs::remove(dir / "adapter_config.json");
  CHECK_THAT(error_of([&] { hub::read_adapter_config(dir.string()); }), Catch::Contains("no adapter_config.json"));
  fs::remove_all(dir);
}

TEST_CASE("adapter_config.json sets the LoRA keys, and a given key with another value names both", "[peft]") {
  const auto dir = peft_scratch("keys");
  auto j = peft_config();
  j["use_rslora"] = true;
  util::write_file_atomically((dir / "adapter_config.json").string(), j.dump());
  auto configure = [&](const std::vector<std::string>& overrides) { return configure_from(dir, overrides); };
  const auto c = configure({});
  CHECK(c.lora_rank == 4);
  CHECK(c.lora_alpha == 8);
  CHECK(c.lora_use_rslora);
  CHECK(c.lora_target_modules == "q_proj,v_proj");
  // The same values given: no conflict (targets compare as sets).
  CHECK(error_of([&] { configure({"lora_rank=4", "lora_alpha=8", "lora_target_modules=v_proj,q_proj"}); }).empty());
  CHECK_THAT(error_of([&] { configure({"lora_rank=8"}); }),
             Catch::Contains("lora_rank=8 was given, but lora_restore_path=" + dir.string() + " has r=4"));
  CHECK_THAT(error_of([&] { configure({"lora_alpha=16"}); }), Catch::Contains("lora_alpha=16 was given") &&
                                                                   Catch::Contains("lora_alpha=8 in adapter_config.json"));
  CHECK_THAT(error_of([&] { configure({"lora_use_rslora=false"}); }),
             Catch::Contains("lora_use_rslora=false was given") && Catch::Contains("use_rslora=true"));
  CHECK_THAT(error_of([&] { configure({"lora_target_modules=all-linear"}); }),
             Catch::Contains("lora_target_modules=all-linear was given") &&
                 Catch::Contains("target_modules=q_proj,v_proj"));
  // A list of all seven is all-linear.
  j["target_modules"] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  util::write_file_atomically((dir / "adapter_config.json").string(), j.dump());
  CHECK(configure({"lora_target_modules=all-linear"}).lora_target_modules == "all-linear");
  auto bad = tiny_config();
  bad.lora_restore_path = (dir / "nowhere").string();
  CHECK_THROWS_AS(hub::configure_from_adapter_dir(bad), ConfigError);
  fs::remove_all(dir);
}

TEST_CASE("an adapter directory given as load_parameters_path names the adapter and lora_restore_path", "[peft]") {
  const auto dir = peft_scratch("as_base");
  util::write_file_atomically((dir / "adapter_config.json").string(), peft_config().dump());
  auto c = tiny_config();
  c.load_parameters_path = dir.string();
  const std::string e = error_of([&] { hub::configure_from_model_dir(c); });
  CHECK_THAT(e, Catch::StartsWith("load_parameters_path=" + dir.string() + ": this is a peft LoRA adapter") &&
                    Catch::Contains("give it as lora_restore_path=" + dir.string()) &&
                    Catch::Contains("its adapter_config.json names 'tiny'"));
  CHECK_THAT(e, !Catch::Contains("cannot read"));
  fs::remove_all(dir);
}

TEST_CASE("adapter_config.json's values pass the range checks of the keys they set, and its lora_dropout is the default",
          "[peft]") {
  const auto dir = peft_scratch("ranges");
  const std::string file = (dir / "adapter_config.json").string();
  auto configure = [&](const json& j, const std::vector<std::string>& overrides = {}) {
    util::write_file_atomically(file, j.dump());
    return configure_from(dir, overrides);
  };
  auto j = peft_config();
  j["lora_alpha"] = 1e308;  // passed both readers before: every loss NaN, every generated token 0
  CHECK_THAT(error_of([&] { configure(j); }), Catch::Contains(file + ": lora_alpha = 1e+308: out of the range of "
                                                                     "lora_alpha"));
  CHECK_THROWS_AS(configure(j), hub::ModelFileError);
  j["lora_alpha"] = 1e6;  // the control: lora_alpha's own upper end is read
  CHECK(configure(j).lora_alpha == 1e6);
  j = peft_config();
  j["lora_dropout"] = 0.1;
  CHECK(configure(j).lora_dropout == 0.1);
  CHECK(configure(j, {"lora_dropout=0.2"}).lora_dropout == 0.2);  // a given lora_dropout wins, without an error
  j["lora_dropout"] = 1.5;
  CHECK_THAT(error_of([&] { configure(j); }), Catch::Contains(file + ": lora_dropout = 1.5: out of the range"));
  fs::remove_all(dir);
}

TEST_CASE("adapter tensors: missing, unexpected, twice or misshapen is refused naming tensor and file", "[peft]") {
  const auto dir = peft_scratch("tensors");
  const auto c = lora_config(4, 8, "q_proj,v_proj,down_proj");
  HandModel source(c, 1), target(c, 2);
  const Tensors good = adapter_tensors(c, source);
  const std::string file = (dir / "adapter_model.safetensors").string();
  auto load = [&](const Tensors& t) {
    write_adapter(dir, peft_config(), t);
    return error_of([&] { hub::load_adapter_weights(dir.string(), c, target); });
  };
  const std::string q_a = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight";
  CHECK(good.front().first == q_a);
  CHECK(good.back().first == "base_model.model.model.layers.1.mlp.down_proj.lora_B.weight");
  CHECK(good.size() == 2 * 3 * 2);

  Tensors t = good;
  t.erase(t.begin() + 1);
  CHECK_THAT(load(t), Catch::Contains(file + ": tensor 'base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight' "
                                             "is missing"));
  t = good;
  t.emplace_back("base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight", at::zeros({4, 32}));
  CHECK_THAT(load(t), Catch::Contains(file + ": unexpected tensor "
                                             "'base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight'"));
  t = good;
  t.emplace_back("base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector", at::zeros({32}));
  CHECK_THAT(load(t), Catch::Contains("unexpected tensor 'base_model.model.model.layers.0.self_attn.q_proj.lora_"
                                      "magnitude_vector'"));
  t = good;
  t.emplace_back("base_model.model.model.layers.2.self_attn.q_proj.lora_A.weight", at::zeros({4, 32}));
  CHECK_THAT(load(t), Catch::Contains("unexpected tensor 'base_model.model.model.layers.2."));
  t = good;
  t.emplace_back("base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight", good[0].second);
  CHECK_THAT(load(t), Catch::Contains(file + ": tensor '" + q_a + "' is given twice"));
  t = good;
  t[0].second = at::zeros({4, 33});
  CHECK_THAT(load(t), Catch::Contains(file + ": tensor '" + q_a + "' has shape [4, 33], but it must be [4, 32] to fit "
                                             "the base (layer0_wq is [32, 32], lora_rank=4)"));
  t = good;
  t[5].second = at::zeros({32, 5});  // layer 0 down_proj's B: [out=32, r=4]
  CHECK_THAT(load(t), Catch::Contains("down_proj.lora_B.weight' has shape [32, 5], but it must be [32, 4]"));
  // Nothing was copied by a refused file.
  HandModel untouched(c, 2);
  CHECK(same_parameters(target, untouched));
  fs::remove(file);
  CHECK_THAT(error_of([&] { hub::load_adapter_weights(dir.string(), c, target); }),
             Catch::Contains("no adapter_model.safetensors"));

  // The control: every tensor lands, bit for bit; with peft's .default. infix too; from bf16, converted.
  CHECK(load(good).empty());
  CHECK(same_parameters(target, source));
  HandModel infixed(c, 3);
  t = good;
  for (auto& [name, tensor] : t) name.insert(name.size() - std::string(".weight").size(), ".default");
  CHECK(t[0].first == "base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight");
  write_adapter(dir, peft_config(), t);
  hub::load_adapter_weights(dir.string(), c, infixed);
  CHECK(same_parameters(infixed, source));
  t = good;
  for (auto& [name, tensor] : t) tensor = tensor.to(at::kBFloat16);
  write_adapter(dir, peft_config(), t);
  hub::load_adapter_weights(dir.string(), c, infixed);
  CHECK(at::equal(infixed.named_parameters()["layer1_w_down_lora_b"], t.back().second.to(at::kFloat)));
  fs::remove_all(dir);
}

TEST_CASE("export_adapter: peft's names and fields, read back bit for bit", "[peft]") {
  const auto run = peft_scratch("run"), out = peft_scratch("out");
  auto c = lora_config(4, 16, "all-linear", true);
  c.lora_dropout = 0.05;
  HandModel trained(c, 5);
  // A run started from a model directory names it as the base.
  fs::create_directories(run / "hf");
  util::write_file_atomically((run / "hf" / "source.json").string(),
                              json{{"load_parameters_path", "/models/tiny"}, {"weights", json::array()}}.dump());
  hub::export_adapter(c, trained, run.string(), out.string());

  const json j = json::parse(util::read_whole_file((out / "adapter_config.json").string()));
  CHECK(j["peft_type"] == "LORA");
  CHECK(j["task_type"] == "CAUSAL_LM");
  CHECK(j["base_model_name_or_path"] == "/models/tiny");
  CHECK(j["r"] == 4);
  CHECK(j["lora_alpha"] == 16);
  CHECK(j["lora_alpha"].is_number_integer());
  CHECK(j["lora_dropout"] == 0.05);
  CHECK(j["target_modules"] == json({"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}));
  CHECK(j["bias"] == "none");
  CHECK(j["fan_in_fan_out"] == false);
  CHECK(j["use_rslora"] == true);
  CHECK(j["use_dora"] == false);
  CHECK(j["inference_mode"] == true);
  const json header = header_of(out / "adapter_model.safetensors");
  CHECK(header["__metadata__"] == json({{"format", "pt"}}));
  CHECK(header.size() == 1 + 2 * 7 * 2);
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    CHECK(name.find(".default.") == std::string::npos);
    CHECK(entry["dtype"] == "F32");
  }
  CHECK(header["base_model.model.model.layers.1.mlp.gate_proj.lora_A.weight"]["shape"] == json({4, 32}));
  CHECK(header["base_model.model.model.layers.1.mlp.gate_proj.lora_B.weight"]["shape"] == json({64, 4}));

  // Read back through the reader a run uses: the same keys, the same tensors.
  auto fresh = tiny_config();
  fresh.given_keys.clear();
  fresh.lora_restore_path = out.string();
  hub::configure_from_adapter_dir(fresh);
  CHECK(fresh.lora_rank == 4);
  CHECK(fresh.lora_alpha == 16);
  CHECK(fresh.lora_use_rslora);
  CHECK(fresh.lora_target_modules == "all-linear");
  HandModel loaded(fresh, 6);
  CHECK(!same_parameters(loaded, trained));  // the control
  hub::load_adapter_weights(out.string(), fresh, loaded);
  CHECK(same_parameters(loaded, trained));

  // From scratch: no base named. Without adapters: nothing to export.
  fs::remove_all(run / "hf");
  hub::export_adapter(c, trained, run.string(), out.string());
  CHECK(json::parse(util::read_whole_file((out / "adapter_config.json").string()))["base_model_name_or_path"] == "");
  auto full = tiny_config();
  HandModel plain(full, 7);
  CHECK_THAT(error_of([&] { hub::export_adapter(full, plain, run.string(), out.string()); }),
             Catch::Contains("lora_rank=0"));
  fs::remove_all(run);
  fs::remove_all(out);
}

TEST_CASE("merged export: W + s B A in fp32, rounded once to the export dtype", "[peft]") {
  const auto run = peft_scratch("merge_run"), out = peft_scratch("merge_out");
  for (const bool rslora : {false, true}) {
    const auto c = lora_config(4, 8, "q_proj,down_proj", rslora);
    const double s = rslora ? 8 / std::sqrt(4.0) : 8 / 4.0;
    for (const auto base_dtype : {at::kFloat, at::kBFloat16}) {
      INFO("rslora " << rslora << ", base " << c10::toString(base_dtype));
      HandModel m(c, 11, base_dtype);
      auto buffers = m.named_buffers();
      auto params = m.named_parameters();
      const auto W = buffers["layer1_w_down"].to(at::kFloat), A = params["layer1_w_down_lora_a"],
                 B = params["layer1_w_down_lora_b"];
      // In double, from the definition: the fp32 merge is within fp32 rounding of it.
      const auto exact = W.to(at::kDouble) + s * at::mm(B.to(at::kDouble), A.to(at::kDouble));
      const auto fp32 = hub::merge_lora(buffers["layer1_w_down"], A, B, s);
      CHECK(fp32.scalar_type() == at::kFloat);
      CHECK((fp32.to(at::kDouble) - exact).abs().max().item<double>() < 1e-5);

      hub::ExportOptions options;
      for (const std::string dtype : {"float32", "bfloat16"}) {
        options.dtype = dtype;
        hub::export_model_dir(c, m, run.string(), out.string(), options);
        auto file = hub::SafeTensorsFile::open((out / "model.safetensors").string());
        auto read = [&](const std::string& name) { return file.view(*file.find(name)).clone(); };
        const auto type = dtype == "float32" ? at::kFloat : at::kBFloat16;
        const auto down = read("model.layers.1.mlp.down_proj.weight");
        // Rounded once: the fp32 merge, then the dtype.
        CHECK(at::equal(down, fp32.to(type)));
        // An untargeted projection and the norms are the base, as it was.
        CHECK(at::equal(read("model.layers.1.mlp.up_proj.weight"), buffers["layer1_w_up"].to(type)));
        CHECK(at::equal(read("model.norm.weight"), buffers["final_norm"].to(type)));
        if (type == at::kBFloat16 && base_dtype == at::kBFloat16) {
          // The control that must differ: the product rounded to bf16 before the sum (a merge in bf16).
          const auto twice = (buffers["layer1_w_down"] + (at::mm(B, A) * s).to(at::kBFloat16));
          CHECK(!at::equal(down, twice));
        }
        // The control: alpha instead of alpha / r is another weight.
        CHECK(!at::equal(down, hub::merge_lora(buffers["layer1_w_down"], A, B, 8.0).to(type)));
      }
    }
  }
  fs::remove_all(run);
  fs::remove_all(out);
}

TEST_CASE("base record: a base that changed under a LoRA run is named, and the same base passes", "[peft]") {
  const auto base = peft_scratch("base"), run = peft_scratch("base_run");
  const std::string file = (base / "model.safetensors").string();
  // 3 MiB of data: the first and last MiB are sampled, the middle is not.
  auto weights = [](float first, const std::string& name) {
    auto t = at::zeros({3 << 18}, at::kFloat);
    t[0] = first;
    return Tensors{{name, t}, {"model.norm.weight", at::ones({32})}};
  };
  hub::write_safetensors(file, weights(1, "model.embed_tokens.weight"), {{"format", "pt"}});
  CHECK(!hub::verify_base_record(base.string(), run.string()));  // no record: nothing to check
  hub::carry_model_files(base.string(), run.string());
  CHECK(!hub::verify_base_record(base.string(), run.string()));  // sizes only, from before the record
  hub::write_base_record(base.string(), run.string());
  CHECK(hub::verify_base_record(base.string(), run.string()));
  CHECK(hub::recorded_base_dir(run.string()) == fs::absolute(base).string());
  const json source = json::parse(util::read_whole_file((run / "hf" / "source.json").string()));
  CHECK(source["weights"][0]["header_fnv1a64"].get<std::string>().size() == 16);
  CHECK(source["index_fnv1a64"].is_null());

  auto verify = [&] { return error_of([&] { hub::verify_base_record(base.string(), run.string()); }); };
  // Another name of the same length: the same size, another header.
  hub::write_safetensors(file, weights(1, "model.embed_tokens.weighT"), {{"format", "pt"}});
  CHECK_THAT(verify(), Catch::Contains(file + ": its safetensors header") && Catch::Contains("put that base back"));
  // The same header, another first value.
  hub::write_safetensors(file, weights(2, "model.embed_tokens.weight"), {{"format", "pt"}});
  CHECK_THAT(verify(), Catch::Contains(file + ": its weights changed"));
  // Another size.
  hub::write_safetensors(file, weights(1, "model.embed_tokens.weight"), {{"format", "pt"}, {"x", "y"}});
  CHECK_THAT(verify(), Catch::Contains(file + ":") && Catch::Contains("bytes, but the run was built on"));
  // Back as it was: it passes again.
  hub::write_safetensors(file, weights(1, "model.embed_tokens.weight"), {{"format", "pt"}});
  CHECK(verify().empty());
  // Sharded since: the index appeared.
  util::write_file_atomically((base / "model.safetensors.index.json").string(), "{}");
  CHECK_THAT(verify(), Catch::Contains("model.safetensors.index.json: appeared since the run began"));
  fs::remove(base / "model.safetensors.index.json");
  // Where a resume, export_hf and generate read the base: the recorded absolute path while it is there, whatever
  // (relative, from another directory) load_parameters_path says; a base moved since, from load_parameters_path.
  CHECK(hub::run_base_dir("base-relative-from-elsewhere", run.string()) == fs::absolute(base).string());
  const auto moved = peft_scratch("base_moved");
  fs::remove_all(moved);
  fs::rename(base, moved);
  CHECK(hub::run_base_dir(moved.string(), run.string()) == moved.string());
  CHECK_THAT(error_of([&] { hub::run_base_dir("nowhere", run.string()); }),
             Catch::Contains("load_parameters_path=nowhere: not a directory, and " + fs::absolute(base).string() +
                             " is gone from where"));
  fs::rename(moved, base);
  fs::remove(file);
  CHECK_THAT(verify(), Catch::Contains(file + ": missing"));
  fs::remove_all(base);
  fs::remove_all(run);
}

// Run by tests/peft_adapter_test.py: $SHADOWGRAD_PEFT_DIR holds base/ (a tiny transformers Llama, tiny.yml's shape)
// and adapter/ (peft's save_pretrained). Reads the adapter strictly onto the base and writes adapter_out/ (the
// adapter exported) and merged/ (the merged export, fp32), which the script checks with peft and transformers.
TEST_CASE("peft adapter: peft's own files through the reader and both exports for tests/peft_adapter_test.py",
          "[peft][can_skip]") {
  const char* env = std::getenv("SHADOWGRAD_PEFT_DIR");
  if (!env) SG_SKIP("SHADOWGRAD_PEFT_DIR is not set (tests/peft_adapter_test.py sets it)");
  const fs::path dir = env;
  auto c = tiny_config();
  c.given_keys.clear();
  c.lora_restore_path = (dir / "adapter").string();
  hub::configure_from_adapter_dir(c);
  HandModel m(c, 1);
  {  // the base, by the one name map
    at::NoGradGuard no_grad;
    auto base = hub::SafeTensorsFile::open((dir / "base" / "model.safetensors").string());
    auto buffers = m.named_buffers();
    for (const auto& [hf, ours] : hub::tensor_names(hub::llama_family(), c.base_num_decoder_layers, false))
      buffers[ours].copy_(base.view(*base.find(hf)));
  }
  hub::load_adapter_weights(c.lora_restore_path, c, m);
  const auto run = peft_scratch("interop_run");
  hub::export_adapter(c, m, run.string(), (dir / "adapter_out").string());
  hub::ExportOptions options;
  options.dtype = "float32";
  hub::export_model_dir(c, m, run.string(), (dir / "merged").string(), options);
  fs::remove_all(run);
}
