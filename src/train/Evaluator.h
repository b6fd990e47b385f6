#pragma once
// eval_loss: the token-weighted loss of a fixed held-out set, under no-grad. It never touches the shadow tree
// or the optimizer, and it reads the same examples at every evaluation, so two runs' eval_loss can be compared
// step by step.
//
//   Evaluator eval(cfg, world_size);                  // validates the eval data; throws DataError; writes nothing
//   if (eval.due(completed_steps)) loss = eval.run(model, device, dp);   // every process calls it
//
// The eval set is the first batches x G examples of the eval source, G = eval_per_device_batch_size x processes;
// eval batch b on process r is examples [b*G + r*B, b*G + (r+1)*B). So the set depends on eval_steps and G only,
// not on K, and each process evaluates its slice; the loss and token sums are all-reduced once per evaluation.
#include <cstdint>
#include <memory>
#include <optional>

#include <c10/core/Device.h>

#include "model/Decoder.h"
#include "train/EvalSamples.h"
#include "train/PreferenceLoss.h"

namespace shadowgrad::config {
struct Config;
}
namespace shadowgrad::data {
class DataSource;
}
namespace shadowgrad::distributed {
class DataParallel;
}

namespace shadowgrad::train {

class Evaluator {
public:
  Evaluator(const config::Config& cfg, int world_size);
  ~Evaluator();

  bool enabled() const { return source_ != nullptr; }
  // After `completed_steps` optimizer steps, which took the sequences seen from `sequences_before` to
  // `sequences_after`: every eval_interval steps, whenever a multiple of eval_interval_sequences is crossed, and after
  // the last step (the step that reaches train_tokens, too).
  bool due(int64_t completed_steps, int64_t sequences_before = 0, int64_t sequences_after = 0) const;
  double run(model::Decoder& model, c10::Device device, distributed::DataParallel* dp) const;
  int64_t batches() const { return batches_; }
  // eval_prompts_path's greedy samples, written after each evaluation (EvalSamples.h).
  EvalSamples& samples() { return samples_; }
  int64_t batch_per_process() const { return batch_; }
  // use_dpo: the last run()'s sums over the held-out pairs (eval_loss is their objective); empty otherwise.
  const std::optional<PreferenceSums>& last_preference() const { return last_preference_; }
  data::DataSource* source() { return source_.get(); }

private:
  std::unique_ptr<data::DataSource> source_; // null when eval_interval <= 0
  int64_t interval_, interval_sequences_, last_step_, last_sequences_, batch_, world_, batches_ = 0, loss_chunk_tokens_;
  bool fused_kernels_;
  PreferenceOptions preference_;
  mutable std::optional<PreferenceSums> last_preference_;
  EvalSamples samples_;
  double run_pairs(model::Decoder& model, c10::Device device, distributed::DataParallel* dp) const;
};

} // namespace shadowgrad::train
