#pragma once
// Checkpoints of a run: <run_dir>/checkpoints/step-N/ with model.pt, optimizer.pt, rng.pt, config.yml
// and manifest.yml (format version, step, data and LR positions, frozen-key fingerprint, and the size
// and CRC-32 of every file). See docs/reliability.md.
//
//   Checkpointer ckpt(CheckpointOptions::from_config(cfg), run_dir);
//   TrainState state = ckpt.restore(*model, optimizer);   // state.step == 0 when there is nothing to resume
//   ...after optimizer step s (0-based):
//   if (ckpt.due(s + 1)) ckpt.save({s + 1, skipped, in_a_row}, *model, optimizer);
//
// Writes are atomic: everything goes into checkpoints/.tmp-step-N, every file and the directory are
// fsync'ed, and only then is it renamed to step-N. A crash at any point leaves the earlier checkpoints
// complete; a left-over .tmp directory is ignored and removed on the next start.
//
// With several processes every rank makes a Checkpointer with the run's Topology and calls save() and restore()
// together; rank 0 writes everything but, with ZeRO-1, each rank's optimizer shard (see OptimizerShards.h), and
// under ZeRO-3 each rank's model shard instead of model.pt (WeightShards.h).
// A checkpoint loads into another process count as long as the global batch is the same.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "checkpoint/CheckpointOptions.h"
#include "checkpoint/Manifest.h"
#include "checkpoint/OptimizerShards.h"

namespace shadowgrad::config {
struct Config;
}
namespace torch::nn {
class Module;
}
namespace torch::optim {
class Optimizer;
}

namespace shadowgrad::checkpoint {

class Checkpointer {
 public:
  Checkpointer(CheckpointOptions options, std::string run_dir, Topology topology = {});
  const CheckpointOptions& options() const { return options_; }

  // True when enable_checkpointing is on and `completed_steps` is a multiple of checkpoint_period or
  // the last step of the run.
  bool due(int64_t completed_steps) const;

  // Writes step-<state.step> atomically, then deletes the oldest beyond max_num_checkpoints_to_keep.
  // Throws std::runtime_error naming the file and the OS reason (e.g. no space left); the earlier
  // checkpoints are untouched and the temporary directory is removed. Every rank calls it (ranks other than 0
  // write their optimizer shard with ZeRO-1, and return at once without it).
  void save(const TrainState& state, torch::nn::Module& model, torch::optim::Optimizer& optimizer);

  // Loads the checkpoint the config asks for into `model` and `optimizer`, and the RNG state:
  // load_checkpoint_step if set, else the latest loadable one. A corrupt latest checkpoint is reported
  // with a warning naming the file and the previous one is used; with load_checkpoint_step, or when no
  // checkpoint is loadable, it throws CorruptCheckpointError. Corrupt covers a file that passes its CRC and still
  // cannot be read (a crafted or re-signed checkpoint): LibTorch's errors on it never escape as they are. A frozen
  // key (model shape, vocab, ...) that differs throws InputError naming the key. Returns a zero state when there is
  // none or resume=false.
  //
  // Collective with several processes: every rank calls it, tries the same checkpoints (rank 0's list, after its
  // clean-up) and reads what it needs of each; then all agree on a verdict (checkpoint/Agreement.h) before any
  // loads, falls back or throws. So every rank loads the same step, or every rank throws the same kind of error:
  // the rank that found the problem its own, the others "rank R found: <its message>".
  TrainState restore(torch::nn::Module& model, torch::optim::Optimizer& optimizer);
  // Loads checkpoint step-<step> exactly, with no clean-up and no fallback. Collective and throwing as restore().
  TrainState load(int64_t step, torch::nn::Module& model, torch::optim::Optimizer& optimizer);

  // Keeps checkpoint step-<step> out of the rotation (keep_best_checkpoint: the best eval_loss); -1 protects none.
  void protect(int64_t step) { protected_step_ = step; }

  // Steps of the step-N directories, ascending (complete or not; restore() verifies).
  std::vector<int64_t> steps() const;
  std::string step_dir(int64_t step) const;
  const std::string& dir() const { return dir_; }

  // Testing only: called at each stage of save() ("model.pt", "manifest.yml", "before-rename", ...);
  // a hook that throws simulates a crash at that point. Pass nullptr to clear.
  static void set_fault_hook(std::function<void(const std::string& stage)> hook);

 private:
  void remove_leftovers() const;
  void prune() const;

  CheckpointOptions options_;
  std::string dir_;  // <run_dir>/checkpoints
  Topology topology_;
  int64_t protected_step_ = -1;
};

// True when the run directory named by the config holds at least one step-N checkpoint and resume is on.
bool can_resume(const config::Config& cfg);
// base_output_directory/run_name: where a run with an explicit run_name lives.
std::string run_dir_of(const config::Config& cfg);

} // namespace shadowgrad::checkpoint
