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
#include "config/GlobalBatch.h"
#include "data/DataSource.h"
#include "distributed/DataParallel.h"
#include "distributed/Environment.h"
#include "memory/MemoryMeter.h"
#include "memory/MemoryReport.h"
#include "model/Decoder.h"
#include "train/BatchSizePolicy.h"
#include "train/Evaluator.h"
#include "train/CheckpointTopology.h"
#include "train/LossPlot.h"
#include "train/MemoryProbe.h"
#include "train/MetricsWriter.h"
#include "train/MicrobatchFit.h"
#include "train/NonFiniteGuard.h"
#include "train/Progress.h"
#include "train/RunDirectory.h"
#include "train/RunLock.h"
#include "train/Runtime.h"
#include "train/Signals.h"
#include "train/StepMetrics.h"
#include "train/StepProfiler.h"
#include "train/TrainStep.h"
#include "util/Errors.h"

namespace shadowgrad::train {

Training::Training(config::Config cfg)
    : cfg_(std::move(cfg)),
      // What this build cannot run is refused before the device is looked for (exit 2 either way).
      device_((require_device_support(cfg_.grad_accum_rounding, cfg_.adam_state_dtype, cfg_.hardware),
               resolve_device(cfg_.hardware))),
      source_(data::make_source(data::DataOptions::from_config(cfg_))),
      // With per_device_batch_size=auto the eval batch may follow the microbatch: built in run(), once it is known.
      evaluator_(cfg_.per_device_batch_size == config::kAuto
                     ? nullptr
                     : std::make_unique<Evaluator>(cfg_, distributed::ProcessEnvironment::from_environment().world_size)) {
  // One GPU per process on a node: LOCAL_RANK picks it, as with torchrun and SLURM.
  if (device_.is_cuda()) device_ = c10::Device(c10::kCUDA, distributed::ProcessEnvironment::from_environment().local_rank);
}

Training::~Training() = default;

namespace {

// What a run starts from: rank 0's lock and run directory, every rank's checkpointer (with ZeRO-1 each rank writes
// its optimizer shard; without, the others' save() does nothing), the step the checkpoint restored, and what the
// kept part of metrics.jsonl says.
struct StartPoint {
  std::optional<RunLock> lock;  // declared first, released last
  std::optional<RunDirectory> dir;
  std::optional<checkpoint::Checkpointer> checkpoints;
  checkpoint::TrainState state;
  checkpoint::MetricsTail earlier{std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::quiet_NaN()};
};

// Several processes (RANK/WORLD_SIZE set): connect first; every log line then carries the rank. Null for one.
std::shared_ptr<distributed::DataParallel> connect(const config::Config& cfg, c10::Device device) {
  const auto env = distributed::ProcessEnvironment::from_environment();
  if (env.distributed()) spdlog::set_pattern(fmt::format("[%Y-%m-%d %H:%M:%S.%e] [rank {}] [%^%l%$] %v", env.rank));
  return distributed::DataParallel::from_environment(distributed::DataParallelOptions::from_config(cfg), device);
}

// Rank 0 takes the run directory's lock (before anything looks at an existing directory) and creates or reopens it;
// then every process restores the same checkpoint, resharded to this run's process count and ZeRO-1 slices
// (checkpoint/OptimizerShards.h), or every process gives up with the same error (Checkpointer::restore).
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
  if (dp && start.state.step > 0) dp->verify_same_start(model->parameters());
  return start;
}

// The stop every process acts on, at the same point: this one's signal, else SIGTERM when another process got one
// (the others would otherwise wait in the next all-reduce until the timeout). 0: carry on.
int agreed_stop(const StopSignals& signals, distributed::DataParallel* dp) {
  int stop = signals.requested();
  if (dp && dp->global_sum(stop ? 1.0 : 0.0) > 0 && !stop) stop = SIGTERM;
  return stop;
}

std::string stopped_by(const StopSignals& signals, int stop) {
  return signals.requested() ? signal_name(stop) : "another process's signal";
}

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

// summary.json, memory_report.json (also printed) and loss.png: the files a finished run leaves behind.
void write_end_of_run_files(const RunDirectory& dir, const RunSummary& summary, const memory::MemoryReport& mem) {
  write_file_atomically(dir.file("memory_report.json"), memory::to_json(mem));
  std::fputs(memory::format_table(mem).c_str(), stdout);
  JsonNumbers fields{{"steps", double(summary.steps)},
                     {"final_loss", summary.final_loss},
                     {"first_loss", summary.first_loss},
                     {"avg_tokens_per_s", summary.avg_tokens_per_s},
                     {"train_seconds", summary.seconds},
                     {"peak_mem_bytes", double(summary.peak_mem_bytes)},
                     {"eval_loss", summary.eval_loss}};  // null when no evaluation ran
  if (!std::isnan(summary.gns_tokens)) fields.push_back({"gns_tokens", summary.gns_tokens});
  write_file_atomically(dir.file("summary.json"), to_json(fields) + "\n");
  plot_loss_if_possible(dir.path());
}

// A run whose last step is checkpointed but which stopped before its end-of-run files (a signal during the last
// step): finish it from what is on disk, metrics.jsonl and the checkpoint, without training.
RunSummary finish_from_disk(const StartPoint& start, TrainStep& step, const memory::MemoryMeter& meter) {
  RunSummary summary;
  summary.run_dir = start.dir ? start.dir->path() : "";
  summary.steps = start.state.step;
  summary.first_loss = start.earlier.first_loss;
  summary.final_loss = start.earlier.last_loss;
  summary.seconds = start.earlier.seconds;
  summary.avg_tokens_per_s = start.earlier.seconds > 0 ? start.earlier.tokens / start.earlier.seconds : 0;
  // The training steps' peaks are in metrics.jsonl; this process's own peak covers loading the checkpoint.
  summary.peak_mem_bytes = std::max(int64_t(start.earlier.peak_mem_bytes), meter.run_peak());
  summary.eval_loss = start.earlier.eval_loss;
  if (!start.dir) return summary;
  const bool finalised = std::filesystem::exists(start.dir->file("summary.json"));
  spdlog::info("run {} is already complete at step {}{}", start.dir->path(), start.state.step,
               finalised ? "; nothing to do (raise steps to train further)"
                         : "; writing its summary from metrics.jsonl and the checkpoint");
  if (finalised) return summary;
  memory::MemoryReport mem = memory_report(step, meter, start.earlier.steps);
  mem.peak_bytes = summary.peak_mem_bytes;
  mem.peak_step_bytes = int64_t(start.earlier.peak_mem_bytes);
  mem.source += " (step peaks read back from metrics.jsonl)";
  write_end_of_run_files(*start.dir, summary, mem);
  return summary;
}

// Threads, the allocator cache, and a warning when bf16 compute would be slow here. Returns the thread count.
int configure_process(const config::Config& cfg, c10::Device device) {
  const int threads = configure_threads(cfg.num_threads);
  configure_allocator_cache(cfg.cpu_allocator_cache_mib);
  if (cfg.dtype == config::FloatDtype::bfloat16 && device.is_cpu() && !cpu_has_avx512_bf16())
    spdlog::warn("this CPU lacks avx512_bf16: bf16 matmul will be much slower than fp32; consider dtype=float32");
  return threads;
}

// The data and global batch a run continues from: a resumed run's checkpoint state, or the start. InputError when
// the checkpoint cannot continue this way.
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

// The run's one-line description: where it writes, its size and its global batch.
void log_run_start(const config::Config& cfg, const StartPoint& start, TrainStep& step, int world, int threads) {
  int64_t params = 0;
  for (const auto& p : step.model()->parameters()) params += p.numel();
  spdlog::info("run {} | {} parameters | K={} x {} sequences x {} tokens x {} processes = global batch {}{} | "
               "grad_dtype={} dtype={} | {} threads",
               start.dir ? start.dir->path() : "(written by rank 0)", params, cfg.gradient_accumulation_steps,
               cfg.per_device_batch_size, cfg.max_target_length, world, config::global_batch(cfg, world),
               cfg.global_batch_size > 0 ? " (global_batch_size; K derived)" : "", cfg.grad_dtype, cfg.dtype,
               threads);
  if (!cfg.batch_size_schedule.empty())
    spdlog::info("batch_size_schedule {}: K is derived at every step; the LR is scaled by batch_size_lr_scaling={}",
                 cfg.batch_size_schedule, cfg.batch_size_lr_scaling);
  if (cfg.batch_size_policy == config::BatchSizePolicy::gns)
    spdlog::info("batch_size_policy=gns: doubles the global batch once gns_tokens > {} x its tokens, at most once in {} "
                 "steps, up to {} sequences; LR scaled by batch_size_lr_scaling={}",
                 cfg.gns_batch_margin, cfg.gns_min_steps_between_changes,
                 cfg.global_batch_size_max > 0 ? cfg.global_batch_size_max : int64_t(1) << 20,
                 cfg.batch_size_lr_scaling);
}

// One change of the global batch, with its reason and the LR factor it brings.
void log_batch_change(const BatchChange& c, const BatchSizePolicy& policy, int64_t microbatch, int world) {
  spdlog::info("global batch {} -> {} sequences from step {} (K={}): {}; LR x {:.4g} of the scheduled value", c.from,
               c.to, c.step + 1, c.to / (microbatch * world), c.reason, policy.lr_factor(c.to));
}

// A signal during start-up (model, checkpoint) stops the run before its first step.
void stop_if_signalled_during_start_up(const StopSignals& signals, distributed::DataParallel* dp,
                                       const checkpoint::TrainState& state) {
  if (const int stop = agreed_stop(signals, dp))
    throw InterruptedError(fmt::format("stopped by {} before step {}; rerun the same command to {}",
                                       stopped_by(signals, stop), state.step + 1,
                                       state.step > 0 ? "resume" : "start it again"),
                           stop);
}

// The steps from the start point to the last one. Each step is followed, in this order, by its evaluation (when
// due), its metrics.jsonl and console lines, the non-finite check, and, between steps, a checkpoint when one is due
// or the run is stopping.
class StepLoop {
 public:
  // A resumed run continues the noise scale's EMAs bit for bit. Rank 0 (the one with the run directory) opens
  // metrics.jsonl and writes this run's config.yml.
  StepLoop(const config::Config& cfg, TrainStep& step, Evaluator& evaluator, memory::MemoryMeter& meter,
           const StopSignals& signals, StartPoint& start, c10::Device device, BatchSizePolicy& policy)
      : cfg_(cfg), step_(step), evaluator_(evaluator), meter_(meter), signals_(signals), start_(start),
        device_(device), policy_(policy), progress_(cfg.steps, cfg.log_period, start.dir.has_value() && stdout_is_terminal()),
        guard_(cfg.max_consecutive_nonfinite, start.state), earlier_steps_(start.state.step) {
    if (NoiseScale* gns = step.noise_scale())
      gns->set_state({start.state.gns_ema_grad_sq, start.state.gns_ema_trace, start.state.gns_updates});
    if (start.dir) {
      std::error_code ec;
      std::filesystem::remove(start.dir->file("summary.json"), ec);  // present only if a finished run is extended
      write_file_atomically(start.dir->file("config.yml"), config::to_yaml(cfg));
      metrics_.emplace(start.dir->file("metrics.jsonl"));
    }
    summary_.run_dir = start.dir ? start.dir->path() : "";
    summary_.first_loss = start.earlier.first_loss;
    summary_.eval_loss = start.earlier.eval_loss;  // a resumed run without a later evaluation keeps the last one
  }

  RunSummary run() {
    const checkpoint::TrainState& state = start_.state;
    StepProfiler profiler(start_.dir ? start_.dir->file("profile.trace.json") : "",
                          state.step + cfg_.skip_first_n_steps_for_profiler,
                          cfg_.profiler == config::Profiler::trace && start_.dir ? cfg_.profiler_steps : 0);
    for (int64_t s = state.step; s < cfg_.steps; ++s) {
      if (const auto change = policy_.before_step(s)) log_change(*change);
      const StepBatch batch = policy_.step_batch();
      meter_.begin_step();
      profiler.before_step(s);
      const StepStats st = step_.run(s, batch);
      profiler.after_step(s);
      const int64_t peak = meter_.end_step();
      record(s, st);
      decide_next_batch(s, st);
      const bool evaluated = evaluator_.due(s + 1, batch.first_sequence, policy_.state().sequences);
      const auto eval_start = std::chrono::steady_clock::now();
      if (evaluated) summary_.eval_loss = evaluator_.run(step_.model(), device_, step_.data_parallel());
      const double eval_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - eval_start).count();
      if (st.noise) summary_.gns_tokens = st.noise->gns_tokens;
      if (metrics_) report(s, st, peak, evaluated, eval_s);
      guard_.check(st);
      checkpoint_or_stop(s);
    }
    progress_.finish();
    summary_.steps = cfg_.steps;
    summary_.avg_tokens_per_s = summary_.seconds > 0 ? total_tokens_ / summary_.seconds : 0;
    summary_.peak_mem_bytes = meter_.run_peak();
    return summary_;
  }

 private:
  // The step's loss, tokens and time in the run's totals.
  void record(int64_t s, const StepStats& st) {
    guard_.record(st);
    total_tokens_ += st.tokens;
    summary_.seconds += st.seconds;
    if (s == 0) summary_.first_loss = st.loss;
    summary_.final_loss = st.loss;
    if (s == 0 && step_.data_parallel()) log_optimizer_state(step_, *step_.data_parallel());
  }

  // After the step: batch_size_policy=gns decides the next step's batch (rank 0's decision, taken by every process).
  void decide_next_batch(int64_t s, const StepStats& st) {
    GnsReading reading;
    const bool estimate = st.noise && !st.skipped && std::isfinite(st.noise->gns_tokens);
    if (estimate) reading = {st.noise->gns_tokens, step_.noise_scale()->state().updates};
    BatchSizePolicy::Agree agree;
    if (auto* dp = step_.data_parallel(); dp && policy_.options().gns)
      agree = [dp](int64_t mine) { return int64_t(dp->global_sum(dp->rank() == 0 ? double(mine) : 0.0)); };
    if (const auto change = policy_.after_step(s, estimate ? &reading : nullptr, agree)) log_change(*change);
  }

  void log_change(const BatchChange& c) {
    log_batch_change(c, policy_, cfg_.per_device_batch_size, step_.data_parallel() ? step_.data_parallel()->world_size() : 1);
  }

  // metrics.jsonl's line for the step (with eval_loss when it evaluated) and the console's.
  void report(int64_t s, const StepStats& st, int64_t peak, bool evaluated, double eval_s) {
    JsonNumbers fields = step_metrics(st, peak, start_.state.skipped_steps);
    // tokens_seen: training positions so far (sequences x max_target_length), what batch_size_schedule counts.
    fields.push_back({"tokens_seen", double(policy_.state().sequences * cfg_.max_target_length)});
    if (evaluated) fields.insert(fields.end(), {{"eval_loss", summary_.eval_loss}, {"eval_s", eval_s}});
    metrics_->write(fields);
    const double eta = summary_.seconds / double(s + 1 - earlier_steps_) * double(cfg_.steps - s - 1);
    const double shown_eval = std::isnan(summary_.eval_loss) ? -1 : summary_.eval_loss;
    progress_.update({s + 1, st.loss, st.grad_norm, st.lr, st.tokens / st.seconds, eta, peak, shown_eval,
                      st.noise ? st.noise->gns_tokens : -1.0, st.global_batch});
  }

  // After step s: the state a checkpoint records; a checkpoint when one is due or every process is stopping (they
  // fall between optimizer steps, where the shadow tree is zero: nothing is lost); then the stop, if any.
  void checkpoint_or_stop(int64_t s) {
    checkpoint::TrainState& state = start_.state;
    state.step = s + 1;
    if (const NoiseScale* gns = step_.noise_scale()) {
      state.gns_ema_grad_sq = gns->state().ema_grad_sq;
      state.gns_ema_trace = gns->state().ema_trace;
      state.gns_updates = gns->state().updates;
    }
    state.step_order = step_.example_order() == data::ExampleOrder::steps;
    state.sequences = policy_.state().sequences;
    state.global_batch = policy_.state().global_batch;
    state.batch_last_change_step = policy_.state().last_change_step;
    const int stop = agreed_stop(signals_, step_.data_parallel());
    if (start_.checkpoints && (start_.checkpoints->due(state.step) || (stop && cfg_.enable_checkpointing)))
      start_.checkpoints->save(state, *step_.model(), step_.optimizer());
    if (!stop) return;
    progress_.finish();
    throw InterruptedError(fmt::format("stopped by {} after step {}; rerun the same command to {}",
                                       stopped_by(signals_, stop), state.step,
                                       cfg_.enable_checkpointing ? "resume" : "start it again (no checkpoint)"),
                           stop);
  }

  const config::Config& cfg_;
  TrainStep& step_;
  Evaluator& evaluator_;
  memory::MemoryMeter& meter_;
  const StopSignals& signals_;
  StartPoint& start_;
  c10::Device device_;
  BatchSizePolicy& policy_;
  std::optional<MetricsWriter> metrics_;  // rank 0 only
  Progress progress_;
  NonFiniteGuard guard_;
  RunSummary summary_;
  const int64_t earlier_steps_;  // steps done before this process started (resumed from the checkpoint)
  int64_t total_tokens_ = 0;
};

} // namespace

RunSummary Training::run() {
  StopSignals signals;  // first: a signal while the model is built and the checkpoint loaded stops before step 1
  const int threads = configure_process(cfg_, device_);
  memory::MemoryMeter meter(device_);  // before the model, so its set-up counts in the run's peak
  auto dp = connect(cfg_, device_);
  const int world = dp ? dp->world_size() : 1;
  model::Decoder model(model::DecoderOptions::from_config(cfg_));
  model->to(device_);
  fit_microbatch(cfg_, model, *source_, device_, dp.get(), world);  // per_device_batch_size=auto, memory_budget_mib
  if (!evaluator_) evaluator_ = std::make_unique<Evaluator>(cfg_, world);
  const BatchPolicyOptions batches = BatchPolicyOptions::from_config(cfg_, world);
  StepOptions options = StepOptions::from_config(cfg_);
  if (batches.changes()) options.max_accumulation_steps = batches.largest_batch() / (cfg_.per_device_batch_size * world);
  TrainStep step(options, model, *source_, device_, dp);

  StartPoint start = open_run(cfg_, dp.get(), model, step.optimizer(), checkpoint_topology(step));
  if (start.state.step > 0 && start.state.step == cfg_.steps) return finish_from_disk(start, step, meter);
  BatchSizePolicy policy(batches, continue_batch(start, step, batches, cfg_.per_device_batch_size, world));
  StepLoop loop(cfg_, step, *evaluator_, meter, signals, start, device_, policy);  // opens metrics.jsonl, config.yml
  log_run_start(cfg_, start, step, world, threads);
  stop_if_signalled_during_start_up(signals, dp.get(), start.state);
  RunSummary summary = loop.run();
  if (start.dir) write_end_of_run_files(*start.dir, summary, memory_report(step, meter, cfg_.steps));
  return summary;
}

} // namespace shadowgrad::train
