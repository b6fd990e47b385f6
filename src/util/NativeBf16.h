#pragma once
// Whether a device computes bf16 natively, i.e. whether bf16 matmuls are faster than fp32 there.
//
//   if (!shadowgrad::util::cpu_bf16_support().native) ...   // .why says what was seen
//
// CPU: torch's own cpuinfo (at::cpu::get_cpu_capabilities) must report avx512_bf16 or amx_bf16. Without them
// torch takes no oneDNN path for bf16, and its fallback matmul ran ~360x slower than fp32 on an AVX2-only AMD EPYC
// (0.3 against 109 GF/s at 512x2048x2048, torch 2.14.1; docs/performance.md). Two variables override what the
// hardware says, so a host with AMX can behave as an AVX2 host would (tests, docs/setup.md):
//   SHADOWGRAD_CPU_BF16=slow|native   the trainer's own answer, whatever the CPU
//   ONEDNN_MAX_CPU_ISA=AVX2 (or any ISA below AVX512_CORE_BF16)   oneDNN may not use the bf16 units: slow
// CUDA: compute capability 8.0 (Ampere) or above.
#include <string>

namespace shadowgrad::util {

struct Bf16Support {
  bool native = false;
  std::string why;  // e.g. "this CPU has no avx512_bf16 or AMX (torch's cpuinfo)"
};

Bf16Support cpu_bf16_support();
// Device `index`'s compute capability; not native when this build has no CUDA.
Bf16Support cuda_bf16_support(int index);

// The CPU's real ISA (no override): OpenBLAS's core type depends on it (apps/ThreadEnvironment.h).
bool cpu_has_avx512_bf16();

} // namespace shadowgrad::util
