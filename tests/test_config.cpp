// Config: schema, YAML loading, overrides, validation, and base.yml/docs staying equal to the schema.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "config/ConfigLoader.h"
#include "config/ConfigSchema.h"
#include "config/ConfigWriter.h"
#include "util/Errors.h"

using namespace shadowgrad;
using namespace shadowgrad::config;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string temp_yaml(const std::string& text) {
  static int n = 0;
  auto path = (std::filesystem::temp_directory_path() / ("sg_cfg_" + std::to_string(::getpid()) + "_" +
                                                         std::to_string(n++) + ".yml")).string();
  std::ofstream(path) << text;
  return path;
}

std::string error_of(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    load_config(temp_yaml(yaml), overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

std::string config_error_of_file(const std::string& path) {
  try {
    load_config(path, {});
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

} // namespace

TEST_CASE("configs/base.yml equals the schema's defaults, key by key and byte by byte", "[config]") {
  const std::string base = SHADOWGRAD_SOURCE_DIR "/configs/base.yml";
  Config loaded = load_config(base, {});
  Config defaults;
  for (const auto& key : schema()) {
    INFO(key.name);
    CHECK(key.get(loaded) == key.get(defaults));
    CHECK(key.get(defaults) == key.default_text);
  }
  CHECK(slurp(base) == to_yaml(defaults));
}

TEST_CASE("docs/config.md is generated from the schema", "[config]") {
  CHECK(slurp(SHADOWGRAD_SOURCE_DIR "/docs/config.md") == markdown_reference());
}

TEST_CASE("to_yaml round-trips a modified config", "[config]") {
  Config c;
  c.steps = 7;
  c.grad_dtype = GradDtype::bfloat16;
  c.run_name = "has \"quotes\" and \\";
  c.learning_rate = 1.25e-4;
  Config back = load_config(temp_yaml(to_yaml(c)), {});
  for (const auto& key : schema()) CHECK(key.get(back) == key.get(c));
}

TEST_CASE("canonical_value spells a saved value as the key prints it, or gives nothing", "[config]") {
  Config c;
  c.learning_rate = 1e-3;
  CHECK(canonical_value("learning_rate", "1e-3") == find_key("learning_rate")->get(c));
  CHECK(canonical_value("learning_rate", "0.001") == find_key("learning_rate")->get(c));
  CHECK(canonical_value("grad_dtype", "bfloat16") == std::optional<std::string>("bfloat16"));
  CHECK_FALSE(canonical_value("steps", "twenty"));
  CHECK_FALSE(canonical_value("grad_dtype", "float64"));
  CHECK_FALSE(canonical_value("no_such_key", "1"));
}

TEST_CASE("overrides are typed and validated", "[config]") {
  Config c = load_config(temp_yaml("steps: 3\n"), {"gradient_accumulation_steps=4", "grad_dtype=bfloat16",
                                                   "learning_rate=1e-3"});
  CHECK(c.steps == 3);
  CHECK(c.gradient_accumulation_steps == 4);
  CHECK(c.grad_dtype == GradDtype::bfloat16);
  CHECK(c.learning_rate == 1e-3);
}

TEST_CASE("config errors name the key, value, file or line", "[config][errors]") {
  CHECK(error_of("", {"gradient_acumulation_steps=4"}) ==
        "unknown config key 'gradient_acumulation_steps' (did you mean 'gradient_accumulation_steps'?)");
  CHECK_THAT(error_of("", {"steps=ten"}), Catch::Contains("'ten'") && Catch::Contains("'steps'") &&
                                                 Catch::Contains("an integer"));
  CHECK_THAT(error_of("", {"steps=0"}), Catch::Contains("an integer >= 1"));
  CHECK_THAT(error_of("", {"per_device_batch_size=-2"}), Catch::Contains("per_device_batch_size"));
  CHECK_THAT(error_of("", {"grad_dtype=fp8"}), Catch::Contains("float32|bfloat16|float16"));
  CHECK_THAT(error_of("", {"learning_rate=fast"}), Catch::Contains("learning_rate"));
  CHECK_THAT(error_of("", {"steps"}), Catch::Contains("not of the form key=value"));
  CHECK_THAT(error_of("", {"steps=2", "steps=3"}), Catch::Contains("overridden twice"));
  CHECK_THAT(error_of("", {"base_num_query_heads=3", "base_num_kv_heads=2"}),
             Catch::Contains("base_num_query_heads (3) must be a multiple of base_num_kv_heads (2)"));
  CHECK_THAT(error_of("", {"head_dim=15"}), Catch::Contains("head_dim"));
  CHECK_THAT(error_of("", {"dataset_type=text"}), Catch::Contains("dataset_path"));
  CHECK_THAT(error_of("steps: 1\nsteps: 2\n"), Catch::Contains(":2:") && Catch::Contains("appears twice"));
  CHECK_THAT(error_of("steps: 1\nbogus_key: 2\n"), Catch::Contains(":2: unknown config key 'bogus_key'"));
  CHECK_THAT(error_of("steps: 1\nlog_period: [1, 2\n"), Catch::Contains("YAML syntax error"));
  CHECK_THAT(error_of("steps: 1\nlearning_rate: {a: 1}\n"), Catch::Contains("single value"));
  CHECK_THAT(error_of("steps: 1\n  nested: oops\n"), Catch::Contains(":2:"));
}

TEST_CASE("a missing config file is a clear error", "[config][errors]") {
  CHECK_THROWS_WITH(load_config("/nonexistent/base.yml", {}), "config file '/nonexistent/base.yml' does not exist");
}

TEST_CASE("config paths resolve against the current directory, then configs/", "[config]") {
  const std::string configs = SHADOWGRAD_SOURCE_DIR "/configs";
  CHECK(resolve_config_path("base.yml", configs) == configs + "/base.yml");
  CHECK(resolve_config_path("/abs/x.yml", configs) == "/abs/x.yml");
}

namespace {

std::string config_temp_dir_with(const std::vector<std::pair<std::string, std::string>>& files) {
  static int n = 0;
  auto dir = std::filesystem::temp_directory_path() / ("sg_base_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
  std::filesystem::create_directories(dir);
  for (const auto& [name, text] : files) std::ofstream(dir / name) << text;
  return dir.string();
}

} // namespace

TEST_CASE("base_config reads the named file first, then this file's keys, then the overrides", "[config]") {
  const auto dir = config_temp_dir_with({{"parent.yml", "steps: 7\nlearning_rate: 1e-3\nlog_period: 5\n"},
                                  {"child.yml", "base_config: parent.yml\nlearning_rate: 2e-4\nlog_period: 25\n"}});
  Config c = load_config(dir + "/child.yml", {"steps=9"});
  CHECK(c.learning_rate == 2e-4);  // the child over its base
  CHECK(c.steps == 9);             // the override over both
  CHECK(c.log_period == 25);
  CHECK(c.given_keys.count("learning_rate"));
  CHECK_FALSE(c.given_keys.count("log_period"));  // set back to its default: not given
  Config parent_only = load_config(dir + "/child.yml", {});
  CHECK(parent_only.steps == 7);  // the base's value where the child says nothing
  CHECK(parent_only.given_keys.count("steps"));
}

TEST_CASE("base_config is looked up beside the file, else as CONFIG is (in configs/)", "[config]") {
  const auto dir = config_temp_dir_with({{"mine.yml", "base_config: lora.yml\ndataset_path: /d\nlearning_rate: 1e-4\n"}});
  const Config c = load_config(dir + "/mine.yml", {}, SHADOWGRAD_SOURCE_DIR "/configs");
  CHECK(c.learning_rate == 1e-4);  // this file over lora.yml
  CHECK(c.lora_rank == 16);        // lora.yml over base.yml
  CHECK(c.adam_b2 == 0.999);
  // Control: without the configs directory there is no lora.yml beside mine.yml or in the current directory.
  CHECK_THAT(config_error_of_file(dir + "/mine.yml"), Catch::Contains("mine.yml:1: base_config: config file 'lora.yml' "
                                                                      "does not exist"));
}

TEST_CASE("base_config: a cycle or a missing file is an error naming FILE:LINE", "[config][errors]") {
  const auto dir = config_temp_dir_with({{"a.yml", "steps: 3\nbase_config: b.yml\n"},
                                  {"b.yml", "base_config: a.yml\n"},
                                  {"self.yml", "base_config: self.yml\n"},
                                  {"lost.yml", "steps: 2\nbase_config: nowhere.yml\n"},
                                  {"device.yml", "base_config: /dev/zero\n"}});
  CHECK_THAT(config_error_of_file(dir + "/a.yml"), Catch::Contains("b.yml:1: base_config 'a.yml' is a cycle"));
  CHECK_THAT(config_error_of_file(dir + "/self.yml"), Catch::Contains("self.yml:1: base_config 'self.yml' is a cycle"));
  CHECK_THAT(config_error_of_file(dir + "/lost.yml"), Catch::Contains("lost.yml:2: base_config: config file") &&
                                                   Catch::Contains("nowhere.yml' does not exist"));
  CHECK_THAT(config_error_of_file(dir + "/device.yml"), Catch::Contains("device.yml:1: base_config: '/dev/zero' is "
                                                                        "not a regular file"));
}

// The keys a recipe lists at base.yml's value (repeats), and how many it lists.
std::pair<std::vector<std::string>, int> repeats_of_base(const std::string& path) {
  const Config base = load_config(SHADOWGRAD_SOURCE_DIR "/configs/base.yml", {});
  const std::string text = slurp(path);
  const Config c = load_config(path, {"dataset_path=/d"});
  std::vector<std::string> repeated;
  int listed = 0;
  for (const auto& key : schema()) {
    if (text.find("\n" + key.name + ": ") == std::string::npos) continue;
    ++listed;
    if (key.get(c) == key.get(base)) repeated.push_back(key.name);
  }
  return {repeated, listed};
}

TEST_CASE("the recipes inherit base.yml and repeat none of its values", "[config]") {
  const std::string configs = SHADOWGRAD_SOURCE_DIR "/configs/";
  for (const std::string recipe : {"sft.yml", "lora.yml", "dpo.yml"}) {
    INFO(recipe);
    REQUIRE_THAT(slurp(configs + recipe), Catch::Contains("\nbase_config: base.yml\n"));
    const auto [repeated, listed] = repeats_of_base(configs + recipe);
    CHECK(repeated.empty());
    CHECK(listed >= 5);
  }
  // Control: a recipe that lists base.yml's own steps is caught.
  const auto dir = config_temp_dir_with({{"r.yml", "base_config: " + configs + "base.yml\ndataset_type: sft\nsteps: 300\n"}});
  CHECK(repeats_of_base(dir + "/r.yml").first == std::vector<std::string>{"steps"});
  CHECK(load_config(configs + "lora.yml", {"dataset_path=/d"}).lora_rank == 16);
  CHECK(load_config(configs + "dpo.yml", {"dataset_path=/d"}).use_dpo);
  CHECK(load_config(configs + "sft.yml", {"dataset_path=/d"}).learning_rate == 2e-5);
}
