#pragma once
// manifest.yml: what a checkpoint directory holds and how to check it. Written last inside the
// temporary directory; its final line is the CRC-32 of everything above it, so a damaged manifest is
// caught as surely as a damaged tensor file.
//
//   Manifest m;  m.state.step = 5;  m.files.push_back({"model.pt", bytes.size(), crc32_hex(crc32(...))});
//   write_durably(dir + "/manifest.yml", m.to_text());
//   Manifest back = Manifest::parse(read_whole_file(dir + "/manifest.yml"), dir + "/manifest.yml");
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "util/Errors.h"
#include "util/Printable.h"

namespace shadowgrad::checkpoint {

// Bumped whenever the layout or meaning of a checkpoint changes; newer formats are refused. Version 2 adds the
// batch layout and ZeRO-1 optimizer shards; version 3 numbers examples by cumulative sequence (data_order) and keeps
// the batch-size policy's state; version 4 adds ZeRO-3's model shards (model_shards), and only a checkpoint that has
// them is written as version 4, so that an older trainer still reads every other one. Older manifests still load
// (version 1-2: data_order steps).
inline constexpr int64_t kFormatVersion = 4;
inline constexpr int64_t kModelShardsVersion = 4;

// Everything besides tensors that the training loop carries from one step to the next.
struct TrainState {
  int64_t step = 0;                   // optimizer steps completed == 0-based index of the next step
  int64_t skipped_steps = 0;          // steps skipped so far for a non-finite loss or gradient norm
  int64_t consecutive_nonfinite = 0;  // of which at the end, in a row
  // gradient_noise_scale's EMAs (train/NoiseScale.h), stored bit for bit; absent from older checkpoints (zeros:
  // the EMAs restart).
  double gns_ema_grad_sq = 0, gns_ema_trace = 0;
  int64_t gns_updates = 0;
  // Where the data stands (data/ExampleOrder.h) and the batch-size policy's state (train/BatchSizePolicy.h).
  // step_order: a checkpoint before format 3, whose run read example i of step s as key (s, i): a resumed run keeps
  // reading that way, and refuses a batch that changes.
  bool step_order = false;
  int64_t sequences = 0;               // training sequences so far (sequence order)
  int64_t global_batch = 0;            // of the next step; 0: not recorded
  int64_t batch_last_change_step = 0;  // 0-based step that first used it
};

struct FileEntry {
  std::string name;
  int64_t bytes = 0;
  std::string crc32;  // 8 hex digits
};

struct Manifest {
  int64_t format_version = 3;  // what to_text() writes: kModelShardsVersion when model_shards > 0
  TrainState state;
  // The next step's position in each stream. The data is a pure function of (seed, example index), examples
  // numbered by cumulative sequence (data_order: sequences), so data_position is state.sequences; with data_order
  // steps (before format 3) it is state.step. The LR schedule's position is state.step.
  int64_t data_position = 0;
  int64_t lr_schedule_position = 0;
  int64_t optimizer_updates = 0;  // updates actually applied: step - skipped_steps
  std::string config_fingerprint;                            // FNV-1a 64 of the frozen keys
  std::vector<std::pair<std::string, std::string>> frozen;  // key -> value that must match on resume
  std::vector<FileEntry> files;
  // How the run that wrote it was laid out (-1: not recorded, a version-1 checkpoint). The data of step s is the
  // global batch of (seed, s), so only global_batch = per_device_batch_size x gradient_accumulation_steps x
  // world_size must match on resume; the process count and K may change.
  int64_t global_batch = -1, per_device_batch_size = -1, gradient_accumulation_steps = -1, world_size = -1;
  // ZeRO-1: the optimizer state is in this many optimizer-shard-R-of-N.pt files instead of optimizer.pt (0).
  int64_t optimizer_shards = 0;
  // ZeRO-3: the weights are in this many model-shard-R-of-N.pt files instead of model.pt (0).
  int64_t model_shards = 0;

  std::string to_text() const;
  // Throws CorruptCheckpointError naming `path` when the checksum line, the YAML or a field is wrong, or when a file
  // it lists is not a plain name in the checkpoint's directory (e.g. "../x").
  static Manifest parse(const std::string& text, const std::string& path);
};

// A checkpoint file that is missing, truncated, fails its checksum, or passes it and still cannot be read (a crafted
// or re-signed file). Names the file and what was wrong. The message may quote the file (LibTorch's reason, a
// manifest's key): it is kept printable (util/Printable.h), so no raw byte of a file reaches the terminal.
class CorruptCheckpointError : public InputError {
 public:
  explicit CorruptCheckpointError(const std::string& what) : InputError(util::printable(what)) {}
};

} // namespace shadowgrad::checkpoint
