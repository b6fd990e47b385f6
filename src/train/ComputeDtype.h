#pragma once
// The compute dtype a run trains in, and why: dtype=auto resolved for this device, or kept from the run it resumes.
//
//   ComputeDtypeChoice choice = choose_compute_dtype(cfg);   // before the model is built
//   cfg.dtype = config::as_compute_dtype(choice.dtype);      // config.yml then records the resolved value
//   spdlog::info("... dtype={} ({})", choice.dtype, choice.why);
//
// - auto on a fresh run: bfloat16 where the device computes it natively, float32 elsewhere (config/Dtypes.h).
// - auto on a resumed run: the dtype its config.yml recorded, even on another host, so a resumed run goes on with the
//   numerics it started with. When this host would choose otherwise, `warning` says so and how to switch.
// - An explicit value is used as given. When it differs from what a resumed run recorded, `warning` says what changed;
//   an explicit bfloat16 on a CPU without native bf16 gets the measured slowdown in `warning`.
#include <string>

#include "config/Config.h"

namespace shadowgrad::train {

struct ComputeDtypeChoice {
  config::FloatDtype dtype = config::FloatDtype::float32;
  std::string why;      // for the run line, e.g. "auto: this CPU has no avx512_bf16 or AMX (torch's cpuinfo)"
  std::string warning;  // empty, or what the user should know (a slow dtype, a dtype that changed on resume)
};

ComputeDtypeChoice choose_compute_dtype(const config::Config& cfg);

} // namespace shadowgrad::train
