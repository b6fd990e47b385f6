#include "train/Signals.h"

#include <atomic>
#include <chrono>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <cstdlib>
#include <ctime>
#include <stdexcept>
#include <thread>

#include <signal.h>
#include <unistd.h>

namespace shadowgrad::train {
namespace {

// Lock-free atomics: safe to touch from a signal handler.
std::atomic<int> g_first_signal{0};
std::atomic<int64_t> g_first_ns{0};
std::atomic<bool> g_installed{false};
std::atomic<int> g_signals{0};  // stop signals received, a burst's included
std::atomic<int> g_reraised{0};  // the request carry_stop_across_exec re-raised
struct sigaction g_old_int, g_old_term;

static_assert(std::atomic<int64_t>::is_always_lock_free && std::atomic<int>::is_always_lock_free);

int64_t monotonic_ns() {  // clock_gettime is async-signal-safe
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void say(const char* text) {
  ssize_t ignored = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

// Async-signal-safe: atomics, clock_gettime, write(2) and _exit(2). Both signals are masked while it runs, so a
// burst is handled one signal at a time.
void on_signal(int sig) {
  const int saved_errno = errno;
  const int64_t now = monotonic_ns();
  g_signals.fetch_add(1);
  if (g_first_signal.load() == 0) {
    g_first_ns.store(now);
    g_first_signal.store(sig);
    say(sig == SIGINT ? "\nSIGINT: finishing the current step, then checkpointing (another signal 2 s or more later "
                        "exits at once)\n"
                      : "\nSIGTERM: finishing the current step, then checkpointing (another signal 2 s or more later "
                        "exits at once)\n");
  } else if (double(now - g_first_ns.load()) < kStopBurstWindowSeconds * 1e9) {
    say(sig == SIGINT ? "SIGINT within 2 s of the first signal: the same stop request\n"
                      : "SIGTERM within 2 s of the first signal: the same stop request\n");
  } else {
    say("\nanother signal: exiting now; the last complete checkpoint is intact\n");
    ::_exit(128 + sig);
  }
  errno = saved_errno;
}

sigset_t stop_signal_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

void install(struct sigaction* old_int, struct sigaction* old_term) {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sa.sa_mask = stop_signal_set();
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, old_int);
  sigaction(SIGTERM, &sa, old_term);
  const sigset_t set = stop_signal_set();
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  g_installed.store(true);
}

} // namespace

void install_stop_handlers() {
  if (!g_installed.load()) install(nullptr, nullptr);
}

void carry_stop_across_exec() {
  const sigset_t set = stop_signal_set();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  if (const int sig = g_first_signal.load()) {  // pending while blocked; execve keeps it pending
    g_reraised.store(sig);
    ::raise(sig);
  }
}

void resume_after_failed_exec() {
  const sigset_t set = stop_signal_set();
  const timespec now{0, 0};
  // The re-raised request is already recorded in this image; one that arrived while blocked is handled now.
  for (int sig; (sig = sigtimedwait(&set, nullptr, &now)) > 0;)
    if (sig != g_reraised.exchange(0)) on_signal(sig);
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
}

StopSignals::StopSignals() {
  if (g_installed.load()) return;
  g_first_signal.store(0);
  g_signals.store(0);
  install(&g_old_int, &g_old_term);
  installed_here_ = true;
}

StopSignals::~StopSignals() {
  if (!installed_here_) return;
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
  g_installed.store(false);
}

int stop_requested() { return g_first_signal.load(); }

void uninstall_stop_handlers() {
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  g_installed.store(false);
}

int StopSignals::requested() const { return stop_requested(); }

int stop_signals_received() { return g_signals.load(); }

void hold_for_test(const std::string& point) {
  static const std::string spec = [] {
    const char* env = std::getenv("SHADOWGRAD_TEST_HOLD");
    return std::string(env ? env : "");
  }();
  if (spec.empty() || spec.compare(0, point.size(), point) != 0) return;
  const std::string rest = spec.substr(point.size());
  if (!rest.empty() && rest[0] != ':') return;  // step-1 is not step-12
  const int wanted = rest.empty() ? 1 : std::atoi(rest.c_str() + 1);
  say(("test hold: at " + point + ", waiting for " + std::to_string(wanted) + " stop signal(s)\n").c_str());
  const int64_t deadline = monotonic_ns() + int64_t(600) * 1000000000;
  while (stop_signals_received() < wanted) {
    if (monotonic_ns() > deadline)
      throw std::runtime_error("SHADOWGRAD_TEST_HOLD=" + spec + ": no " + std::to_string(wanted) +
                               " stop signal(s) within 600 s at " + point);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

const char* signal_name(int signal) {
  if (signal == SIGINT) return "SIGINT";
  if (signal == SIGTERM) return "SIGTERM";
  return "a signal";
}

} // namespace shadowgrad::train
