#include "train/Training.h"

#include <chrono>
#include <cstdio>

#include <spdlog/spdlog.h>

#include "config/ConfigWriter.h"
#include "data/DataSource.h"
#include "memory/MemoryMeter.h"
#include "memory/MemoryReport.h"
#include "model/Decoder.h"
#include "train/LossPlot.h"
#include "train/MemoryProbe.h"
#include "train/MetricsWriter.h"
#include "train/Progress.h"
#include "train/RunDirectory.h"
#include "train/Runtime.h"
#include "train/TrainStep.h"

namespace shadowgrad::train {

Training::Training(config::Config cfg)
    : cfg_(std::move(cfg)), device_(resolve_device(cfg_.hardware)), source_(data::make_source(cfg_)) {}

Training::~Training() = default;

RunSummary Training::run() {
  const int threads = configure_threads(cfg_.num_threads);
  if (cfg_.dtype == "bfloat16" && device_.is_cpu() && !cpu_has_avx512_bf16())
    spdlog::warn("this CPU lacks avx512_bf16: bf16 matmul will be much slower than fp32; consider dtype=float32");

  memory::MemoryMeter meter(device_);  // before the model, so its set-up counts in the run's peak
  model::Decoder model(model::DecoderOptions::from_config(cfg_));
  model->to(device_);
  TrainStep step(cfg_, model, *source_, device_);

  RunDirectory dir = RunDirectory::create(cfg_);
  write_file_atomically(dir.file("config.yml"), config::to_yaml(cfg_));
  MetricsWriter metrics(dir.file("metrics.jsonl"));

  int64_t params = 0;
  for (const auto& p : model->parameters()) params += p.numel();
  spdlog::info("run {} | {} parameters | K={} x {} sequences x {} tokens | grad_dtype={} dtype={} | {} threads",
               dir.path(), params, cfg_.gradient_accumulation_steps, cfg_.per_device_batch_size,
               cfg_.max_target_length, cfg_.grad_dtype, cfg_.dtype, threads);

  Progress progress(cfg_.steps, cfg_.log_period, stdout_is_terminal());
  RunSummary summary;
  summary.run_dir = dir.path();
  int64_t total_tokens = 0;
  for (int64_t s = 0; s < cfg_.steps; ++s) {
    meter.begin_step();
    StepStats st = step.run(s);
    const int64_t peak = meter.end_step();
    total_tokens += st.tokens;
    summary.seconds += st.seconds;
    if (s == 0) summary.first_loss = st.loss;
    summary.final_loss = st.loss;
    const double tokens_per_s = st.tokens / st.seconds;
    metrics.write({{"step", double(s + 1)},
                   {"loss", st.loss},
                   {"grad_norm", st.grad_norm},
                   {"lr", st.lr},
                   {"tokens", double(st.tokens)},
                   {"step_time_s", st.seconds},
                   {"tokens_per_s", tokens_per_s},
                   {"peak_mem_bytes", double(peak)}});
    const double eta = summary.seconds / double(s + 1) * double(cfg_.steps - s - 1);
    progress.update({s + 1, st.loss, st.grad_norm, st.lr, tokens_per_s, eta, peak});
  }
  progress.finish();
  summary.steps = cfg_.steps;
  summary.avg_tokens_per_s = summary.seconds > 0 ? total_tokens / summary.seconds : 0;
  summary.peak_mem_bytes = meter.run_peak();
  memory::MemoryReport mem = memory_report(step, meter, cfg_.steps);
  write_file_atomically(dir.file("memory_report.json"), memory::to_json(mem));
  std::fputs(memory::format_table(mem).c_str(), stdout);
  write_file_atomically(dir.file("summary.json"),
                        to_json({{"steps", double(summary.steps)},
                                 {"final_loss", summary.final_loss},
                                 {"first_loss", summary.first_loss},
                                 {"avg_tokens_per_s", summary.avg_tokens_per_s},
                                 {"train_seconds", summary.seconds},
                                 {"peak_mem_bytes", double(summary.peak_mem_bytes)}}) + "\n");
  plot_loss_if_possible(dir.path());
  return summary;
}

} // namespace shadowgrad::train
