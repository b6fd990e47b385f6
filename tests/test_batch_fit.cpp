// per_device_batch_size=auto and memory_budget_mib (train/MicrobatchFit.h): the decision rule on known numbers, the
// headroom read from cgroup v1/v2 files and MemAvailable, the optimizer state predicted from the config against
// the state a real update creates, and the trainer end to end (the decision and its log line, rank 0's decision on
// 2 processes, the same losses as an explicit microbatch, and exit 2 with the estimate when nothing fits).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include <torch/optim/optimizer.h>

#include "RankThreads.h"
#include "TinyConfig.h"
#include "TrainerProcess.h"
#include "config/Dtypes.h"
#include "data/DataSource.h"
#include "distributed/DataParallel.h"
#include "memory/BatchFit.h"
#include "memory/MemoryBudget.h"
#include "memory/MemoryReport.h"
#include "memory/TrackingAllocator.h"
#include "model/Decoder.h"
#include "train/MicrobatchFit.h"
#include "train/OptimizerFactory.h"
#include "train/TrainStep.h"
#include "util/Errors.h"

using namespace shadowgrad;
namespace fs = std::filesystem;
namespace tp = trainer_process;

namespace {

// The numbers of the trainer's "pdbs=auto: N (predicted peak P MiB of B; S MiB per sequence; K=k)" line.
struct AutoLine {
  int64_t pdbs = 0, k = 0;
  double predicted = 0, budget = 0, per_sequence = 0;
};

AutoLine auto_line(const std::string& log) {
  static const std::regex line(R"(pdbs=auto: (\d+) \(predicted peak ([0-9.e+]+) MiB of ([0-9.e+]+); ([0-9.e+]+) MiB )"
                               R"(per sequence; K=(\d+)\))");
  std::smatch m;
  if (!std::regex_search(log, m, line)) return {};
  return {std::stoll(m[1]), std::stoll(m[5]), std::stod(m[2]), std::stod(m[3]), std::stod(m[4])};
}

// fp32 compute, so that two microbatch splits agree to fp32 rounding; global batch 8.
std::string fit_args(const std::string& base, const std::string& name, const std::string& extra) {
  return "tiny.yml base_output_directory=" + base + " run_name=" + name +
         " dtype=float32 steps=3 global_batch_size=8 enable_checkpointing=false " + extra;
}

double max_rel_diff(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  double worst = a.size() == b.size() ? 0 : 1e30;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    worst = std::max(worst, std::abs(std::stod(a[i]) - std::stod(b[i])) / std::abs(std::stod(b[i])));
  return worst;
}

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

} // namespace

TEST_CASE("the largest divisor of the local batch whose predicted peak fits is chosen", "[batchfit]") {
  // peak(1) = 1100, peak(2) = 1200: 100 per sequence, 1000 at zero, plus 50 of optimizer state to come.
  const auto m = memory::MicrobatchModel::fit({1, 1100, 2, 1200}, 50);
  CHECK(m.per_sequence == 100);
  CHECK(m.predicted_peak(1) == 1150);
  CHECK(m.predicted_peak(6) == 1650);
  // local batch 12, budget 1560: 1..5 fit (5 -> 1550), but 5 does not divide 12, so 4.
  auto pick = memory::largest_fitting(m, 12, 1560);
  REQUIRE(pick);
  CHECK(pick->microbatch == 4);
  CHECK(pick->predicted_peak == 1450);
  CHECK(memory::largest_fitting(m, 12, 100000)->microbatch == 12);
  CHECK_FALSE(memory::largest_fitting(m, 12, 1149));  // not even 1
}

TEST_CASE("the message of a microbatch that does not fit gives the estimate and each lever's saving", "[batchfit]") {
  memory::MemoryEstimate e;
  e.weights = 189 << 20;
  e.optimizer_state = 378 << 20;
  e.shadow_tree = 189 << 20;
  e.per_sequence = 121 << 20;
  e.peak_at_one = 980 << 20;
  e.save_grad_bf16 = 94 << 20;
  e.save_adam_bf16 = 189 << 20;
  e.save_remat_full = 50 << 20;
  const std::string text = memory::does_not_fit_message(e, 1, 980 << 20, 500 << 20, "memory_budget_mib=500");
  for (const char* part : {"per_device_batch_size=1 does not fit", "980 MiB over the memory budget of 500 MiB",
                           "weights 189 MiB", "optimizer state 378 MiB", "shadow tree 189 MiB",
                           "121 MiB per sequence", "grad_dtype=bfloat16 saves 94 MiB",
                           "adam_state_dtype=bfloat16 saves 189 MiB", "remat_policy=full saves 50 MiB"})
    CHECK_THAT(text, Catch::Contains(part));
  e.save_grad_bf16 = e.save_adam_bf16 = e.save_remat_full = 0;
  CHECK_THAT(memory::does_not_fit_message(e, 1, 1, 0, "x"), Catch::Contains("Every lever"));
}

TEST_CASE("headroom: cgroup v2 or v1 limit minus usage, or MemAvailable, whichever is smaller", "[batchfit]") {
  const fs::path root = tp::fresh_dir("headroom");
  write(root / "proc/meminfo", "MemTotal:       24000000 kB\nMemAvailable:    2000000 kB\n");
  SECTION("cgroup v2 with a limit below MemAvailable") {
    write(root / "proc/self/cgroup", "0::/job\n");
    write(root / "sys/fs/cgroup/job/memory.max", "1073741824\n");
    write(root / "sys/fs/cgroup/job/memory.current", "73741824\n");
    const auto h = memory::read_headroom(root.string());
    CHECK(h.bytes == 1000000000);
    CHECK_THAT(h.source, Catch::Contains("cgroup v2 memory.max - memory.current"));
  }
  SECTION("cgroup v2 without a limit (max): MemAvailable") {
    write(root / "proc/self/cgroup", "0::/\n");
    write(root / "sys/fs/cgroup/memory.max", "max\n");
    write(root / "sys/fs/cgroup/memory.current", "5\n");
    const auto h = memory::read_headroom(root.string());
    CHECK(h.bytes == int64_t(2000000) * 1024);
    CHECK_THAT(h.source, Catch::Contains("MemAvailable"));
  }
  SECTION("cgroup v1 (the limit is in memory:/path), and no limit written as 2^63 - 4096") {
    write(root / "proc/self/cgroup", "5:devices:/\n4:memory:/job\n0::/\n");
    write(root / "sys/fs/cgroup/memory/job/memory.limit_in_bytes", "536870912\n");
    write(root / "sys/fs/cgroup/memory/job/memory.usage_in_bytes", "36870912\n");
    CHECK(memory::read_headroom(root.string()).bytes == 500000000);
    write(root / "sys/fs/cgroup/memory/job/memory.limit_in_bytes", "9223372036854771712\n");
    CHECK_THAT(memory::read_headroom(root.string()).source, Catch::Contains("MemAvailable"));
  }
  SECTION("a cgroup limit above MemAvailable: MemAvailable") {
    write(root / "proc/self/cgroup", "0::/\n");
    write(root / "sys/fs/cgroup/memory.max", "107374182400\n");
    write(root / "sys/fs/cgroup/memory.current", "0\n");
    CHECK(memory::read_headroom(root.string()).bytes == int64_t(2000000) * 1024);
  }
  SECTION("resident memory: VmRSS") {
    write(root / "proc/self/status", "Name:\ttrainer\nVmHWM:\t  300000 kB\nVmRSS:\t  262144 kB\n");
    CHECK(memory::resident_bytes(root.string()) == int64_t(256) << 20);
    CHECK(memory::resident_bytes((root / "none").string()) == -1);
  }
  fs::remove_all(root);
}

TEST_CASE("the optimizer state predicted from the config is the state the first update creates", "[batchfit]") {
  memory::TrackingAllocator::install();
  using config::FloatDtype;
  using config::OptType;
  struct Variant {
    OptType opt_type;
    bool fused;
    FloatDtype state_dtype, weight_dtype;
  };
  const Variant v = GENERATE(Variant{OptType::adamw, true, FloatDtype::float32, FloatDtype::float32},
                             Variant{OptType::adamw, true, FloatDtype::bfloat16, FloatDtype::float32},
                             Variant{OptType::adamw, false, FloatDtype::float32, FloatDtype::float32},
                             Variant{OptType::adam, false, FloatDtype::float32, FloatDtype::float32},
                             Variant{OptType::sgd, false, FloatDtype::float32, FloatDtype::float32},
                             Variant{OptType::adamw, true, FloatDtype::float32, FloatDtype::bfloat16});
  auto cfg = tiny_config();
  cfg.opt_type = v.opt_type;
  cfg.opt_fused = v.fused;
  cfg.adam_state_dtype = v.state_dtype;
  cfg.weight_dtype = v.weight_dtype;
  if (v.weight_dtype == FloatDtype::bfloat16) cfg.grad_dtype = config::GradDtype::bfloat16;  // AdamW needs grad = param dtype
  INFO(config::to_string(v.opt_type) << " fused=" << v.fused << " state " << config::to_string(v.state_dtype)
                                     << " weights " << config::to_string(v.weight_dtype));
  auto source = data::make_source(data::DataOptions::from_config(cfg));
  model::Decoder model(model::DecoderOptions::from_config(cfg));
  train::TrainStep step(train::StepOptions::from_config(cfg), model, *source, c10::Device(c10::kCPU));
  CHECK(memory::optimizer_state_bytes(step.optimizer()) == 0);
  step.run(0);
  int64_t elements = 0;
  for (const auto& p : model->parameters()) elements += p.numel();
  CHECK(train::optimizer_state_bytes_after_update(train::OptimizerOptions::from_config(cfg),
                                                  config::scalar_type(cfg.weight_dtype),
                                                  elements) == memory::optimizer_state_bytes(step.optimizer()));
}

TEST_CASE("pdbs=auto picks the largest microbatch under memory_budget_mib, logs it, and trains as an explicit split",
          "[batchfit][trainer]") {
  const std::string base = tp::fresh_dir("pdbs_auto");
  // The default budget (memory_budget_mib=0: from this machine's free memory) is roomy for the tiny model: the whole
  // local batch, 8, in one microbatch.
  const auto roomy = tp::run(fit_args(base, "roomy", "per_device_batch_size=auto"));
  INFO(roomy.output);
  REQUIRE(roomy.code == 0);
  const AutoLine all = auto_line(roomy.output);
  CHECK(all.pdbs == 8);
  CHECK(all.k == 1);
  CHECK(all.budget > all.predicted);
  REQUIRE(all.per_sequence > 0);
  CHECK_THAT(roomy.output, Catch::Contains("| budget: 90 % of "));
  // A budget halfway between the predicted peaks of 2 and 4 sequences: 2, so K=4.
  const double budget = all.predicted - 5 * all.per_sequence;
  const auto tight = tp::run(fit_args(base, "tight", "per_device_batch_size=auto memory_budget_mib=" +
                                                         std::to_string(budget)));
  INFO(tight.output);
  REQUIRE(tight.code == 0);
  const AutoLine two = auto_line(tight.output);
  CHECK(two.pdbs == 2);
  CHECK(two.k == 4);
  CHECK(two.predicted <= budget);
  CHECK_THAT(tight.output, Catch::Contains("K=4 x 2 sequences"));
  // The probe changes nothing: the same losses as pdbs=2 given explicitly, digit for digit; and, as GA parity
  // promises, pdbs=8 K=1 within fp32 rounding.
  REQUIRE(tp::run(fit_args(base, "two", "per_device_batch_size=2")).code == 0);
  REQUIRE(tp::run(fit_args(base, "eight", "per_device_batch_size=8")).code == 0);
  const auto loss = [&](const char* run) { return tp::field(base + "/" + run + "/metrics.jsonl", "loss"); };
  CHECK(loss("tight") == loss("two"));
  CHECK(max_rel_diff(loss("tight"), loss("eight")) <= 1e-5);
  CHECK(loss("roomy") == loss("eight"));
  // The step peaks measured in training stay under the budget the choice was made for.
  for (const auto& peak : tp::field(base + "/tight/metrics.jsonl", "peak_mem_bytes"))
    CHECK(std::stod(peak) <= budget * 1024 * 1024);
  fs::remove_all(base);
}

TEST_CASE("a budget below what microbatch 1 needs exits 2 before training, with the estimate and each lever",
          "[batchfit][trainer]") {
  const std::string base = tp::fresh_dir("pdbs_small");
  const std::string automatic = GENERATE(std::string("per_device_batch_size=auto"), std::string("per_device_batch_size=1"));
  const auto r = tp::run(fit_args(base, "r", automatic + " memory_budget_mib=0.01"));
  INFO(r.output);
  CHECK(r.code == 2);
  // The tiny model: 22688 parameters, 4 bytes each as weights and shadow tree, 8 as AdamW's moments.
  for (const char* part : {"per_device_batch_size=1 does not fit: predicted peak", "over the memory budget of 0.01 MiB",
                           "weights 0.0865 MiB", "optimizer state 0.173 MiB", "shadow tree 0.0865 MiB",
                           "MiB per sequence", "grad_dtype=bfloat16 saves 0.0433 MiB",
                           "adam_state_dtype=bfloat16 saves 0.0865 MiB", "remat_policy=full saves"})
    CHECK_THAT(r.output, Catch::Contains(part));
  CHECK_FALSE(fs::exists(base + "/r"));  // nothing written: refused before the run directory
  fs::remove_all(base);
}

TEST_CASE("every rank uses rank 0's microbatch, and rank 0's refusal stops every rank", "[batchfit][distributed]") {
  for (const bool rank0_fits : {true, false}) {
    std::vector<int64_t> chosen(2, -1);
    auto errors = run_ranks(2, [&](distributed::Communicator& comm) {
      auto c = tiny_config();
      c.global_batch_size = 16;
      c.per_device_batch_size = config::kAuto;
      // Rank 1's own budget would refuse even one sequence; rank 0's fits the whole local batch of 8, or nothing.
      c.memory_budget_mib = comm.rank() == 0 && rank0_fits ? 1000 : 0.01;
      auto dp = std::make_shared<distributed::DataParallel>(share(comm),
                                                            distributed::DataParallelOptions::from_config(c));
      auto source = data::make_source(data::DataOptions::from_config(c));
      model::Decoder model(model::DecoderOptions::from_config(c));
      train::fit_microbatch(c, model, *source, c10::Device(c10::kCPU), dp.get(), 2);
      chosen[comm.rank()] = c.per_device_batch_size;
      CHECK(c.gradient_accumulation_steps == 8 / c.per_device_batch_size);
    });
    INFO("rank 0 fits: " << rank0_fits << "; rank 0: " << errors[0] << "; rank 1: " << errors[1]);
    if (rank0_fits) {
      require_no_errors(errors);
      CHECK(chosen == std::vector<int64_t>{8, 8});
    } else {
      CHECK_THAT(errors[0], Catch::Contains("does not fit"));
      CHECK_THAT(errors[1], Catch::Contains("rank 0 found no microbatch that fits"));
    }
  }
}
