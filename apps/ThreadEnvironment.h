#pragma once
// The trainer's process environment for its thread pools, set before they exist. With the torch wheel, LibTorch's
// element-wise ops, MKL's fp32 matmuls, oneDNN's bf16 matmuls and shadowgrad's kernels all run on the wheel's bundled
// GNU OpenMP (torch/lib/libgomp.so.1). It reads its settings once, when it is loaded, so the trainer sets what is unset
// and re-execs itself (once: the second time everything is set). A variable the user set is kept.
//   - OMP_WAIT_POLICY=passive, every dtype: a thread that reaches the end of a parallel region sleeps at once instead
//     of spinning (libgomp spins 300000 rounds by default, ~ms). When the cores are shared (another process, several
//     trainers on one host), a spinning thread holds a core that a descheduled peer of its region needs, and every
//     small op waits a scheduler quantum: a [1, 512, 512] fp32 add_ with 2 threads at load 9-10 took 7-16 ms on
//     average with the default spin, 0.15 ms passive (docs/performance.md, "Shared cores").
//   - OPENBLAS_CORETYPE=COOPERLAKE on avx512_bf16 CPUs, OPENBLAS_THREAD_TIMEOUT=4: for a LibTorch that uses
//     OpenBLAS (Debian's); OpenBLAS 0.3.21 detects those CPUs as Prescott, and its threads spin 2^28 cycles after a
//     matmul by default.
// tests/ThreadEnvironment.cmake gives ctest's tests the same values up front (so their trainers start once): a
// change here belongs there too.
#include <cstdlib>

#include <unistd.h>

#include "util/NativeBf16.h"
#include "train/Signals.h"

namespace shadowgrad::apps {

// Sets the variables above that are unset; true when one was set (the caller then re-execs).
inline bool set_thread_environment() {
  bool changed = false;
  auto set_default = [&changed](const char* name, const char* value) {
    if (std::getenv(name)) return;
    setenv(name, value, 1);
    changed = true;
  };
  if (shadowgrad::util::cpu_has_avx512_bf16()) set_default("OPENBLAS_CORETYPE", "COOPERLAKE");
  set_default("OPENBLAS_THREAD_TIMEOUT", "4");
  set_default("OMP_WAIT_POLICY", "passive");
  return changed;
}

// Re-execs this program with the same arguments when set_thread_environment changed something; returns only if
// nothing changed or execv failed (then the run carries on with the environment it has). A stop signal received
// so far, or while the new image starts, reaches the new image (see train/Signals.h).
inline void reexec_with_thread_environment(char** argv) {
  if (!set_thread_environment()) return;
  shadowgrad::train::carry_stop_across_exec();
  execv("/proc/self/exe", argv);
  shadowgrad::train::resume_after_failed_exec();
}

} // namespace shadowgrad::apps
