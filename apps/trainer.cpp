// trainer CONFIG [key=value ...]: trains the decoder with gradient accumulation into a shadow tree.
// Exit codes: 0 success, 1 runtime failure, 2 bad input (config, data, run directory, checkpoint,
// command line), 3 too many non-finite steps in a row, 130 / 143 stopped by SIGINT / SIGTERM.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>


#include <CLI/CLI.hpp>
#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "ThreadEnvironment.h"
#include "VersionLine.h"
#include "config/ConfigLoader.h"
#include "config/ConfigSchema.h"
#include "config/ConfigWriter.h"
#include "config/GlobalBatch.h"
#include "distributed/Environment.h"
#include "memory/MemoryReport.h"
#include "memory/TrackingAllocator.h"
#include "train/MemoryProbe.h"
#include "train/PreferenceReference.h"
#include "train/RunSources.h"
#include "train/Runtime.h"
#include "train/Signals.h"
#include "train/TrainStep.h"
#include "train/Training.h"
#include "util/Errors.h"
#include "util/Printable.h"

namespace {

constexpr int kExitFailure = 1;
constexpr int kExitBadInput = 2;
constexpr int kExitNonFinite = 3;

// The project's configs/ directory: next to the build directory that holds this binary, else the source tree.
std::string configs_dir() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    auto candidate = exe.parent_path().parent_path() / "configs";
    if (std::filesystem::is_directory(candidate, ec)) return candidate.string();
  }
  return SHADOWGRAD_SOURCE_DIR "/configs";
}

int fail(int code, const std::string& message) {
  // In a multi-process run (scripts/launch.sh, torchrun-style variables) say which process failed.
  const char* rank = std::getenv("RANK");
  const char* world = std::getenv("WORLD_SIZE");
  std::string text;
  if (rank && world && std::string(world) != "1") text = fmt::format("[rank {}] ", rank);
  // A message may quote a file's bytes (a damaged checkpoint's, a dataset's): none reaches the terminal raw.
  text += "error: ";
  for (size_t at = 0, end; at <= message.size(); at = end + 1) {
    end = std::min(message.find('\n', at), message.size());
    text += (at ? "\n" : "") + shadowgrad::util::printable(std::string_view(message).substr(at, end - at));
  }
  text += '\n';
  // One write() for the whole line: every rank of a run that gives up together (checkpoint/Agreement.h) writes its
  // line at the same moment into the launcher's one pipe, and std::cerr would write each piece on its own, letting
  // the lines interleave mid-line. A pipe keeps a write of up to PIPE_BUF (4096) bytes whole.
  std::cerr.flush();
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(STDERR_FILENO, text.data() + done, text.size() - done);
    if (n <= 0) break;
    done += size_t(n);
  }
  return code;
}

// `--steps 5` is a natural guess; config keys are given as steps=5.
std::string flag_hint(const CLI::App& app, int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (app.get_option_no_throw(argv[i]) != nullptr) continue;  // one of the trainer's own flags
    std::string fix = shadowgrad::config::override_for_flag(argv[i], i + 1 < argc ? argv[i + 1] : "");
    if (!fix.empty()) return fmt::format(" (config keys are given as key=value: did you mean '{}'?)", fix);
  }
  return "";
}

// Tests of the non-finite guard run the real binary: SHADOWGRAD_TEST_NAN_STEPS=FIRST:COUNT (1-based steps) poisons
// those steps' loss. A test seam, deliberately not a config key.
void install_test_seams() {
  const char* spec = std::getenv("SHADOWGRAD_TEST_NAN_STEPS");
  if (!spec) return;
  long first = 0, count = 1;
  if (std::sscanf(spec, "%ld:%ld", &first, &count) < 1 || first < 1) return;
  spdlog::warn("SHADOWGRAD_TEST_NAN_STEPS={}: steps {}..{} get a NaN loss (a test seam)", spec, first, first + count - 1);
  shadowgrad::train::TrainStep::set_nan_fault_hook(
      [first, count](int64_t step) { return step + 1 >= first && step + 1 < first + count; });
}

} // namespace

int main(int argc, char** argv) {
  // First: a SIGINT / SIGTERM during start-up is kept (training then stops before its first step), and a SIGINT
  // the parent left ignored (a script's background job) is honoured.
  shadowgrad::train::install_stop_handlers();
  shadowgrad::train::hold_for_test("start-up");  // tests only (SHADOWGRAD_TEST_HOLD, src/train/Signals.h)
  // Before any tensor exists, so that every CPU allocation is counted.
  shadowgrad::memory::TrackingAllocator::install();
  CLI::App app{"shadowgrad trainer: gradient accumulation into a grad_dtype shadow tree.\n"
               "CONFIG is looked up in the current directory, then in the project's configs/."};
  std::string config_arg;
  std::vector<std::string> overrides;
  bool print_config = false, help_config = false, help_config_md = false, memory_report = false;
  app.add_option("config", config_arg, "YAML config file, e.g. base.yml");
  app.add_option("overrides", overrides, "key=value overrides, e.g. gradient_accumulation_steps=4");
  app.add_flag("--print-config", print_config, "print the resolved config as YAML and exit (without CONFIG: the defaults)");
  app.add_flag("--help-config", help_config, "list every config key with type, default and help, and exit");
  app.add_flag("--help-config-markdown", help_config_md, "the same as a Markdown table (docs/config.md)");
  app.add_flag("--memory-report", memory_report,
               "run one optimizer step, print the memory report (table, then JSON) and exit; writes no run directory");
  app.set_version_flag("--version", version_line("trainer"));
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return fail(kExitBadInput, e.what() + flag_hint(app, argc, argv));
  }

  if (help_config || help_config_md) {
    std::cout << (help_config_md ? shadowgrad::config::markdown_reference() : shadowgrad::config::help_text());
    return 0;
  }
  if (print_config && config_arg.empty()) {  // the schema's defaults: this is how configs/base.yml is made
    std::cout << shadowgrad::config::to_yaml(shadowgrad::config::Config{});
    return 0;
  }
  const bool looks_like_override = config_arg.find('=') != std::string::npos && !std::filesystem::exists(config_arg);
  if (config_arg.empty() || looks_like_override)
    return fail(kExitBadInput, "missing CONFIG; usage: trainer CONFIG [key=value ...], e.g. trainer base.yml steps=10");

  try {
    auto path = shadowgrad::config::resolve_config_path(config_arg, configs_dir());
    auto cfg = shadowgrad::config::load_config(path, overrides, configs_dir());
    // A Hugging Face model directory sets the model's shape (docs/huggingface.md), a peft adapter directory the LoRA
    // keys (docs/lora.md); a resume takes both from what the run recorded.
    shadowgrad::train::configure_from_sources(cfg);
    // Before anything is written: a global_batch_size that this process count cannot split is bad input.
    shadowgrad::config::derive_accumulation_steps(cfg,
                                                  shadowgrad::distributed::ProcessEnvironment::from_environment().world_size);
    if (print_config) {
      std::cout << shadowgrad::config::to_yaml(cfg);
      return 0;
    }
    shadowgrad::apps::reexec_with_thread_environment(argv);  // before any matmul
    if (memory_report) {
      shadowgrad::train::uninstall_stop_handlers();  // it does not train: a signal ends it
      if (const int sig = shadowgrad::train::stop_requested()) return 128 + sig;
      auto report = shadowgrad::train::probe_memory(cfg);
      std::cout << shadowgrad::memory::format_table(report) << shadowgrad::memory::to_json(report);
      return 0;
    }
    install_test_seams();
    shadowgrad::train::Training training(cfg);
    auto summary = training.run();
    // A resumed run's first loss comes from metrics.jsonl, which only rank 0 reads: the other ranks give the last.
    const std::string losses = std::isnan(summary.first_loss)
                                   ? fmt::format("loss {:.4f}", summary.final_loss)
                                   : fmt::format("loss {:.4f} -> {:.4f}", summary.first_loss, summary.final_loss);
    spdlog::info("done: {} steps | {} | {:.0f} tokens/s average | {}", summary.steps, losses, summary.avg_tokens_per_s,
                 summary.run_dir.empty() ? "run directory written by rank 0" : summary.run_dir);
    return 0;
  } catch (const shadowgrad::InputError& e) {
    return fail(kExitBadInput, e.what());
  } catch (const shadowgrad::NonFiniteError& e) {
    return fail(kExitNonFinite, e.what());
  } catch (const shadowgrad::InterruptedError& e) {
    spdlog::warn("{}", e.what());
    return e.exit_code();
  } catch (const c10::Error& e) {
    return fail(kExitFailure, e.what_without_backtrace());
  } catch (const std::exception& e) {
    return fail(kExitFailure, e.what());
  }
}
