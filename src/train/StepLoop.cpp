#include "train/StepLoop.h"

#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <optional>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "config/ConfigWriter.h"
#include "distributed/DataParallel.h"
#include "memory/MemoryMeter.h"
#include "memory/MemoryReport.h"
#include "train/BatchSizePolicy.h"
#include "train/Evaluator.h"
#include "train/EvalTrend.h"
#include "train/MetricsWriter.h"
#include "train/TensorBoardWriter.h"
#include "train/NonFiniteGuard.h"
#include "train/Progress.h"
#include "train/Signals.h"
#include "train/StartPoint.h"
#include "train/StepMetrics.h"
#include "train/StepProfiler.h"
#include "train/TrainStep.h"
#include "util/Errors.h"
#include "util/File.h"

namespace shadowgrad::train {
namespace {

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

// One change of the global batch, with its reason and the LR factor it brings.
void log_batch_change(const BatchChange& c, const BatchSizePolicy& policy, int64_t microbatch, int world) {
  spdlog::info("global batch {} -> {} sequences from step {} (K={}): {}; LR x {:.4g} of the scheduled value", c.from,
               c.to, c.step + 1, c.to / (microbatch * world), c.reason, policy.lr_factor(c.to));
}

class StepLoop {
 public:
  // A resumed run continues the noise scale's EMAs bit for bit. Rank 0 (the one with the run directory) opens
  // metrics.jsonl and writes this run's config.yml.
  StepLoop(const config::Config& cfg, TrainStep& step, Evaluator& evaluator, memory::MemoryMeter& meter,
           const StopSignals& signals, StartPoint& start, c10::Device device, BatchSizePolicy& policy)
      : cfg_(cfg), step_(step), evaluator_(evaluator), meter_(meter), signals_(signals), start_(start),
        device_(device), policy_(policy), progress_(cfg.steps, cfg.log_period, start.dir.has_value() && stdout_is_terminal()),
        guard_(cfg.max_consecutive_nonfinite, start.state), trend_(cfg.early_warning_evals, start.earlier.evaluations),
        earlier_steps_(start.state.step) {
    if (NoiseScale* gns = step.noise_scale())
      gns->set_state({start.state.gns_ema_grad_sq, start.state.gns_ema_trace, start.state.gns_updates});
    if (start.dir) {
      std::error_code ec;
      std::filesystem::remove(start.dir->file("summary.json"), ec);  // present only if a finished run is extended
      write_file_atomically(start.dir->file("config.yml"), config::to_yaml(cfg));
      metrics_.emplace(start.dir->file("metrics.jsonl"));
      if (cfg.enable_tensorboard) tensorboard_.emplace(start.dir->file("tensorboard"), start.state.step + 1);
      if (cfg.keep_best_checkpoint && start.checkpoints) start.checkpoints->protect(trend_.best_step());  // resumed
      evaluator.samples().open(start.dir->file("samples.jsonl"), start.dir->file("hf"));
    }
    summary_.run_dir = start.dir ? start.dir->path() : "";
    summary_.steps = start.state.step;
    summary_.first_loss = start.earlier.first_loss;
    summary_.eval_loss = start.earlier.eval_loss;  // a resumed run without a later evaluation keeps the last one
  }

  RunSummary run() {
    stop_if_signalled_during_start_up();
    if (cfg_.eval_on_start && start_.state.step == 0 && evaluator_.enabled()) evaluate_on_start();
    const checkpoint::TrainState& state = start_.state;
    StepProfiler profiler(start_.dir ? start_.dir->file("profile.trace.json") : "",
                          state.step + cfg_.skip_first_n_steps_for_profiler,
                          cfg_.profiler == config::Profiler::trace && start_.dir ? cfg_.profiler_steps : 0);
    for (int64_t s = state.step; s < cfg_.steps; ++s) {
      hold_for_test(fmt::format("step-{}", s + 1));  // tests only (SHADOWGRAD_TEST_HOLD): a signal's known point
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
      const double samples_s = evaluated ? evaluator_.samples().write(s + 1, step_.model()) : 0;  // rank 0; 0 where none
      if (st.noise) summary_.gns_tokens = st.noise->gns_tokens;
      if (metrics_) report(s, st, peak, evaluated, eval_s, samples_s);
      guard_.check(st);
      const bool budget_spent = budget_ > 0 && policy_.state().sequences >= budget_;
      if (evaluated && metrics_) watch_eval_loss(s);
      checkpoint_or_stop(s, budget_spent, evaluated && cfg_.keep_best_checkpoint);
      summary_.steps = s + 1;
      if (budget_spent) break;
    }
    progress_.finish();
    summary_.avg_tokens_per_s = summary_.seconds > 0 ? total_tokens_ / summary_.seconds : 0;
    summary_.peak_mem_bytes = meter_.run_peak();
    return summary_;
  }

 private:
  // A signal during start-up (model, checkpoint) stops the run before its first step.
  void stop_if_signalled_during_start_up() {
    if (const int stop = agreed_stop(signals_, step_.data_parallel()))
      throw InterruptedError(fmt::format("stopped by {} before step {}; rerun the same command to {}",
                                         stopped_by(signals_, stop), start_.state.step + 1,
                                         start_.state.step > 0 ? "resume" : "start it again"),
                             stop);
  }

  // eval_on_start (HF's): the evaluation before step 1, metrics.jsonl's line for step 0. Under use_dpo the policy is
  // the reference there, scored in the same batches: every eval reward is exactly 0.
  void evaluate_on_start() {
    const auto began = std::chrono::steady_clock::now();
    summary_.eval_loss = evaluator_.run(step_.model(), device_, step_.data_parallel());
    const double eval_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    const double samples_s = evaluator_.samples().write(0, step_.model());
    spdlog::info("step 0 (eval_on_start): eval_loss {:.4f} in {:.1f} s", summary_.eval_loss, eval_s);
    if (!metrics_) return;
    JsonNumbers fields{{"step", 0.0}, {"tokens_seen", 0.0}, {"eval_loss", summary_.eval_loss}, {"eval_s", eval_s}};
    if (evaluator_.last_preference())
      for (const auto& field : evaluator_.last_preference()->metrics("eval_")) fields.push_back(field);
    if (evaluator_.samples().enabled()) fields.push_back({"samples_s", samples_s});
    metrics_->write(fields);
    if (tensorboard_) tensorboard_->write(0, fields);
  }

  // The step's loss, tokens and time in the run's totals.
  void record(int64_t s, const StepStats& st) {
    guard_.record(st);
    total_tokens_ += st.input_tokens;
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
  void report(int64_t s, const StepStats& st, int64_t peak, bool evaluated, double eval_s, double samples_s) {
    JsonNumbers fields = step_metrics(st, peak, start_.state.skipped_steps);
    // tokens_seen: training positions so far (examples x max_target_length, a preference pair being two sequences),
    // what train_tokens and batch_size_schedule count.
    fields.push_back({"tokens_seen", double(policy_.state().sequences * cfg_.tokens_per_example())});
    if (evaluated) fields.insert(fields.end(), {{"eval_loss", summary_.eval_loss}, {"eval_s", eval_s}});
    if (evaluated && evaluator_.last_preference())
      for (const auto& field : evaluator_.last_preference()->metrics("eval_")) fields.push_back(field);
    if (evaluated && evaluator_.samples().enabled()) fields.push_back({"samples_s", samples_s});
    metrics_->write(fields);
    if (tensorboard_) tensorboard_->write(s + 1, fields);
    const double eta = summary_.seconds / double(s + 1 - earlier_steps_) * double(cfg_.steps - s - 1);
    const double shown_eval = std::isnan(summary_.eval_loss) ? -1 : summary_.eval_loss;
    ProgressLine line{s + 1, st.loss, st.grad_norm, st.lr, st.input_tokens / st.seconds, eta, peak, shown_eval,
                      st.noise ? st.noise->gns_tokens : -1.0, st.global_batch};
    if (const auto& pref = st.preference; pref && pref->pairs > 0) {
      line.reward_accuracy = pref->rewards_accuracy / pref->pairs;
      line.reward_margin = (pref->rewards_chosen - pref->rewards_rejected) / pref->pairs;
    }
    if (cfg_.dataset_type == config::DatasetType::sft || st.preference) {
      line.target_tokens = st.tokens;
      line.input_tokens = st.input_tokens;
      line.padding_fraction = st.padding_fraction;
    }
    progress_.update(line);
  }

  // Rank 0, after an evaluation: warn when eval_loss keeps rising; keep_best_checkpoint keeps the best step's
  // checkpoint out of the rotation.
  void watch_eval_loss(int64_t s) {
    if (const auto warning = trend_.add(s + 1, summary_.eval_loss)) spdlog::warn("{}", *warning);
    if (cfg_.keep_best_checkpoint && start_.checkpoints) start_.checkpoints->protect(trend_.best_step());
  }

  // After step s: the state a checkpoint records; a checkpoint when one is due, at the last step of a token budget
  // (`last`: train_tokens), after an evaluation with keep_best_checkpoint (`evaluated`), or when every process is
  // stopping (they fall between optimizer steps, where the shadow tree is zero: nothing is lost); then the stop, if any.
  void checkpoint_or_stop(int64_t s, bool last, bool evaluated) {
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
    if (start_.checkpoints &&
        (start_.checkpoints->due(state.step) || ((stop || last || evaluated) && cfg_.enable_checkpointing))) {
      start_.checkpoints->save(state, *step_.model(), step_.optimizer());
    }
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
  std::optional<TensorBoardWriter> tensorboard_;  // rank 0, enable_tensorboard: the same lines as scalars
  Progress progress_;
  NonFiniteGuard guard_;
  EvalTrend trend_;  // rank 0: eval_loss's best step and its rises
  RunSummary summary_;
  const int64_t earlier_steps_;  // steps done before this process started (resumed from the checkpoint)
  int64_t total_tokens_ = 0;
  const int64_t budget_ = cfg_.train_examples();  // train_tokens in examples (pairs); 0: the run is `steps` long
};

} // namespace

RunSummary run_steps(const config::Config& cfg, TrainStep& step, Evaluator& evaluator, memory::MemoryMeter& meter,
                     const StopSignals& signals, StartPoint& start, c10::Device device, BatchSizePolicy& policy) {
  StepLoop loop(cfg, step, evaluator, meter, signals, start, device, policy);  // opens metrics.jsonl, config.yml
  return loop.run();
}

} // namespace shadowgrad::train
