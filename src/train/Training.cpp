#include "train/Training.h"

#include <sys/resource.h>

#include <memory>
#include <optional>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "checkpoint/Checkpointer.h"
#include "config/ConfigWriter.h"
#include "config/Dtypes.h"
#include "config/GlobalBatch.h"
#include "data/DataSource.h"
#include "data/PairSource.h"
#include "distributed/Communicator.h"
#include "distributed/DataParallel.h"
#include "distributed/Environment.h"
#include "distributed/ParameterShards.h"
#include "hub/BaseRecord.h"
#include "hub/Import.h"
#include "hub/ModelWeights.h"
#include "memory/MemoryMeter.h"
#include "memory/MemoryReport.h"
#include "model/Decoder.h"
#include "model/WeightCount.h"
#include "train/BatchSizePolicy.h"
#include "train/CheckpointTopology.h"
#include "train/EndOfRun.h"
#include "train/EpochSteps.h"
#include "train/Evaluator.h"
#include "train/MemoryProbe.h"
#include "train/MicrobatchFit.h"
#include "train/ModelBuild.h"
#include "train/PreferenceReference.h"
#include "train/Runtime.h"
#include "train/Signals.h"
#include "train/StartPoint.h"
#include "train/StepLoop.h"
#include "train/TrainStep.h"
#include "util/Errors.h"
#include "util/File.h"

namespace shadowgrad::train {

namespace {

// One line per process at the end of a run: its tensor peak (the tracking allocator), what it holds of the shadow
// tree and the optimizer state (1/WORLD_SIZE when sharded), and its peak RSS.
void log_process_memory(TrainStep& step, const memory::MemoryMeter& meter) {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  constexpr double kMiB = 1024.0 * 1024.0;
  // ZeRO-3: the weights held are this process's pieces; the gathered units come and go (their most at once).
  const auto* shards = step.parameter_shards();
  const int64_t weights = shards ? memory::tensor_bytes(shards->pieces()) : memory::tensor_bytes(step.accumulator().params());
  if (shards)
    spdlog::info("weights on this process (shard_parameters_over_data): {:.1f} MiB of its range; gathered layers held "
                 "at most {:.1f} MiB at once",
                 double(weights) / kMiB, double(shards->gathered_bytes_high()) / kMiB);
  spdlog::info("memory on this process: tensors peaked at {:.1f} MiB; weights {:.1f} MiB, shadow tree {:.1f} MiB, "
               "optimizer state {:.1f} MiB; peak RSS {:.1f} MiB; the steps alone peaked at {:.1f} MiB",
               double(meter.run_peak()) / kMiB, double(weights) / kMiB,
               double(step.accumulator().bytes()) / kMiB,
               double(memory::optimizer_state_bytes(step.optimizer())) / kMiB, double(usage.ru_maxrss) / 1024.0,
               double(meter.max_step_peak()) / kMiB);
  if (auto* dp = step.data_parallel()) {
    const auto& c = dp->communicator().counts();  // counted in the communicator, not estimated
    spdlog::info("collectives on this process: {} all_reduce, {} all_gather, {} broadcast, {} bytes contributed",
                 c.all_reduce, c.all_gather, c.broadcast, c.bytes);
  }
}

} // namespace

namespace {

// The config as the run records it: the compute dtype resolved, and the LoRA targets in the one spelling a checkpoint
// pins (a resume that lists the same projections in another order is the same run).
config::Config resolved(config::Config cfg, const ComputeDtypeChoice& choice) {
  cfg.dtype = config::as_compute_dtype(choice.dtype);
  if (cfg.lora_rank > 0) cfg.lora_target_modules = model::canonical_lora_targets(cfg.lora_target_modules);
  return cfg;
}

} // namespace

Training::Training(config::Config cfg)
    : dtype_(choose_compute_dtype(cfg)),
      cfg_(resolved(std::move(cfg), dtype_)),
      // What this build cannot run is refused before the device is looked for (exit 2 either way).
      device_((require_device_support(cfg_.grad_accum_rounding, cfg_.adam_state_dtype, cfg_.hardware),
               resolve_device(cfg_.hardware))),
      source_(data::make_source(data::DataOptions::from_config(cfg_))) {
  const int world = distributed::ProcessEnvironment::from_environment().world_size;
  derive_steps_from_epochs(cfg_, *source_, world);  // num_epochs: before anything reads steps
  // With per_device_batch_size=auto the eval batch may follow the microbatch: built in run(), once it is known.
  if (cfg_.per_device_batch_size != config::kAuto) evaluator_ = std::make_unique<Evaluator>(cfg_, world);
  // One GPU per process on a node: LOCAL_RANK picks it, as with torchrun and SLURM.
  if (device_.is_cuda()) device_ = c10::Device(c10::kCUDA, distributed::ProcessEnvironment::from_environment().local_rank);
}

Training::~Training() = default;

namespace {

// Several processes (RANK/WORLD_SIZE set): connect first; every log line then carries the rank. Null for one.
std::shared_ptr<distributed::DataParallel> connect(const config::Config& cfg, c10::Device device) {
  const auto env = distributed::ProcessEnvironment::from_environment();
  if (env.distributed()) spdlog::set_pattern(fmt::format("[%Y-%m-%d %H:%M:%S.%e] [rank {}] [%^%l%$] %v", env.rank));
  return distributed::DataParallel::from_environment(distributed::DataParallelOptions::from_config(cfg), device);
}

// Weights from a Hugging Face directory (cfg's model keys were set from its config.json when the config was loaded)
// and adapters from lora_restore_path (hub/ModelWeights.h). A run with a checkpoint to resume reads neither: the
// checkpoint overwrites every parameter, with the optimizer's state (open_run). A LoRA run's checkpoint holds only the
// adapters, so its frozen base is read again, from where the run recorded it.
hub::WeightSources pretrained_sources(const config::Config& cfg) {
  hub::WeightSources sources;
  if (!checkpoint::can_resume(cfg)) {
    sources.base = cfg.load_parameters_path;
    sources.adapter = cfg.lora_restore_path;
  } else if (cfg.lora_rank > 0) {
    sources = hub::run_weights(cfg, checkpoint::run_dir_of(cfg), -1);  // exit 2 naming the file if the base changed
    sources.checkpoint.clear();                                        // open_run restores it
  }
  return sources;
}

void log_pretrained(const config::Config& cfg, const hub::WeightSources& sources, const hub::Loaded& got) {
  if (!got.base.empty() && !sources.recorded_by.empty())
    spdlog::info("frozen base read again from {}, as the run recorded it", cfg.load_parameters_path);
  else if (!got.base.empty())
    spdlog::info("weights from {} ({})", got.base, got.architecture);
  if (!sources.adapter.empty()) spdlog::info("adapters from {}", sources.adapter);
}

// The weights the run started from, read again over a resumed model (whose checkpoint is not restored yet): the base
// of a full fine-tuning run (a LoRA run's frozen base is in place already) and the adapter it started from; where
// neither was given, the seeded initialisation the model was built with.
void load_starting_weights(const config::Config& cfg, torch::nn::Module& model) {
  hub::WeightSources sources;
  if (cfg.lora_rank == 0) sources.base = cfg.load_parameters_path;
  sources.adapter = cfg.lora_restore_path;
  if (!sources.base.empty() || !sources.adapter.empty()) hub::load_model_weights(sources, cfg, model);
}

// use_dpo switches dropout off unless dpo_disable_dropout=false (model/LoraOptions.cpp); say which.
void log_dropout(const config::Config& cfg) {
  if (cfg.lora_rank == 0 || cfg.lora_dropout <= 0) return;
  if (cfg.dpo_disable_dropout)
    spdlog::info("use_dpo: lora_dropout={} is off in the policy (dpo_disable_dropout=true, as TRL's disable_dropout), "
                 "so step 1's rewards are 0; dpo_disable_dropout=false keeps it",
                 cfg.lora_dropout);
  else
    spdlog::info("use_dpo: lora_dropout={} stays on in the policy (dpo_disable_dropout=false); the reference is "
                 "scored without it, so step 1's rewards are not 0",
                 cfg.lora_dropout);
}

// Threads, the allocator cache, and what the user should know about the compute dtype. Returns the thread count.
int configure_process(const config::Config& cfg, const ComputeDtypeChoice& dtype) {
  const int threads = configure_threads(cfg.num_threads);
  configure_allocator_cache(cfg.cpu_allocator_cache_mib);
  if (!dtype.warning.empty()) spdlog::warn("{}", dtype.warning);
  return threads;
}

// The run's one-line description: where it writes, its size and its global batch.
void log_run_start(const config::Config& cfg, const ComputeDtypeChoice& dtype, const StartPoint& start, TrainStep& step,
                   int world, int threads) {
  int64_t params = 0;
  for (const auto& p : step.model()->parameters()) params += p.numel();
  // A pair is two sequences: K x B pairs (2B sequences) x T tokens.
  const bool pairs = cfg.dataset_type == config::DatasetType::preference;
  const std::string unit =
      pairs ? fmt::format("pairs ({} sequences)", 2 * cfg.per_device_batch_size) : std::string("sequences");
  spdlog::info("run {} | {} parameters | K={} x {} {} x {} tokens x {} processes = global batch {}{}{} | "
               "grad_dtype={} dtype={} ({}) | {} threads",
               start.dir ? start.dir->path() : "(written by rank 0)", params, cfg.gradient_accumulation_steps,
               cfg.per_device_batch_size, unit, cfg.max_target_length, world, config::global_batch(cfg, world),
               pairs ? " pairs" : "", cfg.global_batch_size > 0 ? " (global_batch_size; K derived)" : "",
               cfg.grad_dtype, cfg.dtype, dtype.why, threads);
  if (cfg.lora_rank > 0) {
    const int64_t frozen = model::count_weights(step.model()->options()).base;  // not the RoPE tables, not the mask
    spdlog::info("LoRA r={} on {}: {} trainable adapter parameters, {} frozen base values in {} (docs/lora.md)",
                 cfg.lora_rank, cfg.lora_target_modules, params, frozen, cfg.weight_dtype);
    if (const std::string w = model::lora_rank_warning(step.model()->options()); !w.empty()) spdlog::warn("{}", w);
  }
  if (!cfg.batch_size_schedule.empty())
    spdlog::info("batch_size_schedule {}: K is derived at every step; the LR is scaled by batch_size_lr_scaling={}",
                 cfg.batch_size_schedule, cfg.batch_size_lr_scaling);
  if (cfg.batch_size_policy == config::BatchSizePolicy::gns)
    spdlog::info("batch_size_policy=gns: doubles the global batch once gns_tokens > {} x its tokens, at most once in {} "
                 "steps, up to {} sequences; LR scaled by batch_size_lr_scaling={}",
                 cfg.gns_batch_margin, cfg.gns_min_steps_between_changes,
                 cfg.global_batch_size_max > 0 ? cfg.global_batch_size_max : int64_t(1) << 20,
                 cfg.batch_size_lr_scaling);
  const LrSchedule& lr = step.lr_schedule();
  if (lr.options().unit == LrUnit::tokens)
    spdlog::info("LR schedule ({}) in tokens, the same points in data at any batch: warmup to {:.0f}, decay from {:.0f} "
                 "to {:.0f} tokens{}",
                 cfg.lr_schedule_type, lr.options().warmup_fraction * lr.options().length, lr.decay_start(),
                 lr.options().length,
                 cfg.train_tokens > 0 ? fmt::format("; the run ends at train_tokens={}", cfg.train_tokens) : "");
}

} // namespace

RunSummary Training::run() {
  StopSignals signals;  // first: a signal while the model is built and the checkpoint loaded stops before step 1
  const int threads = configure_process(cfg_, dtype_);
  memory::MemoryMeter meter(device_);  // before the model, so its set-up counts in the run's peak
  auto dp = connect(cfg_, device_);
  const int world = dp ? dp->world_size() : 1;
  refuse_what_cannot_fit(cfg_, device_, world);  // exit 2, naming the figure, before the model is allocated
  // The seeded init, then load_parameters_path unless the run resumes from its own checkpoint; ZeRO-3: unit by unit.
  const hub::WeightSources sources = pretrained_sources(cfg_);
  BuiltModel built = build_model(cfg_, sources, dp.get(), device_);
  log_pretrained(cfg_, sources, built.loaded);
  // What building and loading took (ZeRO-3: the range and about one unit, train/ModelBuild.h).
  spdlog::info("model built: tensors peaked at {:.1f} MiB so far", double(meter.window_peak_bytes()) / (1024.0 * 1024.0));
  model::Decoder model = built.model;
  auto* pairs = dynamic_cast<data::PairSource*>(source_.get());
  // per_device_batch_size=auto's probe runs the preference loss on pairs before the reference exists; it measures
  // memory only, so zeros stand in, and the reference pass replaces them before step 1.
  if (pairs && cfg_.per_device_batch_size == config::kAuto)
    pairs->set_reference(std::vector<double>(size_t(2 * pairs->pairs_kept()), 0.0));
  fit_microbatch(cfg_, model, *source_, device_, dp.get(), world);  // per_device_batch_size=auto, memory_budget_mib
  if (!evaluator_) evaluator_ = std::make_unique<Evaluator>(cfg_, world);
  const BatchPolicyOptions batches = BatchPolicyOptions::from_config(cfg_, world);
  StepOptions options = StepOptions::from_config(cfg_);
  if (batches.changes()) options.max_accumulation_steps = batches.largest_batch() / (cfg_.per_device_batch_size * world);
  TrainStep step(options, model, *source_, device_, dp, std::move(built.shards));

  std::optional<ReferencePass> reference;  // use_dpo: the reference log-probs (PreferenceReference.h)
  if (pairs)
    reference.emplace(cfg_, *pairs, dynamic_cast<data::PairSource*>(evaluator_->source()),
                      evaluator_->batch_per_process(), model, device_, dp.get(), signals);
  // A resume whose eval pairs have no reference yet scores them from the starting weights, before the checkpoint
  // replaces them.
  if (reference && checkpoint::can_resume(cfg_) && reference->eval_needs_start(checkpoint::run_dir_of(cfg_))) {
    step.gather_weights();  // ZeRO-3: loaded whole, then fingerprinted whole by score_eval_from_start
    load_starting_weights(cfg_, *model);
    step.release_weights(/*adopt=*/true);
    step.gather_weights();
    reference->score_eval_from_start();
    step.release_weights(/*adopt=*/false);
  }
  // ZeRO-3: the checkpoint's weights go straight into this process's pieces (checkpoint/WeightShards.h).
  StartPoint start = open_run(cfg_, dp.get(), model, step.optimizer(), checkpoint_topology(step));
  const bool budget_spent = cfg_.train_tokens > 0 && start.state.sequences >= cfg_.train_examples();
  if (start.state.step > 0 && (start.state.step == cfg_.steps || budget_spent)) return finish_from_disk(start, step, meter);
  if (start.dir && start.state.step == 0 && !cfg_.load_parameters_path.empty()) {
    hub::carry_model_files(cfg_.load_parameters_path, start.dir->path());  // tokenizer, config.json, source.json
    if (cfg_.lora_rank > 0) hub::write_base_record(cfg_.load_parameters_path, start.dir->path());  // checked on resume
  }
  if (reference) {
    // config.yml first: it marks the directory as this command's run, so that a run killed during the pass starts
    // again (RunDirectory.h) and continues the pass from what it kept.
    if (start.dir && start.state.step == 0) util::write_file_atomically(start.dir->file("config.yml"), config::to_yaml(cfg_));
    log_dropout(cfg_);
    if (start.state.step == 0 && step.parameter_shards()) {  // ZeRO-3: the fingerprint reads the whole weights
      step.gather_weights();
      reference->start_key();
      step.release_weights(/*adopt=*/false);
    }
    reference->prepare(checkpoint::run_dir_of(cfg_), start.state.step > 0, start.dir.has_value());
  }
  BatchSizePolicy policy(batches, continue_batch(start, step, batches, cfg_.per_device_batch_size, world));
  log_run_start(cfg_, dtype_, start, step, world, threads);
  RunSummary summary = run_steps(cfg_, step, *evaluator_, meter, signals, start, device_, policy);
  if (cfg_.train_tokens > 0 && policy.state().sequences < cfg_.train_examples())
    spdlog::warn("stopped at steps={} after {} of train_tokens={} tokens; raise steps (a cap when train_tokens is set) "
                 "and rerun the same command to train the rest",
                 cfg_.steps, policy.state().sequences * cfg_.tokens_per_example(), cfg_.train_tokens);
  if (start.dir) write_end_of_run_files(*start.dir, summary, memory_report(step, meter, summary.steps));
  log_process_memory(step, meter);  // every process: what sharding left here (bench/sharded_memory.sh reads it)
  // Every step skipped (fewer than max_consecutive_nonfinite): the run trained nothing, which is no success (exit 3).
  if (summary.steps > 0 && start.state.skipped_steps >= summary.steps)
    throw NonFiniteError(fmt::format("every one of the run's {} steps had a non-finite loss or gradient norm, so it "
                                     "trained nothing (skipped_steps={} in metrics.jsonl); a NaN from the start is "
                                     "often the data, the learning rate or a scale such as lora_alpha",
                                     summary.steps, start.state.skipped_steps));
  return summary;
}

} // namespace shadowgrad::train
