#pragma once
// The preference loss's reference, with no second model: the model at step 0 (the base, plus the restored adapter if
// any, as TRL's reference is in both the full and the peft case) scores every train and eval pair once, before
// step 1, in eval mode; the summed answer log-probs are kept in RUN/reference_logps.bin with a fingerprint of the
// pair files (and max_target_length, sft_long_examples) and of the starting weights. A resume reuses them (the
// weights have moved since, so they cannot be recomputed: pair files that changed are refused); a fresh start with a
// stored file for other data or another start recomputes it, saying why.
//
//   prepare_reference(cfg, *train_pairs, eval_pairs, model, device, run_dir, /*resumed=*/false, /*writer=*/rank == 0);
#include <string>

#include <c10/core/Device.h>

#include "model/Decoder.h"

namespace shadowgrad::config {
struct Config;
}
namespace shadowgrad::data {
class PairSource;
}

namespace shadowgrad::train {

inline constexpr const char* kReferenceFile = "reference_logps.bin";

// Sets the reference of `train` and `eval` (may be null). Throws DataError when a resumed run's reference file is
// missing or belongs to other pairs.
void prepare_reference(const config::Config& cfg, data::PairSource& train, data::PairSource* eval,
                       model::Decoder& model, c10::Device device, const std::string& run_dir, bool resumed,
                       bool writer);

} // namespace shadowgrad::train
