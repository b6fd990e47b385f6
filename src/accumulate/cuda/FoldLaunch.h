#pragma once
// The CUDA fold's launch interface: raw device pointers and a stream, so that the kernel (FoldKernel.cu) is compiled by
// nvcc without LibTorch's headers, and the code that owns the tensors (accumulate/CudaFold.cpp) by the C++ compiler.
//
//   FoldLaunch f{shadow_ptr, Format::kBFloat16, grad_ptr, Format::kFloat32, n};
//   f.stochastic = true; f.key = rounding_key(...);      // the CPU fold's keys: the same bits for the same seed
//   f.sq_out = dev_double; f.partials = dev_floats;      // optional: += sum(grad^2), fused into the same pass
//   launch_fold(f, stream);                              // enqueued on `stream` (a cudaStream_t); nothing waits
#include <cstdint>

namespace shadowgrad::accumulate::cuda {

enum class Format : uint8_t { kFloat32, kBFloat16, kFloat16 };

// Elements per norm partial: SquaredNorm.h's kNormBlock (checked in CudaFold.cpp), one CUDA block each.
inline constexpr int64_t kFoldBlock = int64_t{1} << 16;
inline int64_t fold_blocks(int64_t n) { return (n + kFoldBlock - 1) / kFoldBlock; }

struct FoldLaunch {
  void* dst = nullptr;
  Format dst_format = Format::kFloat32;
  const void* src = nullptr;
  Format src_format = Format::kFloat32;
  int64_t n = 0;  // source elements
  // Rows mode (an embedding's gathered rows): source element e goes to dst element rows[e / row_len] * row_len +
  // e % row_len, and draws that element's random bits. Device pointer; rows must be distinct.
  const int64_t* rows = nullptr;
  int64_t row_len = 0;
  bool overwrite = false;   // the first fold of a window: dst = round(src)
  bool stochastic = false;  // bf16/fp16 destinations; fp32 sums are not rounded
  uint64_t key = 0;
  // Optional, device memory: *sq_out += sum(src^2) (fp32 squares, a fixed-order fp32 tree per kFoldBlock elements,
  // the partials added in order in double: the same bits on every run), with fold_blocks(n) floats of scratch.
  double* sq_out = nullptr;
  float* partials = nullptr;
  // Optional, device memory, float16 destinations: [0] += sums that underflowed to zero, [1] += finite sums that
  // overflowed to Inf.
  unsigned long long* loss = nullptr;
};

// Enqueues the fold on `stream`. Throws std::runtime_error naming the CUDA error if the launch fails.
void launch_fold(const FoldLaunch& f, void* stream);

} // namespace shadowgrad::accumulate::cuda
