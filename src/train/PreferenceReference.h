#pragma once
// The preference loss's reference, with no second model: the model at step 0 (the base, plus the restored adapter if
// any, as TRL's reference is in both the full and the peft case) scores every train and eval pair once, before
// step 1; the summed answer log-probs are kept in the run directory, one file per pair set:
//   RUN/reference_logps.bin       the train pairs (dataset_path)
//   RUN/reference_logps.eval.bin  the eval pairs (eval_dataset_path)
// each with a fingerprint of its pair file (and max_target_length, sft_long_examples), of the starting weights, and of
// how the pass grouped the pairs (the file's format: train/ReferenceFile.h).
//
// The pass scores the pairs in the very microbatches the run reads them in: the train pairs as the first epoch's
// microbatches of per_device_batch_size pairs (the step's rows, packing and order; grad mode on, as in the step), the
// eval pairs as the evaluator's batches. So at step 1 (and at an eval_on_start evaluation) the policy's log-probs are
// bitwise the reference's, at any dtype: every reward is exactly 0.
//
// It stops, resumes and shares its work:
//   - with several processes, the microbatches left are dealt round-robin (the i-th to process i mod WORLD_SIZE), and
//     the values are gathered (every process ends with the whole reference; rank 0 writes the files);
//   - a stop signal ends it within one microbatch (InterruptedError, exit 130 for SIGINT); what was scored is kept in
//     the file (also every minute), and the next run of the same command continues from there;
//   - a resume reads the files back; a train file for other pairs is refused (the weights have moved since step 0); an
//     eval file that is missing or made for other eval pairs (eval_dataset_path added or changed since the start) is
//     computed from the starting weights, which score_eval_from_start() checks against the recorded fingerprint.
//
//   ReferencePass ref(cfg, *train_pairs, eval_pairs, evaluator.batch_per_process(), model, device, dp, signals);
//   if (resuming && ref.eval_needs_start(run_dir)) { /* load the starting weights */ ref.score_eval_from_start(); }
//   StartPoint start = open_run(...);                    // restores the checkpoint
//   ref.prepare(run_dir, /*resumed=*/start.state.step > 0, /*writer=*/rank == 0);
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "model/Decoder.h"

namespace shadowgrad::config {
struct Config;
}
namespace shadowgrad::data {
class PairSource;
}
namespace shadowgrad::distributed {
class DataParallel;
}

namespace shadowgrad::train {

class StopSignals;

inline constexpr const char* kReferenceFile = "reference_logps.bin";
inline constexpr const char* kEvalReferenceFile = "reference_logps.eval.bin";

// A fingerprint of every parameter and buffer of the model (names and every byte), hashed in 1 MiB blocks on the
// intra-op threads and combined in order: the same value at any thread count.
uint64_t starting_weights_key(model::Decoder& model);


class ReferencePass {
 public:
  // `eval` may be null; `eval_batch` is the evaluator's pairs per process and batch.
  ReferencePass(const config::Config& cfg, data::PairSource& train, data::PairSource* eval, int64_t eval_batch,
                model::Decoder& model, c10::Device device, distributed::DataParallel* dp, const StopSignals& signals);
  ~ReferencePass();

  // A resumed run (every process calls it): true when the eval pairs have no usable reference in run_dir, so that
  // score_eval_from_start() must run while the model holds the starting weights (before the checkpoint is restored).
  bool eval_needs_start(const std::string& run_dir);
  // Scores the eval pairs with the model as it is now, after checking that it holds the run's starting weights (the
  // fingerprint recorded in the train reference); throws DataError, saying so, when it does not. prepare() writes it.
  void score_eval_from_start();
  // Sets the reference of the train and eval pairs: from run_dir's files, continued or computed (see above). Throws
  // DataError when a resumed run's train reference is missing or belongs to other pairs, InterruptedError on a stop.
  void prepare(const std::string& run_dir, bool resumed, bool writer);

  // The starting weights' fingerprint (starting_weights_key), taken once, when first asked for: prepare() asks for it
  // on a fresh run. Under ZeRO-3 the trainer asks first, while it holds the weights whole.
  uint64_t start_key();

  struct Set;  // one pair set, its file and how the pass groups it (PreferenceReference.cpp)

 private:
  const config::Config& cfg_;
  model::Decoder& model_;
  c10::Device device_;
  distributed::DataParallel* dp_;
  const StopSignals& signals_;
  std::unique_ptr<Set> train_, eval_;
  uint64_t start_ = 0;
  bool start_known_ = false;
  std::vector<double> eval_from_start_;  // score_eval_from_start()'s values, written by prepare()
};

} // namespace shadowgrad::train
