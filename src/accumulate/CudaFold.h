#pragma once
// The fold of CUDA shadows through the one-pass kernel (cuda/FoldKernel.cu): the same element rule as the CPU fold
// (FoldElement.h), so the same bits for the same seed, with the gradient's squared norm and float16's losses tallied
// on the device. Nothing here waits for the GPU: ShadowState reads the tallies once, at the end of a window.
//
//   if (cuda_fold_built()) cuda_fold_(shadow, grad, {.overwrite = first, .key = key, .stochastic = sr}, tally);
#include <cstdint>

#include <ATen/core/Tensor.h>

namespace shadowgrad::accumulate {

// Device-side sums of one window. Grown on demand; zero them with reset() at the start of a window.
struct CudaTally {
  at::Tensor micro_sq;  // double [capacity]: slot m += the squared norm of backward m's folds
  at::Tensor loss;      // int64 [2]: float16 underflows, overflows
  at::Tensor scratch;   // float: the kernel's per-block norm partials
  void reset();
};

struct CudaFoldOptions {
  bool overwrite = false;   // the first fold of a window: dst = round(src)
  uint64_t key = 0;         // stochastic rounding's key (StochasticRounding.h)
  bool stochastic = false;
  int64_t micro = -1;       // >= 0: add the source's squared norm into tally.micro_sq[micro]
  bool count_loss = false;  // float16 destinations: count underflows and overflows into tally.loss
};

// Whether the kernel is at hand: libshadowgrad_cuda.so loads (CudaLibrary.h; the first call loads it, and with it
// libtorch_cuda) and was built with nvcc. Ask only for CUDA tensors: a CPU run never loads the CUDA libraries.
bool cuda_fold_built();
// dst (contiguous CUDA float32/bfloat16/float16) = round(dst + src), src of the same numel in any of those dtypes.
void cuda_fold_(const at::Tensor& dst, const at::Tensor& src, const CudaFoldOptions& options, CudaTally& tally);
// dst[rows[r]] = round(dst[rows[r]] + values[r]): dst [R, D], rows int64 [U] distinct, values [U, D] (round_add_rows_).
void cuda_fold_rows_(const at::Tensor& dst, const at::Tensor& rows, const at::Tensor& values,
                     const CudaFoldOptions& options, CudaTally& tally);

} // namespace shadowgrad::accumulate
