#pragma once
// SIGINT / SIGTERM during training. The first one only sets a flag: the loop finishes the current
// optimizer step, writes a checkpoint (if enabled), flushes metrics and exits with 128 + signal
// (130 for SIGINT, 143 for SIGTERM). A second one exits at once with the same code, without
// touching the checkpoint directory: the last complete checkpoint stays as it was.
//
//   StopSignals signals;                  // installs the handlers; the destructor restores the old ones
//   for (...) { train_one_step(); if (signals.requested()) break; }
namespace shadowgrad::train {

class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The signal number received, or 0.
  int requested() const;
};

// "SIGINT", "SIGTERM", else "signal N".
const char* signal_name(int signal);

} // namespace shadowgrad::train
