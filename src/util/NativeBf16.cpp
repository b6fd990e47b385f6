#include "util/NativeBf16.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <string_view>

#include <ATen/cpu/Utils.h>
#include <fmt/format.h>

#include "accumulate/CudaLibrary.h"

namespace shadowgrad::util {
namespace {

bool torch_reports(const char* capability) {
  static const auto caps = at::cpu::get_cpu_capabilities();
  const auto it = caps.find(capability);
  return it != caps.end() && it->second.isBool() && it->second.toBool();
}

std::string upper(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return char(std::toupper(c)); });
  return out;
}

// oneDNN's ISA names below the first with bf16 dot products (AVX512_CORE_BF16).
bool below_bf16_isa(const std::string& isa) {
  static constexpr std::array<std::string_view, 7> kBelow = {"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2",
                                                             "AVX512_CORE", "AVX512_CORE_VNNI"};
  return std::find(kBelow.begin(), kBelow.end(), isa) != kBelow.end();
}

} // namespace

bool cpu_has_avx512_bf16() { return torch_reports("avx512_bf16"); }

Bf16Support cpu_bf16_support() {
  if (const char* forced = std::getenv("SHADOWGRAD_CPU_BF16")) {
    const std::string value = forced;
    if (value == "native") return {true, "SHADOWGRAD_CPU_BF16=native"};
    if (value == "slow") return {false, "SHADOWGRAD_CPU_BF16=slow"};
  }
  if (const char* isa = std::getenv("ONEDNN_MAX_CPU_ISA"); isa && below_bf16_isa(upper(isa)))
    return {false, fmt::format("ONEDNN_MAX_CPU_ISA={} keeps oneDNN off the bf16 units", isa)};
  if (torch_reports("amx_bf16")) return {true, "this CPU has AMX (torch's cpuinfo)"};
  if (torch_reports("avx512_bf16")) return {true, "this CPU has avx512_bf16 (torch's cpuinfo)"};
  return {false, "this CPU has no avx512_bf16 or AMX (torch's cpuinfo)"};
}

Bf16Support cuda_bf16_support(int index) {
  // Asked for hardware=cuda only: it loads the CUDA library (and libtorch_cuda).
  const auto* cuda = accumulate::cuda_library();
  accumulate::GpuProperties props;
  if (cuda && cuda->gpu_properties(index, &props)) {
    const bool native = props.major >= 8;
    return {native, fmt::format("GPU {} ({}) has compute capability {}.{}{}", index, props.name, props.major,
                                props.minor, native ? "" : ", below 8.0")};
  }
  return {false, "no CUDA device is visible to this build"};
}

} // namespace shadowgrad::util
