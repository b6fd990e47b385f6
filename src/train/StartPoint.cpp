#include "train/StartPoint.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "config/Config.h"
#include "config/ConfigWriter.h"
#include "distributed/DataParallel.h"
#include "model/Decoder.h"
#include "train/CheckpointTopology.h"
#include "util/Errors.h"

namespace shadowgrad::train {

StartPoint open_run(const config::Config& cfg, distributed::DataParallel* dp, model::Decoder& model,
                    torch::optim::Optimizer& optimizer, const checkpoint::Topology& topology) {
  StartPoint start;
  const int rank = dp ? dp->rank() : 0;
  if (rank == 0) {
    if (!cfg.run_name.empty()) start.lock = RunLock::acquire_if_present(checkpoint::run_dir_of(cfg));
    start.dir.emplace(RunDirectory::create(cfg, checkpoint::can_resume(cfg), config::to_yaml(cfg)));
    if (start.dir->restarted())
      spdlog::info("run {} was stopped before its first checkpoint; its config.yml is this command's: starting it "
                   "again from step 0",
                   start.dir->path());
    if (!start.lock) start.lock.emplace(RunLock::acquire(start.dir->path()));
  }
  const std::string run_dir = shared_run_dir(topology, start.dir ? start.dir->path() : "");
  start.checkpoints.emplace(checkpoint::CheckpointOptions::from_config(cfg), run_dir, topology);
  start.state = start.checkpoints->restore(*model, optimizer);
  if (rank == 0) start.earlier = checkpoint::truncate_metrics(start.dir->file("metrics.jsonl"), start.state.step);
  // ZeRO-3 of a full fine-tune: each process read its own range of the weights, so there is nothing whole to compare.
  if (dp && start.state.step > 0 && topology.weight_pieces.empty()) dp->verify_same_start(model->parameters());
  return start;
}

BatchState continue_batch(const StartPoint& start, TrainStep& step, const BatchPolicyOptions& o, int64_t microbatch,
                          int world) {
  const checkpoint::TrainState& s = start.state;
  if (s.step == 0) return {};
  const std::string dir = start.checkpoints ? start.checkpoints->step_dir(s.step) : fmt::format("step-{}", s.step);
  if (s.step_order) {  // written before data_order (checkpoint format 3)
    if (o.changes())
      throw InputError(fmt::format(
          "checkpoint '{}' predates batch-size schedules: its run read example i of step s as (step, index), not by "
          "cumulative sequence, and a batch that changes (batch_size_schedule, batch_size_policy=gns) would go on "
          "with other data than it was trained on; resume it with its fixed global batch, or start a new run_name",
          dir));
    step.set_example_order(data::ExampleOrder::steps);
    spdlog::info("checkpoint {} predates data_order: its examples stay numbered by (step, index), as it was trained",
                 dir);
    return {o.start_batch, s.step * o.start_batch, 0};
  }
  if (!o.changes()) return {o.start_batch, s.sequences, 0};
  BatchState b{s.global_batch > 0 ? s.global_batch : o.start_batch, s.sequences, s.batch_last_change_step};
  if (b.global_batch % (microbatch * world) != 0)
    throw InputError(fmt::format("checkpoint '{}' continues at a global batch of {} sequences, which does not split "
                                 "into per_device_batch_size={} x WORLD_SIZE={}; pick a per_device_batch_size or "
                                 "process count that divides it",
                                 dir, b.global_batch, microbatch, world));
  spdlog::info("the global batch continues at {} sequences after {} sequences trained (last changed at step {})",
               b.global_batch, b.sequences, b.last_change_step);
  return b;
}

} // namespace shadowgrad::train
