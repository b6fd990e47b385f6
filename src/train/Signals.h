#pragma once
// SIGINT / SIGTERM. The first one only sets a flag: the loop finishes the current optimizer step, writes a
// checkpoint (if enabled), flushes metrics and exits with 128 + that signal (130 for SIGINT, 143 for SIGTERM).
//
// A burst is one request. Ctrl-C under a launcher delivers two signals within milliseconds: SIGINT from the terminal
// to the whole process group, and SIGTERM forwarded by scripts/launch.sh or torchrun's agent. Every further signal
// within kStopBurstWindowSeconds of the first is therefore the same request (said on stderr, otherwise ignored). Only
// a signal after that window exits at once (_exit(128 + signal)), without touching the checkpoint directory: the
// last complete checkpoint stays as it was.
//
// The trainer installs the handlers first thing in main, so that a signal during start-up is kept (the loop stops
// before its first step), and so that a SIGINT its parent set to ignored (a background job of a script, as in
// scripts/sweep.sh or launch.sh) is honoured:
//
//   int main(...) { shadowgrad::train::install_stop_handlers(); ... }
//   StopSignals signals;                  // in the loop; installs the handlers if main did not, restores them after
//   for (...) { train_one_step(); if (signals.requested()) break; }
#include <string>

namespace shadowgrad::train {

// Further signals within this many seconds of the first are the same stop request. 2 s: a terminal's SIGINT and a
// launcher's forwarded SIGTERM arrive within milliseconds of each other, and a person pressing Ctrl-C again to
// force an exit waits longer than that.
constexpr double kStopBurstWindowSeconds = 2.0;

// Installs the SIGINT / SIGTERM handlers for the rest of the process, over any inherited disposition (SIG_IGN
// included), and unblocks both signals (a request carried over an exec arrives then). Idempotent.
void install_stop_handlers();

// Before execv of this program: blocks SIGINT / SIGTERM, so that none is lost (or kills the process) while the new
// image starts, and re-raises a request already received, so that it arrives in the new image as a pending signal.
// If execv returns, call resume_after_failed_exec().
void carry_stop_across_exec();
void resume_after_failed_exec();

// The first stop signal received since the handlers were installed, or 0.
int stop_requested();

// For modes that do not train (the trainer's --memory-report): default dispositions again, so a signal ends them.
void uninstall_stop_handlers();

class StopSignals {
 public:
  // Installs the handlers unless install_stop_handlers() already has; then a request received before is kept.
  StopSignals();
  // Restores the previous handlers if this object installed them.
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The first stop signal received, or 0.
  int requested() const;

 private:
  bool installed_here_ = false;
};

// Stop signals received since the handlers were installed, a burst's included (for the test hold below).
int stop_signals_received();

// A test seam, deliberately not a config key (users never need it; docs/reliability.md): with the environment
// variable SHADOWGRAD_TEST_HOLD=POINT[:N], the trainer, on reaching POINT, writes the line
//   test hold: at POINT, waiting for N stop signal(s)
// to stderr and waits there until it has received N stop signals in all (N = 1 if omitted); then it goes on. A test
// that signals a trainer waits for that line, so the signal lands at a known point, never racing a step. POINTs:
//   start-up  main, right after install_stop_handlers()
//   step-S    before step S (1-based): after step S-1's stop check, before step S's first microbatch; a signal
//             received there stops the run after step S, with a checkpoint at step S
// Anywhere else the call costs a string compare. After 600 s without its signals the hold throws.
//
//   hold_for_test("start-up");
//   for (s ...) { hold_for_test(fmt::format("step-{}", s + 1)); train_one_step(); ... }
void hold_for_test(const std::string& point);

// "SIGINT", "SIGTERM", else "a signal".
const char* signal_name(int signal);

} // namespace shadowgrad::train
