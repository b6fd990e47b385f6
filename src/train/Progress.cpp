#include "train/Progress.h"

#include <cstdio>

#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace shadowgrad::train {

std::string format_progress(const ProgressLine& p, int64_t total_steps) {
  std::string mem = p.peak_bytes >= 0 ? fmt::format(" | peak {:.1f} MiB", p.peak_bytes / 1048576.0) : "";
  std::string eval = p.eval_loss >= 0 ? fmt::format(" | eval_loss {:.4f}", p.eval_loss) : "";
  // Next to the loss: the batch size (in tokens) past which a larger batch stops paying (docs/batch-size.md).
  std::string gns = p.gns_tokens >= 0 ? fmt::format(" | gns {:.3g} tok", p.gns_tokens) : "";
  // The global batch in sequences: it changes with batch_size_schedule and batch_size_policy=gns.
  std::string batch = p.global_batch > 0 ? fmt::format(" | batch {}", p.global_batch) : "";
  // Padded rows (SFT): how many tokens were real and how many of them targets; tok/s counts the real ones.
  std::string sft = p.target_tokens >= 0 ? fmt::format(" | tokens {} tgt {} pad {:.1f}%", p.input_tokens,
                                                       p.target_tokens, 100.0 * p.padding_fraction)
                                         : "";
  // Preference pairs: is the chosen answer winning, and by how much (TRL's rewards/accuracies and margins).
  std::string pref = p.reward_accuracy >= 0
                         ? fmt::format(" | acc {:.3f} margin {:.4f}", p.reward_accuracy, p.reward_margin)
                         : "";
  return fmt::format("step {}/{} | loss {:.4f}{}{}{}{}{} | grad_norm {:.3f} | lr {:.2e} | {:.0f} tok/s{} | eta {:.0f}s",
                     p.step, total_steps, p.loss, eval, pref, gns, batch, sft, p.grad_norm, p.lr, p.tokens_per_s, mem,
                     p.eta_s);
}

Progress::Progress(int64_t total_steps, int64_t log_period, bool live)
    : total_steps_(total_steps), log_period_(log_period), live_(live) {}

void Progress::update(const ProgressLine& p) {
  const bool keep = p.step % log_period_ == 0 || p.step == total_steps_ || p.step == 1;
  if (!live_) {
    if (keep) spdlog::info("{}", format_progress(p, total_steps_));
    return;
  }
  std::fputs(fmt::format("\r\033[K{}", format_progress(p, total_steps_)).c_str(), stdout);
  line_open_ = !keep;
  if (keep) std::fputs("\n", stdout);
  std::fflush(stdout);
}

void Progress::finish() {
  if (line_open_) std::fputs("\n", stdout);
  line_open_ = false;
  std::fflush(stdout);
}

bool stdout_is_terminal() { return isatty(fileno(stdout)) == 1; }

} // namespace shadowgrad::train
