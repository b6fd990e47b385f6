#pragma once
// The trainer's process environment for its two thread pools, set before they exist. LibTorch's element-wise ops,
// oneDNN's bf16 matmuls and shadowgrad's kernels run on OpenMP (libgomp); fp32 matmuls run on OpenBLAS's own
// pthreads (libopenblas0-pthread). Both libraries read their settings when they are loaded, so the trainer sets
// what is unset and re-execs itself (once: the second time everything is set). A variable the user set is kept.
//   - OPENBLAS_CORETYPE=COOPERLAKE on avx512_bf16 CPUs: OpenBLAS 0.3.21 detects them as Prescott and runs fp32
//     matmuls ~5x slower.
//   - OPENBLAS_THREAD_TIMEOUT=4: after a matmul, OpenBLAS's threads spin for 2^28 cycles by default, taking the
//     cores the next OpenMP op needs; with 4 they sleep after 2^4.
//   - OMP_WAIT_POLICY=passive, with dtype=float32 only: there OpenBLAS does the matmuls and spinning OpenMP
//     threads take its cores; in bf16, oneDNN's matmuls run on OpenMP and waking sleeping threads costs more.
// Measured in docs/performance.md ("thread pools").
// tests/ThreadEnvironment.cmake gives ctest's tests the same values up front (so their trainers start once): a
// change here belongs there too.
#include <cstdlib>

#include <unistd.h>

#include "util/NativeBf16.h"
#include "train/Signals.h"

namespace shadowgrad::apps {

// Sets the variables above that are unset; true when one was set (the caller then re-execs).
inline bool set_thread_environment(bool fp32_compute) {
  bool changed = false;
  auto set_default = [&changed](const char* name, const char* value) {
    if (std::getenv(name)) return;
    setenv(name, value, 1);
    changed = true;
  };
  if (shadowgrad::util::cpu_has_avx512_bf16()) set_default("OPENBLAS_CORETYPE", "COOPERLAKE");
  set_default("OPENBLAS_THREAD_TIMEOUT", "4");
  if (fp32_compute) set_default("OMP_WAIT_POLICY", "passive");
  return changed;
}

// Re-execs this program with the same arguments when set_thread_environment changed something; returns only if
// nothing changed or execv failed (then the run carries on with the environment it has). A stop signal received
// so far, or while the new image starts, reaches the new image (see train/Signals.h).
inline void reexec_with_thread_environment(char** argv, bool fp32_compute) {
  if (!set_thread_environment(fp32_compute)) return;
  shadowgrad::train::carry_stop_across_exec();
  execv("/proc/self/exe", argv);
  shadowgrad::train::resume_after_failed_exec();
}

} // namespace shadowgrad::apps
