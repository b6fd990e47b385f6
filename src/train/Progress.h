#pragma once
// Console progress. On a terminal: one live line (step/steps, loss, eval loss, tokens/s, peak memory, ETA),
// redrawn every step and kept every log_period steps. Elsewhere (CI, pipes, SLURM logs): a plain log
// line every log_period steps and never a carriage return.
#include <cstdint>
#include <string>

namespace shadowgrad::train {

struct ProgressLine {
  int64_t step = 0;  // 1-based
  double loss = 0, grad_norm = 0, lr = 0, tokens_per_s = 0, eta_s = 0;
  int64_t peak_bytes = -1;  // -1: not measured
  double eval_loss = -1;    // the latest evaluation's, shown until the next one; < 0: none yet
  double gns_tokens = -1;   // gradient noise scale in tokens; < 0 or NaN: none this step
  int64_t global_batch = 0;  // sequences in the step over all processes; 0: not shown
  // SFT rows: target and input tokens of the step and its padding fraction; target_tokens < 0: not shown.
  int64_t target_tokens = -1, input_tokens = 0;
  double padding_fraction = 0;
  // use_dpo: the step's rewards_accuracy and rewards_margin (means over its pairs); accuracy < 0: not shown.
  double reward_accuracy = -1, reward_margin = 0;
};

// The text of one progress line (no newline, no control characters).
std::string format_progress(const ProgressLine& p, int64_t total_steps);

class Progress {
 public:
  Progress(int64_t total_steps, int64_t log_period, bool live);
  void update(const ProgressLine& p);
  // Ends a live line so later output starts on a fresh line.
  void finish();

 private:
  int64_t total_steps_, log_period_;
  bool live_;
  bool line_open_ = false;
};

// True when stdout is a terminal.
bool stdout_is_terminal();

} // namespace shadowgrad::train
