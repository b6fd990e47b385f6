#include "train/Training.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <csignal>
#include <filesystem>
#include <limits>
#include <optional>

#include <spdlog/spdlog.h>

#include "checkpoint/Checkpointer.h"
#include "checkpoint/MetricsTail.h"
#include "config/ConfigWriter.h"
#include "data/DataSource.h"
#include "distributed/DataParallel.h"
#include "distributed/Environment.h"
#include "memory/MemoryMeter.h"
#include "memory/MemoryReport.h"
#include "model/Decoder.h"
#include "train/LossPlot.h"
#include "train/MemoryProbe.h"
#include "train/MetricsWriter.h"
#include "train/NonFiniteGuard.h"
#include "train/Progress.h"
#include "train/RunDirectory.h"
#include "train/Runtime.h"
#include "train/Signals.h"
#include "train/StepProfiler.h"
#include "train/TrainStep.h"
#include "util/Errors.h"

namespace shadowgrad::train {

Training::Training(config::Config cfg)
    : cfg_(std::move(cfg)), device_(resolve_device(cfg_.hardware)), source_(data::make_source(cfg_)) {
  // One GPU per process on a node: LOCAL_RANK picks it, as with torchrun and SLURM.
  if (device_.is_cuda()) device_ = c10::Device(c10::kCUDA, distributed::ProcessEnvironment::from_environment().local_rank);
}

Training::~Training() = default;

namespace {

// Optimizer state held by this process; with shard_optimizer_over_data it is about 1/WORLD_SIZE of the full state.
void log_optimizer_state(TrainStep& step, distributed::DataParallel& dp) {
  const int64_t mine = memory::optimizer_state_bytes(step.optimizer());
  if (!dp.shard_optimizer()) {
    spdlog::info("optimizer state on this process: {} bytes (the full state; every process holds a copy)", mine);
    return;
  }
  const double full = dp.global_sum(double(mine));
  spdlog::info("optimizer state on this process: {} bytes, {:.1f}% of the {} bytes of the full state (ZeRO-1 over {} "
               "processes)",
               mine, full > 0 ? 100.0 * double(mine) / full : 0.0, int64_t(full), dp.world_size());
}

} // namespace

RunSummary Training::run() {
  const int threads = configure_threads(cfg_.num_threads);
  configure_allocator_cache(cfg_.cpu_allocator_cache_mib);
  if (cfg_.dtype == "bfloat16" && device_.is_cpu() && !cpu_has_avx512_bf16())
    spdlog::warn("this CPU lacks avx512_bf16: bf16 matmul will be much slower than fp32; consider dtype=float32");

  memory::MemoryMeter meter(device_);  // before the model, so its set-up counts in the run's peak
  // Several processes (RANK/WORLD_SIZE set): connect first. Only rank 0 writes files; every log line carries
  // the rank.
  const auto env = distributed::ProcessEnvironment::from_environment();
  if (env.distributed()) spdlog::set_pattern(fmt::format("[%Y-%m-%d %H:%M:%S.%e] [rank {}] [%^%l%$] %v", env.rank));
  auto dp = distributed::DataParallel::from_environment(cfg_, device_);
  const int rank = dp ? dp->rank() : 0, world = dp ? dp->world_size() : 1;

  model::Decoder model(model::DecoderOptions::from_config(cfg_));
  model->to(device_);
  TrainStep step(cfg_, model, *source_, device_, dp);

  // Only rank 0 writes files. Without ZeRO-1 every process holds the same weights and the full optimizer state,
  // so rank 0's checkpoint restores them all; ZeRO-1 spreads that state over the processes, which one
  // checkpoint of rank 0's cannot restore yet.
  if (dp && dp->shard_optimizer() && (cfg_.enable_checkpointing || cfg_.resume)) {
    spdlog::warn("checkpoints are not supported with shard_optimizer_over_data=true yet: enable_checkpointing and "
                 "resume are off");
    cfg_.enable_checkpointing = false;
    cfg_.resume = false;
  }
  std::optional<RunDirectory> dir;
  std::optional<checkpoint::Checkpointer> checkpoints;
  std::optional<MetricsWriter> metrics;
  checkpoint::TrainState state;
  checkpoint::MetricsTail earlier{std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::quiet_NaN()};
  if (rank == 0) {
    dir.emplace(RunDirectory::create(cfg_, checkpoint::can_resume(cfg_)));
    checkpoints.emplace(cfg_, dir->path());
    state = checkpoints->restore(*model, step.optimizer());
    earlier = checkpoint::truncate_metrics(dir->file("metrics.jsonl"), state.step);
  }
  if (dp) {
    // The other processes continue from the step rank 0 restored, loading the same checkpoint. The all-reduce
    // is also the barrier: rank 0 has chosen it and finished cleaning up before anyone reads.
    const auto resumed = static_cast<int64_t>(dp->global_sum(rank == 0 ? double(state.step) : 0.0));
    if (rank != 0 && resumed > 0)
      state = checkpoint::Checkpointer(cfg_, checkpoint::run_dir_of(cfg_)).load(resumed, *model, step.optimizer());
    if (resumed > 0) dp->verify_same_start(model->parameters());
  }
  if (state.step > 0 && state.step == cfg_.steps) {
    spdlog::info("run {} is already complete at step {}; nothing to do (raise steps to train further)",
                 dir ? dir->path() : checkpoint::run_dir_of(cfg_), state.step);
    RunSummary done;
    done.run_dir = dir ? dir->path() : "";
    done.steps = state.step;
    done.first_loss = earlier.first_loss;
    done.final_loss = earlier.last_loss;
    return done;
  }
  if (dir) {
    std::error_code ec;
    std::filesystem::remove(dir->file("summary.json"), ec);  // present only if a finished run is being extended
    write_file_atomically(dir->file("config.yml"), config::to_yaml(cfg_));
    metrics.emplace(dir->file("metrics.jsonl"));
  }

  int64_t params = 0;
  for (const auto& p : model->parameters()) params += p.numel();
  spdlog::info("run {} | {} parameters | K={} x {} sequences x {} tokens x {} processes | grad_dtype={} dtype={} | "
               "{} threads",
               dir ? dir->path() : "(written by rank 0)", params, cfg_.gradient_accumulation_steps,
               cfg_.per_device_batch_size, cfg_.max_target_length, world, cfg_.grad_dtype, cfg_.dtype, threads);

  Progress progress(cfg_.steps, cfg_.log_period, rank == 0 && stdout_is_terminal());
  RunSummary summary;
  summary.run_dir = dir ? dir->path() : "";
  summary.first_loss = earlier.first_loss;
  const int64_t earlier_steps = state.step;
  int64_t total_tokens = 0;
  NonFiniteGuard guard(cfg_.max_consecutive_nonfinite, state);
  StopSignals signals;
  StepProfiler profiler(dir ? dir->file("profile.trace.json") : "", state.step + cfg_.skip_first_n_steps_for_profiler,
                        cfg_.profiler == "trace" && dir ? cfg_.profiler_steps : 0);
  for (int64_t s = state.step; s < cfg_.steps; ++s) {
    meter.begin_step();
    profiler.before_step(s);
    StepStats st = step.run(s);
    profiler.after_step(s);
    const int64_t peak = meter.end_step();
    guard.record(st);
    total_tokens += st.tokens;
    summary.seconds += st.seconds;
    if (s == 0) summary.first_loss = st.loss;
    summary.final_loss = st.loss;
    const double tokens_per_s = st.tokens / st.seconds;
    if (s == 0 && dp) log_optimizer_state(step, *dp);
    if (metrics) {
      JsonNumbers numerics;  // only on the steps that measure them (see TrainStep.h)
      if (!std::isnan(st.grad_rel_error)) numerics.push_back({"grad_rel_error", st.grad_rel_error});
      if (!std::isnan(st.underflow_fraction)) numerics.push_back({"fp16_underflow_fraction", st.underflow_fraction});
      metrics->write({{"step", double(s + 1)},
                      {"loss", st.loss},
                      {"grad_norm", st.grad_norm},
                      {"lr", st.lr},
                      {"tokens", double(st.tokens)},
                      {"step_time_s", st.seconds},
                      {"tokens_per_s", tokens_per_s},
                      {"peak_mem_bytes", double(peak)},
                      {"skipped_steps", double(state.skipped_steps)},
                      {"data_s", st.data_s},
                      {"forward_s", st.forward_s},
                      {"backward_s", st.backward_s},
                      {"fold_s", st.fold_s},
                      {"optimizer_s", st.optimizer_s}},
                     numerics);
      const double eta = summary.seconds / double(s + 1 - earlier_steps) * double(cfg_.steps - s - 1);
      progress.update({s + 1, st.loss, st.grad_norm, st.lr, tokens_per_s, eta, peak});
    }
    guard.check(st);
    // Checkpoints fall between optimizer steps, where the shadow tree is zero: nothing is lost.
    state.step = s + 1;
    // With several processes they all stop after the same step when any of them was signalled (the others
    // would otherwise wait in the next all-reduce until the timeout).
    int stop = signals.requested();
    if (dp && dp->global_sum(stop ? 1.0 : 0.0) > 0 && !stop) stop = SIGTERM;
    if (checkpoints && (checkpoints->due(state.step) || (stop && cfg_.enable_checkpointing)))
      checkpoints->save(state, *model, step.optimizer());
    if (stop) {
      progress.finish();
      throw InterruptedError(fmt::format("stopped by {} after step {}{}",
                                         signals.requested() ? signal_name(stop) : "another process's signal",
                                         state.step, cfg_.enable_checkpointing ? "; rerun the same command to resume" : ""),
                             stop);
    }
  }
  progress.finish();
  summary.steps = cfg_.steps;
  summary.avg_tokens_per_s = summary.seconds > 0 ? total_tokens / summary.seconds : 0;
  summary.peak_mem_bytes = meter.run_peak();
  if (!dir) return summary;
  memory::MemoryReport mem = memory_report(step, meter, cfg_.steps);
  write_file_atomically(dir->file("memory_report.json"), memory::to_json(mem));
  std::fputs(memory::format_table(mem).c_str(), stdout);
  write_file_atomically(dir->file("summary.json"),
                        to_json({{"steps", double(summary.steps)},
                                 {"final_loss", summary.final_loss},
                                 {"first_loss", summary.first_loss},
                                 {"avg_tokens_per_s", summary.avg_tokens_per_s},
                                 {"train_seconds", summary.seconds},
                                 {"peak_mem_bytes", double(summary.peak_mem_bytes)}}) + "\n");
  plot_loss_if_possible(dir->path());
  return summary;
}

} // namespace shadowgrad::train
