#pragma once
// The checkpoint::Topology of a training run: its rank and process count, this process's ZeRO-1 slice, and the
// collectives a sharded checkpoint needs (see checkpoint/OptimizerShards.h).
//
//   auto topology = checkpoint_topology(step);
//   std::string dir = shared_run_dir(topology, rank == 0 ? my_dir : "");   // collective: rank 0's dir on every rank
//   checkpoint::Checkpointer checkpoints(checkpoint::CheckpointOptions::from_config(cfg), dir, topology);
#include <string>

#include "checkpoint/OptimizerShards.h"

namespace shadowgrad::train {

class TrainStep;

// `step` must outlive the topology (its collectives go through step's DataParallel). A checkpoint's whole optimizer
// is built with step's optimizer options.
checkpoint::Topology checkpoint_topology(TrainStep& step);
// Rank 0's `rank0_dir` on every rank: a generated run_name (run-<date>-<time>) may differ between processes.
// Collective when there are several processes.
std::string shared_run_dir(const checkpoint::Topology& topology, const std::string& rank0_dir);

} // namespace shadowgrad::train
