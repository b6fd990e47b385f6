// src/hub: our safetensors reader refuses every malformed file with a ModelFileError (exit 2 in the apps) naming the
// file and the tensor, never crashing or allocating what a header claims; a written file reads back bit for bit;
// config.json's two forms read the same; a model directory with a missing, unexpected or mis-shaped tensor is
// refused. The tie: one parameter, whose shadow receives both uses' gradients (against plain autograd's .grad).
// The case tagged [can_skip] is the logits probe tests/hf_parity_test.py drives (skipped without it).
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "Skip.h"
#include "TinyConfig.h"
#include "TrainerProcess.h"
#include "accumulate/ShadowAccumulator.h"
#include "config/ConfigWriter.h"
#include "generate/ModelSource.h"
#include "hub/ConfigMapping.h"
#include "hub/Export.h"
#include "hub/HfConfig.h"
#include "hub/Import.h"
#include "hub/SafeTensors.h"
#include "model/Decoder.h"
#include "train/MemoryProbe.h"

using namespace shadowgrad;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string file_bytes(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = char(uint64_t(header.size()) >> (8 * i));
  return out + header + data;
}

// The message of the ModelFileError parse_safetensors throws for `bytes` ("" when it throws none).
std::string parse_error(const std::string& bytes) {
  try {
    hub::parse_safetensors(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), "bad.safetensors");
  } catch (const hub::ModelFileError& e) {
    return e.what();
  }
  return "";
}

fs::path hub_scratch(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("sg_hub_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// A tiny Llama config.json in v5 form.
json tiny_llama_json(bool tied) {
  return {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"vocab_size", 64}, {"hidden_size", 32},
          {"intermediate_size", 64}, {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
          {"head_dim", 8}, {"max_position_embeddings", 64}, {"rms_norm_eps", 1e-5}, {"hidden_act", "silu"},
          {"tie_word_embeddings", tied}, {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 5000.0}}},
          {"dtype", "float32"}};
}

// `j` written as dir/config.json and read back.
hub::HfConfig read_config(const fs::path& dir, const json& j) {
  hub::write_json_file((dir / "config.json").string(), j);
  return hub::read_hf_config((dir / "config.json").string());
}

// tiny.yml's own model keys count as given: a model directory's config.json is to set them here.
config::Config untouched_tiny_config() {
  auto c = tiny_config();
  c.given_keys.clear();
  return c;
}

config::Config configured(const fs::path& dir) {
  auto c = untouched_tiny_config();
  c.load_parameters_path = dir.string();
  hub::configure_from_model_dir(c);
  return c;
}

// Writes a model directory holding `model`'s weights (an export of a from-scratch model) with `edit` applied to the
// tensor list before writing.
void write_model_dir(const fs::path& dir, bool tied,
                     const std::function<void(std::vector<std::pair<std::string, at::Tensor>>&)>& edit) {
  hub::write_json_file((dir / "config.json").string(), tiny_llama_json(tied));
  auto c = untouched_tiny_config();  // configure_from_model_dir would look for the weights written below
  hub::apply_hf_config(hub::read_hf_config((dir / "config.json").string()), c, dir.string());
  model::Decoder m(model::DecoderOptions::from_config(c));
  auto params = m->named_parameters();
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& [hf, ours] : hub::tensor_names(hub::llama_family(), 2, tied)) tensors.emplace_back(hf, params[ours]);
  edit(tensors);
  hub::write_safetensors((dir / "model.safetensors").string(), tensors, {{"format", "pt"}});
}

std::string load_error(const fs::path& dir) {
  try {
    auto c = configured(dir);
    model::Decoder m(model::DecoderOptions::from_config(c));
    hub::load_hf_weights(dir.string(), hub::read_hf_config((dir / "config.json").string()), *m);
  } catch (const hub::ModelFileError& e) {
    return e.what();
  }
  return "";
}

} // namespace

TEST_CASE("safetensors: every malformed header is a ModelFileError naming the file and the tensor", "[hub]") {
  const std::string f32x2 = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  REQUIRE(parse_error(file_bytes(f32x2, std::string(8, '\0'))).empty());
  CHECK_THAT(parse_error("\x01\x02"), Catch::Contains("bad.safetensors") && Catch::Contains("too short"));
  std::string past = file_bytes(f32x2, std::string(8, '\0'));
  past[0] = char(0xff);  // header length 255 + the rest, past the end
  CHECK_THAT(parse_error(past), Catch::Contains("past the end"));
  std::string absurd = file_bytes(f32x2, "");
  absurd[7] = char(0x7f);  // ~9e18 bytes: refused from the length alone
  CHECK_THAT(parse_error(absurd), Catch::Contains("past the end"));
  CHECK_THAT(parse_error(file_bytes("{\"w\":", "")), Catch::Contains("not valid JSON"));
  CHECK_THAT(parse_error(file_bytes("[1,2]", "")), Catch::Contains("not a JSON object"));
  CHECK_THAT(parse_error(file_bytes(std::string(100000, '[') + std::string(100000, ']'), "")),
             Catch::Contains("nests deeper"));
  struct Case {
    std::string header, data, expect;
  };
  const std::vector<Case> cases = {
      {R"({"w":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", std::string(8, '\0'), "unknown dtype 'Q4'"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", std::string(8, '\0'), "out of the data section"},
      {R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(12, '\0'), "shape [3] of F32 is 12 bytes"},
      {R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})", std::string(8, '\0'),
       "needs more bytes than"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"w":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       std::string(12, '\0'), "overlaps"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
       std::string(12, '\0'), "a gap"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", std::string(12, '\0'), "end at byte 8"},
      {R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", std::string(8, '\0'), "non-negative integer"},
      {R"({"w":{"dtype":"F32","shape":[2]}})", std::string(8, '\0'), "has no 'data_offsets'"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"format":1}})", std::string(8, '\0'),
       "__metadata__"},
  };
  for (const auto& c : cases) {
    INFO(c.header);
    const std::string message = parse_error(file_bytes(c.header, c.data));
    CHECK_THAT(message, Catch::Contains(c.expect) && Catch::Contains("bad.safetensors"));
    if (c.expect.find("__metadata__") == std::string::npos && c.expect.find("end at byte") == std::string::npos)
      CHECK_THAT(message, Catch::Contains("'w'"));
  }
}

TEST_CASE("safetensors: shape x dtype size cannot wrap for a data section past 2^32 bytes", "[hub]") {
  // The header parser is given the data section's size alone: nothing of 8 GiB is made.
  const uint64_t data = uint64_t(1) << 33;
  auto error = [&](const std::string& header) {
    try {
      hub::parse_safetensors_header(header, data, "big.safetensors");
    } catch (const hub::ModelFileError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  // [2^31, 2^31] F32 is 2^64 bytes, which wrapped to 0 and matched data_offsets [x, x].
  const std::string fill = R"("pad":{"dtype":"U8","shape":[8589934592],"data_offsets":[0,8589934592]})";
  CHECK_THAT(error("{" + fill + R"(,"w":{"dtype":"F32","shape":[2147483648,2147483648],"data_offsets":[8589934592,8589934592]}})"),
             Catch::Contains("big.safetensors") && Catch::Contains("tensor 'w'") && Catch::Contains("needs more bytes"));
  // Controls: the same data section filled by tensors whose sizes are right is read.
  CHECK(error("{" + fill + "}").empty());
  CHECK(error(R"({"w":{"dtype":"F32","shape":[1024,2097152],"data_offsets":[0,8589934592]}})").empty());
}

TEST_CASE("safetensors: a written file reads back bit for bit, also at offsets not aligned to the dtype", "[hub]") {
  const auto dir = hub_scratch("roundtrip");
  const std::string path = (dir / "m.safetensors").string();
  auto a = at::randn({3, 5}), b = at::randn({7}).to(at::kBFloat16), h = at::randn({2, 2}).to(at::kHalf);
  hub::write_safetensors(path, {{"b", b}, {"a", a}, {"h", h}}, {{"format", "pt"}});  // b first: a starts at 14 bytes
  auto f = hub::SafeTensorsFile::open(path);
  CHECK(at::equal(f.view(*f.find("a")), a));
  CHECK(at::equal(f.view(*f.find("b")), b));
  CHECK(at::equal(f.view(*f.find("h")), h));
  CHECK(f.find("missing") == nullptr);
  std::ofstream(dir / "short.safetensors") << "abc";
  CHECK_THROWS_AS(hub::SafeTensorsFile::open((dir / "short.safetensors").string()), hub::ModelFileError);
  CHECK_THROWS_AS(hub::SafeTensorsFile::open((dir / "absent.safetensors").string()), hub::ModelFileError);
  fs::remove_all(dir);
}

TEST_CASE("config.json: v4 and v5 forms read the same, and what we cannot train is refused naming field and value", "[hub]") {
  const auto dir = hub_scratch("config");
  auto read = [&](const json& j) { return read_config(dir, j); };
  json v5 = tiny_llama_json(false);
  // Every llama3 field off its default (factor 1, low 1, high 4, 8192), so that a field read back is the file's.
  v5["rope_parameters"] = {{"rope_type", "llama3"}, {"rope_theta", 500000.0}, {"factor", 8.0}, {"low_freq_factor", 2.0},
                           {"high_freq_factor", 3.0}, {"original_max_position_embeddings", 32}};
  json v4 = v5;
  v4.erase("rope_parameters");
  v4.erase("dtype");
  v4["torch_dtype"] = "bfloat16";
  v4["rope_theta"] = 500000.0;
  v4["rope_scaling"] = {{"type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 2.0}, {"high_freq_factor", 3.0},
                        {"original_max_position_embeddings", 32}};
  const auto a = read(v5), b = read(v4);
  CHECK(a.rope_theta == 500000.0);
  CHECK(b.rope_theta == 500000.0);
  CHECK(a.rope_scaling.type == config::RopeType::llama3);
  CHECK(b.rope_scaling.type == config::RopeType::llama3);
  for (const auto* c : {&a, &b}) {
    CHECK(c->rope_scaling.factor == 8.0);
    CHECK(c->rope_scaling.low_freq_factor == 2.0);
    CHECK(c->rope_scaling.high_freq_factor == 3.0);
    CHECK(c->rope_scaling.original_max_position == 32);
  }
  CHECK(b.dtype == "bfloat16");
  // Written: both forms, read back the same.
  const json written = hub::to_json(a);
  CHECK(written["rope_theta"] == 500000.0);
  CHECK(written["rope_parameters"]["rope_theta"] == 500000.0);
  CHECK(written["rope_scaling"]["rope_type"] == "llama3");
  const auto again = read(written);
  CHECK(again.rope_scaling.low_freq_factor == 2.0);
  CHECK(again.rope_scaling.high_freq_factor == 3.0);
  CHECK(again.rope_scaling.original_max_position == 32);

  auto refused = [&](const std::string& key, const json& value) {
    json j = tiny_llama_json(false);
    j[key] = value;
    try {
      read(j);
    } catch (const hub::ModelFileError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK_THAT(refused("hidden_act", "gelu"), Catch::Contains("hidden_act = \"gelu\""));
  CHECK_THAT(refused("mlp_bias", true), Catch::Contains("mlp_bias = true"));
  CHECK_THAT(refused("attention_bias", true), Catch::Contains("attention_bias = true"));
  CHECK_THAT(refused("architectures", {"GPT2LMHeadModel"}), Catch::Contains("GPT2LMHeadModel"));
  CHECK_THAT(refused("rope_parameters", {{"rope_type", "yarn"}, {"rope_theta", 1e4}}),
             Catch::Contains("rope_type = \"yarn\""));
  CHECK_THAT(refused("num_hidden_layers", -1), Catch::Contains("num_hidden_layers = -1"));

  // The shape comes from config.json; a model key given that disagrees names both values.
  hub::write_json_file((dir / "config.json").string(), tiny_llama_json(false));
  auto c = untouched_tiny_config();
  c.load_parameters_path = dir.string();
  c.base_emb_dim = 48;
  c.given_keys.insert("base_emb_dim");
  CHECK_THROWS_WITH(hub::configure_from_model_dir(c), Catch::Contains("base_emb_dim=48") && Catch::Contains("hidden_size=32"));
  // Mistral's sliding window may not cut attention inside max_target_length.
  json mistral = tiny_llama_json(false);
  mistral["architectures"] = {"MistralForCausalLM"};
  mistral["sliding_window"] = 8;
  hub::write_json_file((dir / "config.json").string(), mistral);
  auto m = untouched_tiny_config();
  m.load_parameters_path = dir.string();
  CHECK_THROWS_WITH(hub::configure_from_model_dir(m), Catch::Contains("sliding_window = 8"));

  // generate RUN: a run from that model (its hf/config.json) trained within the window; decoding further with
  // --max-length is refused the same way, before the weights are read.
  const fs::path run = dir / "run";
  fs::create_directories(run / "hf");
  mistral["sliding_window"] = 16;
  hub::write_json_file((run / "hf" / "config.json").string(), mistral);
  std::ofstream(run / "config.yml") << config::to_yaml(untouched_tiny_config());  // max_target_length 16
  auto generate_error = [&](int64_t max_length) {
    generate::ModelSource source;
    source.path = run.string();
    source.max_length = max_length;
    try {
      generate::load_model(source);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK_THAT(generate_error(32), Catch::Contains("hf/config.json: sliding_window = 16 is shorter than --max-length=32"));
  // The control: within the window the check passes, and the load goes on to find no checkpoint.
  CHECK_THAT(generate_error(16), !Catch::Contains("sliding_window") && Catch::Contains("checkpoint"));
  fs::remove_all(dir);
}

TEST_CASE("config.json: where two fields say one thing, transformers' choice wins", "[hub]") {
  // Each expectation is what transformers 5.24's AutoConfig.from_pretrained reads from the same file.
  const auto dir = hub_scratch("precedence");
  auto read = [&](const json& j) { return read_config(dir, j); };
  json both = tiny_llama_json(false);
  both["dtype"] = "bfloat16";
  both["torch_dtype"] = "float16";
  CHECK(read(both).dtype == "bfloat16");  // v5's dtype over v4's torch_dtype
  json types = tiny_llama_json(false);
  types["rope_parameters"] = {{"rope_type", "llama3"}, {"type", "linear"}, {"rope_theta", 5000.0}, {"factor", 8.0},
                              {"low_freq_factor", 1.0}, {"high_freq_factor", 3.0},
                              {"original_max_position_embeddings", 32}};
  CHECK(read(types).rope_scaling.type == config::RopeType::llama3);  // rope_type over the legacy type
  types["rope_scaling"] = types["rope_parameters"];
  types.erase("rope_parameters");
  CHECK(read(types).rope_scaling.type == config::RopeType::llama3);  // in either form
  // A non-empty rope_scaling is read before rope_parameters, its theta from the top level when it has none.
  json forms = tiny_llama_json(false);  // rope_parameters: default, theta 5000
  forms["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  forms["rope_theta"] = 7000.0;
  const auto v4 = read(forms);
  CHECK(v4.rope_scaling.type == config::RopeType::linear);
  CHECK(v4.rope_scaling.factor == 2.0);
  CHECK(v4.rope_theta == 7000.0);
  forms["rope_scaling"] = json::object();  // empty: rope_parameters
  CHECK(read(forms).rope_scaling.type == config::RopeType::none);
  CHECK(read(forms).rope_theta == 5000.0);
  // Without head_dim: Qwen3Config's default, 128; Llama's (and Mistral's, Qwen2's) hidden_size / num_attention_heads.
  json qwen3 = tiny_llama_json(false);
  qwen3["architectures"] = {"Qwen3ForCausalLM"};
  qwen3["model_type"] = "qwen3";
  qwen3.erase("head_dim");
  CHECK(read(qwen3).head_dim == 128);
  qwen3["head_dim"] = 8;
  CHECK(read(qwen3).head_dim == 8);
  json llama = tiny_llama_json(false);
  llama.erase("head_dim");
  CHECK(read(llama).head_dim == 32 / 4);
  fs::remove_all(dir);
}

TEST_CASE("model directory: a missing, unexpected or mis-shaped tensor is refused naming file and tensor", "[hub]") {
  const auto dir = hub_scratch("weights");
  write_model_dir(dir, false, [](auto&) {});
  CHECK(load_error(dir).empty());
  write_model_dir(dir, false, [](auto& t) { t.erase(t.begin() + 3); });
  CHECK_THAT(load_error(dir), Catch::Contains("'model.layers.0.self_attn.k_proj.weight' is missing"));
  write_model_dir(dir, false, [](auto& t) { t.emplace_back("model.layers.9.mlp.up_proj.weight", at::zeros({2})); });
  CHECK_THAT(load_error(dir), Catch::Contains("unexpected tensor 'model.layers.9.mlp.up_proj.weight'"));
  write_model_dir(dir, false, [](auto& t) { t[0].second = at::zeros({64, 31}); });
  CHECK_THAT(load_error(dir), Catch::Contains("config.json: gives tensor 'model.embed_tokens.weight' the shape [64, 32], "
                                              "but " + (dir / "model.safetensors").string() + " holds it as [64, 31]"));
  CHECK_THROWS_AS(hub::safetensors_dtype(at::kDouble), std::invalid_argument);
  fs::remove_all(dir);
}

TEST_CASE("model directory: a crafted config.json exits 2 naming it, before anything is allocated", "[hub]") {
  // What the trainer does with each directory: exit code, output, seconds, and its own peak resident memory, read by
  // GNU time (a direct child of this process would count this process's pages, which fork shares, in its peak).
  struct Outcome {
    int code;
    std::string output, last_line;
    double seconds;
    long max_rss_mib = -1;  // -1: /usr/bin/time is not installed
  };
  const bool gnu_time = fs::exists("/usr/bin/time");
  auto trainer = [&](const fs::path& dir) {
    const std::string rss = (dir / "trainer.rss").string();
    const auto start = std::chrono::steady_clock::now();
    const auto r = trainer_process::run_command((gnu_time ? "/usr/bin/time -f %M -o " + rss + " " : std::string()) +
                                                TRAINER_BIN + " base.yml steps=1 enable_checkpointing=false "
                                                "load_parameters_path=" + dir.string() +
                                                " base_output_directory=" + (dir / "runs").string());
    Outcome out{r.code, r.output, "", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
    std::string text = r.output;
    while (!text.empty() && text.back() == '\n') text.pop_back();
    out.last_line = text.substr(text.rfind('\n') + 1);
    if (gnu_time) {  // "%M" is the last line ("Command exited with non-zero status 2" may come first)
      std::string kib = trainer_process::read_text(rss);
      while (!kib.empty() && kib.back() == '\n') kib.pop_back();
      out.max_rss_mib = std::stol(kib.substr(kib.rfind('\n') + 1)) / 1024;
    }
    return out;
  };
  auto expect_refused = [&](const fs::path& dir, const std::string& message) {
    const Outcome r = trainer(dir);
    INFO(dir.string() << ": exit " << r.code << ", " << r.seconds << " s, " << r.max_rss_mib << " MiB\n" << r.output);
    CHECK(r.code == 2);
    CHECK_THAT(r.last_line, Catch::StartsWith("error: " + (dir / "config.json").string()) && Catch::Contains(message));
    CHECK(r.seconds < 30);  // about 1 s; a loaded 2-core machine may take longer to start LibTorch
    CHECK(r.max_rss_mib < 2048);
  };
  // A valid tiny model: the control, trained for one step.
  const auto valid = hub_scratch("crafted_valid");
  write_model_dir(valid, false, [](auto&) {});
  const Outcome trained = trainer(valid);
  INFO(trained.output);
  REQUIRE(trained.code == 0);
  // Shapes the weight files cannot hold.
  const auto vocab = hub_scratch("crafted_vocab");
  write_model_dir(vocab, false, [](auto&) {});
  json j = tiny_llama_json(false);
  j["vocab_size"] = 1000000000000;
  hub::write_json_file((vocab / "config.json").string(), j);
  expect_refused(vocab, "tensor 'model.embed_tokens.weight' the shape [1000000000000, 32]");
  const auto layers = hub_scratch("crafted_layers");
  write_model_dir(layers, false, [](auto&) {});
  j = tiny_llama_json(false);
  j["num_hidden_layers"] = 1000000000;
  hub::write_json_file((layers / "config.json").string(), j);
  expect_refused(layers, "num_hidden_layers = 1000000000, but the weight files hold 21 tensors");
  // Shapes the weight files do hold, 4 TiB of them (a sparse file: nothing is written), far past any memory here.
  const auto huge = hub_scratch("crafted_huge");
  j = tiny_llama_json(true);
  j["vocab_size"] = int64_t(1) << 35;
  hub::write_json_file((huge / "config.json").string(), j);
  json header = json::object();
  uint64_t at = 0;
  for (const auto& [name, shape] : hub::tensor_shapes(hub::read_hf_config((huge / "config.json").string()))) {
    uint64_t bytes = 4;
    for (int64_t d : shape) bytes *= uint64_t(d);
    header[name] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {at, at + bytes}}};
    at += bytes;
  }
  const std::string text = header.dump();
  {
    std::ofstream out(huge / "model.safetensors", std::ios::binary);
    for (int i = 0; i < 8; ++i) out.put(char(uint64_t(text.size()) >> (8 * i)));
    out << text;
  }
  fs::resize_file(huge / "model.safetensors", 8 + text.size() + at);
  REQUIRE(at > (uint64_t(1) << 42));
  expect_refused(huge, "GiB as weight_dtype=float32 alone, more than this process may take");
  // Under ZeRO-3 no process holds the whole weights (train/ModelBuild.h): the trainer's per-process plan refuses them.
  auto sharded = untouched_tiny_config();
  sharded.load_parameters_path = huge.string();
  sharded.shard_optimizer_over_data = sharded.shard_parameters_over_data = true;
  CHECK_NOTHROW(hub::configure_from_model_dir(sharded));
  CHECK_THROWS_WITH(train::refuse_what_cannot_fit(sharded, c10::Device(c10::kCPU), 4),
                    Catch::Contains("the model does not fit, found before allocating it"));
  for (const auto& d : {valid, vocab, layers, huge}) fs::remove_all(d);
}

TEST_CASE("model directory: each Hugging Face tensor reaches the parameter that plays its part", "[hub]") {
  // The file is written from Hugging Face names listed here (not from tensor_names), each tensor random, and the
  // loaded model's logits for one token are computed by hand from those tensors, as transformers' Llama computes
  // them. With one token, attention returns each head's v, so RoPE, q and k drop out: v and o, gate, up and down,
  // the norms, the embedding and lm_head must each sit where transformers puts them. gate_proj and up_proj (and k_proj
  // and v_proj) have the same shape, so only their values can tell a swap; q_proj [32, 32] and k_proj [16, 32] differ
  // in shape, which the load checks.
  const auto dir = hub_scratch("roles");
  hub::write_json_file((dir / "config.json").string(), tiny_llama_json(false));
  at::manual_seed(3);
  std::map<std::string, at::Tensor> w;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, bool norm = false) {
    w[name] = norm ? 1 + 0.5 * at::randn(shape) : at::randn(shape) * 0.3;
  };
  add("model.embed_tokens.weight", {64, 32});
  for (int i = 0; i < 2; ++i) {
    const std::string l = "model.layers." + std::to_string(i) + ".";
    add(l + "input_layernorm.weight", {32}, true);
    add(l + "self_attn.q_proj.weight", {32, 32});
    add(l + "self_attn.k_proj.weight", {16, 32});
    add(l + "self_attn.v_proj.weight", {16, 32});
    add(l + "self_attn.o_proj.weight", {32, 32});
    add(l + "post_attention_layernorm.weight", {32}, true);
    add(l + "mlp.gate_proj.weight", {64, 32});
    add(l + "mlp.up_proj.weight", {64, 32});
    add(l + "mlp.down_proj.weight", {32, 64});
  }
  add("model.norm.weight", {32}, true);
  add("lm_head.weight", {64, 32});
  hub::write_safetensors((dir / "model.safetensors").string(), {w.begin(), w.end()}, {{"format", "pt"}});
  auto c = configured(dir);
  model::Decoder m(model::DecoderOptions::from_config(c));
  hub::load_hf_weights(dir.string(), hub::read_hf_config((dir / "config.json").string()), *m);

  const auto tokens = at::tensor({5, 17, 60}, at::kLong).view({3, 1});
  auto norm = [](const at::Tensor& x, const at::Tensor& g) { return x * at::rsqrt(x.pow(2).mean(-1, true) + 1e-5) * g; };
  auto x = w["model.embed_tokens.weight"].index_select(0, tokens.view(-1));  // [3, 32]
  for (int i = 0; i < 2; ++i) {
    const std::string l = "model.layers." + std::to_string(i) + ".";
    const auto v = at::linear(norm(x, w[l + "input_layernorm.weight"]), w[l + "self_attn.v_proj.weight"]);  // [3, 2x8]
    const auto heads = v.view({3, 2, 1, 8}).expand({3, 2, 2, 8}).reshape({3, 32});  // query head h reads kv head h/2
    x = x + at::linear(heads, w[l + "self_attn.o_proj.weight"]);
    const auto h = norm(x, w[l + "post_attention_layernorm.weight"]);
    x = x + at::linear(at::silu(at::linear(h, w[l + "mlp.gate_proj.weight"])) * at::linear(h, w[l + "mlp.up_proj.weight"]),
                       w[l + "mlp.down_proj.weight"]);
  }
  const auto expected = at::linear(norm(x, w["model.norm.weight"]), w["lm_head.weight"]);
  at::NoGradGuard no_grad;
  const auto logits = m->forward(tokens).view({3, 64});
  CHECK(at::allclose(logits, expected, 1e-4, 1e-5));
  // Control: the same by hand with gate_proj and up_proj swapped in layer 0 is far from the model's logits.
  auto swapped = w;
  std::swap(swapped["model.layers.0.mlp.gate_proj.weight"], swapped["model.layers.0.mlp.up_proj.weight"]);
  hub::write_safetensors((dir / "model.safetensors").string(), {swapped.begin(), swapped.end()}, {{"format", "pt"}});
  model::Decoder s(model::DecoderOptions::from_config(c));
  hub::load_hf_weights(dir.string(), hub::read_hf_config((dir / "config.json").string()), *s);
  CHECK_FALSE(at::allclose(s->forward(tokens).view({3, 64}), expected, 1e-2, 1e-3));
  fs::remove_all(dir);
}

TEST_CASE("model directory: a sharded export reads back bit for bit", "[hub]") {
  // export_hf's shard size (ExportOptions.shard_bytes) made small, so the tiny model's 21 tensors (about 100 KB in
  // fp32) are spread over several files and model.safetensors.index.json; loading that directory gives each parameter
  // its exact bits back.
  const auto run = hub_scratch("shard_run"), out = hub_scratch("shard_out");
  auto c = untouched_tiny_config();
  model::Decoder m(model::DecoderOptions::from_config(c));
  const int64_t shard = 16 << 10;
  hub::export_model_dir(c, *m, run.string(), out.string(), {"float32", shard});
  REQUIRE(fs::exists(out / "model.safetensors.index.json"));
  CHECK_FALSE(fs::exists(out / "model.safetensors"));
  int files = 0;
  for (const auto& e : fs::directory_iterator(out)) {
    if (e.path().extension() != ".safetensors") continue;
    ++files;
    const auto f = hub::SafeTensorsFile::open(e.path().string());
    uint64_t bytes = 0;
    for (const auto& t : f.tensors()) bytes += t.end - t.begin;
    CHECK((bytes <= uint64_t(shard) || f.tensors().size() == 1));  // a shard holds at most shard_bytes, or one tensor
  }
  CHECK(files >= 4);
  auto back_cfg = configured(out);
  model::Decoder back(model::DecoderOptions::from_config(back_cfg));
  {
    at::NoGradGuard no_grad;
    for (auto& p : back->parameters()) p.zero_();  // so that every parameter compared below was loaded
  }
  const auto ours = m->named_parameters();
  hub::load_hf_weights(out.string(), hub::read_hf_config((out / "config.json").string()), *back);
  const auto loaded = back->named_parameters();
  REQUIRE(loaded.size() == ours.size());
  for (const auto& p : ours) {
    INFO(p.key());
    CHECK(at::equal(loaded[p.key()], p.value()));
  }
  fs::remove_all(run);
  fs::remove_all(out);
}

TEST_CASE("tied output: one parameter, and its shadow holds both uses' gradients", "[hub]") {
  auto c = tiny_config();
  c.logits_via_embedding = true;
  model::Decoder plain(model::DecoderOptions::from_config(c));
  model::Decoder folded(model::DecoderOptions::from_config(c));
  int64_t outputs = 0;
  for (const auto& p : plain->named_parameters()) outputs += p.key() == "output";
  CHECK(outputs == 0);
  CHECK(plain->output_weight().data_ptr() == plain->named_parameters()["embedding"].data_ptr());
  auto tokens = at::randint(64, {2, 16}, at::kLong);
  auto loss_of = [&](model::Decoder& m) { return m->forward(tokens).logsumexp(-1).mean(); };
  loss_of(plain).backward();
  accumulate::ShadowAccumulator acc(folded->parameters(), at::kFloat);
  folded->set_weight_casts({[&](const at::Tensor& p, c10::ScalarType d) { return acc.cast(p, d); },
                            [&](const at::Tensor& p, const at::Tensor& i, c10::ScalarType d) {
                              return acc.gather_rows(p, i, d);
                            }});
  acc.begin();
  loss_of(folded).backward();
  acc.end();
  const auto& embedding_grad = plain->named_parameters()["embedding"].grad();
  const auto& shadow = acc.shadows()[0];  // the embedding is the first parameter
  CHECK(at::allclose(shadow, embedding_grad, 1e-6, 1e-7));
  // Both uses reached it: a row whose token is in the input differs from the output projection's part alone.
  model::Decoder untied(model::DecoderOptions::from_config(c));
  {
    at::NoGradGuard no_grad;
    untied->named_parameters()["embedding"].copy_(plain->named_parameters()["embedding"]);
  }
  auto h = untied->hidden(tokens).detach();  // the same hidden states, with no path back into the embedding
  at::linear(h, untied->named_parameters()["embedding"]).logsumexp(-1).mean().backward();
  const auto output_part = untied->named_parameters()["embedding"].grad();
  const int64_t used = tokens[0][0].item<int64_t>();
  CHECK(at::allclose(shadow, output_part, 1e-6, 1e-7) == false);
  CHECK_FALSE(at::allclose(shadow[used], output_part[used], 1e-5, 1e-7));
}

// Run by tests/hf_parity_test.py: the logits of the model directory $SHADOWGRAD_HF_LOGITS on its tokens.safetensors
// ("tokens": [B,T], as F32), written to ours.safetensors ("logits": [B,T,V] fp32). The comparison is made there.
TEST_CASE("hub: logits of a model directory for tests/hf_parity_test.py", "[hub][can_skip]") {
  const char* dir = std::getenv("SHADOWGRAD_HF_LOGITS");
  if (!dir) SG_SKIP("SHADOWGRAD_HF_LOGITS is not set (tests/hf_parity_test.py sets it)");
  auto input = hub::SafeTensorsFile::open(std::string(dir) + "/tokens.safetensors");
  auto tokens = input.view(*input.find("tokens")).to(at::kLong);
  auto c = untouched_tiny_config();
  c.max_target_length = tokens.size(1);
  c.load_parameters_path = dir;
  const auto hf = hub::configure_from_model_dir(c);
  model::Decoder m(model::DecoderOptions::from_config(c));
  hub::load_hf_weights(dir, hf, *m);
  at::NoGradGuard no_grad;
  hub::write_safetensors(std::string(dir) + "/ours.safetensors", {{"logits", m->forward(tokens)}}, {});
}
