#pragma once
// How a run splits its global batch, recorded in every manifest, and the one rule for resuming with another split:
// global batch = per_device_batch_size x gradient_accumulation_steps x WORLD_SIZE must not change (the data of
// step s is the global batch of (seed, s)); the process count, K and shard_optimizer_over_data may.
//
//   record_layout(manifest, layout, topology);                         // in save()
//   check_global_batch(manifest, layout, topology.world_size, dir);    // before a load: InputError on a mismatch
#include <string>

#include "checkpoint/CheckpointOptions.h"
#include "checkpoint/Manifest.h"
#include "checkpoint/OptimizerShards.h"

namespace shadowgrad::checkpoint {

void record_layout(Manifest& manifest, const BatchLayout& layout, const Topology& topology);
// Throws InputError naming the three keys and both products when the checkpoint's global batch differs.
// Checkpoints that predate the record (format version 1) pass.
void check_global_batch(const Manifest& manifest, const BatchLayout& layout, int world_size, const std::string& dir);
// One info line when the process count, K or the optimizer sharding differs from the checkpoint's.
void log_new_layout(const Manifest& manifest, const BatchLayout& layout, const Topology& topology);

} // namespace shadowgrad::checkpoint
