// dtype=auto: bf16 only where the device computes it natively, the choice and its reason on the run line, the
// resolved value in config.yml, and a resumed run keeping the dtype it started with. The host's own answer is
// overridden (SHADOWGRAD_CPU_BF16, ONEDNN_MAX_CPU_ISA), so every case holds on an AVX2 host and on one with AMX.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "ScopedEnv.h"
#include "TinyConfig.h"
#include "TrainerProcess.h"
#include "config/Dtypes.h"
#include "train/ComputeDtype.h"
#include "util/NativeBf16.h"

namespace fs = std::filesystem;
namespace tp = trainer_process;
using shadowgrad::config::ComputeDtype;
using shadowgrad::config::FloatDtype;
using shadowgrad::train::choose_compute_dtype;

namespace {

// A run directory that looks resumable: config.yml recording `dtype`, and one checkpoint directory.
shadowgrad::config::Config resumable_run(const std::string& name, const std::string& recorded) {
  auto c = tiny_config();
  c.base_output_directory = tp::fresh_dir(name);
  c.run_name = "r";
  fs::create_directories(c.base_output_directory + "/r/checkpoints/step-1");
  std::ofstream(c.base_output_directory + "/r/config.yml") << "steps: 8\ndtype: " << recorded << "\n";
  return c;
}

} // namespace

TEST_CASE("dtype=auto picks bf16 only where the CPU computes it natively, and says why", "[compute-dtype]") {
  ScopedEnv no_isa_cap("ONEDNN_MAX_CPU_ISA", nullptr);
  auto c = tiny_config();
  c.dtype = ComputeDtype::auto_;
  {
    ScopedEnv slow("SHADOWGRAD_CPU_BF16", "slow");
    const auto choice = choose_compute_dtype(c);
    CHECK(choice.dtype == FloatDtype::float32);
    CHECK(choice.why == "auto: SHADOWGRAD_CPU_BF16=slow");
    CHECK(choice.warning.empty());
    CHECK(shadowgrad::config::resolve_compute_dtype(ComputeDtype::auto_, c.hardware) == FloatDtype::float32);
  }
  {
    ScopedEnv native("SHADOWGRAD_CPU_BF16", "native");
    const auto choice = choose_compute_dtype(c);
    CHECK(choice.dtype == FloatDtype::bfloat16);
    CHECK(choice.why == "auto: SHADOWGRAD_CPU_BF16=native");
  }
  {
    // oneDNN capped below its bf16 ISA: slow, whatever the CPU.
    ScopedEnv unset("SHADOWGRAD_CPU_BF16", nullptr);
    ScopedEnv cap("ONEDNN_MAX_CPU_ISA", "avx2");
    const auto choice = choose_compute_dtype(c);
    CHECK(choice.dtype == FloatDtype::float32);
    CHECK_THAT(choice.why, Catch::Contains("ONEDNN_MAX_CPU_ISA=avx2"));
  }
  {
    // The host's own answer agrees with the ISA torch's cpuinfo reports.
    ScopedEnv unset("SHADOWGRAD_CPU_BF16", nullptr);
    const bool native = shadowgrad::util::cpu_bf16_support().native;
    const auto choice = choose_compute_dtype(c);
    CHECK(native == (choice.dtype == FloatDtype::bfloat16));
    CHECK_THAT(choice.why, Catch::StartsWith(native ? "auto: this CPU has " : "auto: this CPU has no avx512_bf16 or AMX"));
  }
}

TEST_CASE("an explicit dtype is kept, and bfloat16 on a CPU without native bf16 warns with the measured slowdown",
          "[compute-dtype]") {
  ScopedEnv slow("SHADOWGRAD_CPU_BF16", "slow");
  auto c = tiny_config();
  c.dtype = ComputeDtype::bfloat16;
  auto choice = choose_compute_dtype(c);
  CHECK(choice.dtype == FloatDtype::bfloat16);
  CHECK(choice.why == "as given");
  CHECK_THAT(choice.warning, Catch::Contains("360x slower than fp32") && Catch::Contains("dtype=auto or float32"));
  c.dtype = ComputeDtype::float32;
  choice = choose_compute_dtype(c);
  CHECK(choice.dtype == FloatDtype::float32);
  CHECK(choice.warning.empty());
  ScopedEnv native("SHADOWGRAD_CPU_BF16", "native");
  c.dtype = ComputeDtype::bfloat16;
  CHECK(choose_compute_dtype(c).warning.empty());
}

TEST_CASE("a resumed run keeps the dtype it started with, and says what a host or an override would change",
          "[compute-dtype]") {
  ScopedEnv slow("SHADOWGRAD_CPU_BF16", "slow");  // this host: no native bf16
  auto c = resumable_run("dtype_resume", "bfloat16");  // started where bf16 was native
  c.dtype = ComputeDtype::auto_;
  auto choice = choose_compute_dtype(c);
  CHECK(choice.dtype == FloatDtype::bfloat16);
  CHECK(choice.why == "auto: kept from the run's config.yml (resumed)");
  CHECK_THAT(choice.warning, Catch::Contains("dtype=auto keeps bfloat16 from the run's start; on this host auto would "
                                             "choose float32") &&
                                 Catch::Contains("pass dtype=float32 to switch"));
  c.dtype = ComputeDtype::float32;
  choice = choose_compute_dtype(c);
  CHECK(choice.dtype == FloatDtype::float32);
  CHECK(choice.warning == "dtype changed: the run started in bfloat16 and continues in float32");
  // Without resume, or without a checkpoint, the run is fresh: the host decides.
  c.dtype = ComputeDtype::auto_;
  c.resume = false;
  CHECK(choose_compute_dtype(c).dtype == FloatDtype::float32);
  c.resume = true;
  fs::remove_all(c.base_output_directory + "/r/checkpoints");
  CHECK(choose_compute_dtype(c).dtype == FloatDtype::float32);
  fs::remove_all(c.base_output_directory);
}

TEST_CASE("the trainer's run line names the chosen dtype and why, and config.yml records it", "[compute-dtype][cli]") {
  ScopedEnv slow("SHADOWGRAD_CPU_BF16", "slow");  // inherited by the trainer process
  const std::string out = tp::fresh_dir("dtype_auto_cli");
  std::string tiny = tp::kTinyModel;  // tiny.yml without its dtype: the default, auto, decides
  REQUIRE(tiny.find(" dtype=float32") != std::string::npos);
  tiny.erase(tiny.find(" dtype=float32"), std::string(" dtype=float32").size());
  const auto r = tp::run("base.yml steps=2 run_name=a base_output_directory=" + out + tiny);
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK_THAT(tp::line_with(r.output, "] run "),
             Catch::Contains("dtype=float32 (auto: SHADOWGRAD_CPU_BF16=slow)"));
  CHECK_THAT(tp::read_text(out + "/a/config.yml"), Catch::Contains("\ndtype: float32\n"));

  // Started where bf16 is native, resumed where it is not: the run goes on in bf16, and says so.
  const std::string run_b = "base.yml run_name=b checkpoint_period=2 base_output_directory=" + out + tiny;
  {
    ScopedEnv native("SHADOWGRAD_CPU_BF16", "native");
    const auto started = tp::run(run_b + " steps=2");
    INFO(started.output);
    REQUIRE(started.code == 0);
    CHECK_THAT(tp::line_with(started.output, "] run "),
               Catch::Contains("dtype=bfloat16 (auto: SHADOWGRAD_CPU_BF16=native)"));
  }
  const auto resumed = tp::run(run_b + " steps=4");
  INFO(resumed.output);
  REQUIRE(resumed.code == 0);
  CHECK_THAT(tp::line_with(resumed.output, "] run "),
             Catch::Contains("dtype=bfloat16 (auto: kept from the run's config.yml (resumed))"));
  CHECK_THAT(tp::line_with(resumed.output, "dtype=auto keeps"),
             Catch::Contains("[warning] dtype=auto keeps bfloat16 from the run's start; on this host auto would choose "
                             "float32"));
  CHECK_THAT(tp::read_text(out + "/b/config.yml"), Catch::Contains("\ndtype: bfloat16\n"));
  fs::remove_all(out);
}
