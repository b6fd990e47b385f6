#pragma once
// What a run starts from, made by every process together before its first step:
//
//   StartPoint start = open_run(cfg, dp.get(), model, step.optimizer(), checkpoint_topology(step));
//   BatchSizePolicy policy(batches, continue_batch(start, step, batches, cfg.per_device_batch_size, world));
#include <limits>
#include <optional>

#include "checkpoint/Checkpointer.h"
#include "checkpoint/MetricsTail.h"
#include "train/BatchSizePolicy.h"
#include "train/RunDirectory.h"
#include "train/RunLock.h"

namespace shadowgrad::config {
struct Config;
}
namespace shadowgrad::distributed {
class DataParallel;
}
namespace shadowgrad::model {
class Decoder;
}

namespace shadowgrad::train {

// Rank 0's lock and run directory, every rank's checkpointer (with ZeRO-1 each rank writes its optimizer shard;
// without, the others' save() does nothing), the step the checkpoint restored, and what the kept part of
// metrics.jsonl says.
struct StartPoint {
  std::optional<RunLock> lock;  // declared first, released last
  std::optional<RunDirectory> dir;
  std::optional<checkpoint::Checkpointer> checkpoints;
  checkpoint::TrainState state;
  checkpoint::MetricsTail earlier{std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::quiet_NaN()};
};

// Rank 0 takes the run directory's lock (before anything looks at an existing directory) and creates or reopens it;
// then every process restores the same checkpoint, resharded to this run's process count and ZeRO-1 slices
// (checkpoint/OptimizerShards.h), or every process gives up with the same error (Checkpointer::restore).
StartPoint open_run(const config::Config& cfg, distributed::DataParallel* dp, model::Decoder& model,
                    torch::optim::Optimizer& optimizer, const checkpoint::Topology& topology);

// The data and global batch a run continues from: a resumed run's checkpoint state, or the start. InputError when
// the checkpoint cannot continue this way.
BatchState continue_batch(const StartPoint& start, TrainStep& step, const BatchPolicyOptions& o, int64_t microbatch,
                          int world);

} // namespace shadowgrad::train
