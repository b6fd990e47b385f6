#include "train/Signals.h"

#include <csignal>
#include <cstring>

#include <unistd.h>

namespace shadowgrad::train {
namespace {

volatile std::sig_atomic_t g_requested = 0;
struct sigaction g_old_int, g_old_term;

void say(const char* text) {
  ssize_t ignored = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

// Async-signal-safe: only a flag, write(2) and _exit(2).
void on_signal(int sig) {
  if (g_requested != 0) {
    say("\nsecond signal: exiting now; the last complete checkpoint is intact\n");
    ::_exit(128 + sig);
  }
  g_requested = sig;
  say(sig == SIGINT ? "\nSIGINT: finishing the current step, then checkpointing (send again to exit at once)\n"
                    : "\nSIGTERM: finishing the current step, then checkpointing (send again to exit at once)\n");
}

} // namespace

StopSignals::StopSignals() {
  g_requested = 0;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, &g_old_int);
  sigaction(SIGTERM, &sa, &g_old_term);
}

StopSignals::~StopSignals() {
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
}

int StopSignals::requested() const { return g_requested; }

const char* signal_name(int signal) {
  if (signal == SIGINT) return "SIGINT";
  if (signal == SIGTERM) return "SIGTERM";
  return "a signal";
}

} // namespace shadowgrad::train
