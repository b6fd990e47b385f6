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
