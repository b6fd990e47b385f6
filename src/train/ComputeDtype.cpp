#include "train/ComputeDtype.h"

#include <filesystem>
#include <optional>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "checkpoint/Checkpointer.h"
#include "config/Dtypes.h"

namespace shadowgrad::train {
namespace {

// The dtype a resumable run's config.yml recorded; nullopt for a fresh run, or one whose config.yml says auto (never
// written by a trainer that resolves it) or cannot be read (the checkpoint check reports that later, in full).
std::optional<config::FloatDtype> recorded_dtype(const config::Config& cfg) {
  if (!checkpoint::can_resume(cfg)) return std::nullopt;
  const auto path = std::filesystem::path(checkpoint::run_dir_of(cfg)) / "config.yml";
  try {
    const std::string text = YAML::LoadFile(path.string())["dtype"].as<std::string>("");
    if (text == "float32") return config::FloatDtype::float32;
    if (text == "bfloat16") return config::FloatDtype::bfloat16;
  } catch (const YAML::Exception&) {
  }
  return std::nullopt;
}

util::Bf16Support device_support(config::Hardware hardware) {
  return hardware == config::Hardware::cuda ? util::cuda_bf16_support(0) : util::cpu_bf16_support();
}

// Measured on an AVX2-only AMD EPYC, torch 2.14.1 (docs/performance.md, "Compute dtype").
constexpr const char* kSlowBf16 =
    "bf16 matmuls run ~360x slower than fp32 without avx512_bf16 or AMX (0.3 against 109 GF/s on an AVX2 EPYC), and "
    "training ~40x slower";

} // namespace

ComputeDtypeChoice choose_compute_dtype(const config::Config& cfg) {
  const util::Bf16Support support = device_support(cfg.hardware);
  const auto host_choice = support.native ? config::FloatDtype::bfloat16 : config::FloatDtype::float32;
  const auto recorded = recorded_dtype(cfg);
  ComputeDtypeChoice c;
  if (cfg.dtype == config::ComputeDtype::auto_) {
    if (recorded) {
      c.dtype = *recorded;
      c.why = "auto: kept from the run's config.yml (resumed)";
      if (*recorded != host_choice)
        c.warning = fmt::format("dtype=auto keeps {} from the run's start; on this host auto would choose {} ({}); "
                                "pass dtype={} to switch",
                                *recorded, host_choice, support.why, host_choice);
    } else {
      c.dtype = host_choice;
      c.why = "auto: " + support.why;
    }
  } else {
    c.dtype = config::resolve_compute_dtype(cfg.dtype, cfg.hardware);
    c.why = "as given";
    if (recorded && *recorded != c.dtype)
      c.warning = fmt::format("dtype changed: the run started in {} and continues in {}", *recorded, c.dtype);
  }
  if (c.dtype == config::FloatDtype::bfloat16 && !support.native && cfg.hardware == config::Hardware::cpu)
    c.warning += fmt::format("{}dtype=bfloat16 but {}: {}; dtype=auto or float32 is faster here",
                             c.warning.empty() ? "" : "; ", support.why, kSlowBf16);
  return c;
}

} // namespace shadowgrad::train
