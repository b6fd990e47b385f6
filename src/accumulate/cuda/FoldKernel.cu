// The one-pass CUDA fold (FoldLaunch.h): one read of the gradient, one read and one write of the shadow, and the
// gradient's squared norm from the same registers. The per-element rule is FoldElement.h's, shared with the CPU, so
// both give the same bits; the norm's tree has a fixed shape, so it gives the same bits on every run of one GPU.
#include <stdexcept>
#include <type_traits>
#include <string>

#include <cuda_runtime.h>

#include "accumulate/FoldElement.h"
#include "accumulate/cuda/FoldLaunch.h"

namespace shadowgrad::accumulate::cuda {

namespace {

constexpr int kThreads = 256;

template <class Dst, class Src>
__global__ void __launch_bounds__(kThreads) fold_kernel(FoldLaunch f) {
  auto* dst = static_cast<typename Dst::Storage*>(f.dst);
  const auto* src = static_cast<const typename Src::Storage*>(f.src);
  const int64_t begin = int64_t(blockIdx.x) * kFoldBlock;
  const int64_t end = begin + kFoldBlock < f.n ? begin + kFoldBlock : f.n;
  float sq = 0.0f;
  unsigned long long under = 0, over = 0;
#pragma unroll 4
  for (int64_t e = begin + threadIdx.x; e < end; e += kThreads) {
    const int64_t at = f.rows ? f.rows[e / f.row_len] * f.row_len + e % f.row_len : e;
    const typename Src::Storage s = src[e];
    const float g = Src::widen(s);
    const uint32_t r = f.stochastic ? random_bits(f.key, uint64_t(at)) : 0u;
    const typename Dst::Storage old = dst[at];
    const typename Dst::Storage h = fold_element<Dst, Src>(old, s, f.overwrite, r, f.stochastic);
    dst[at] = h;
    sq = __fadd_rn(sq, __fmul_rn(g, g));  // no FMA contraction: one rule for every build
    if constexpr (std::is_same_v<Dst, Fp16Bits>) {  // the CPU counts float16 only
      if (f.loss) {
        const float sum = f.overwrite ? g : Dst::widen(old) + g;
        under += fp16_underflowed(sum, h);
        over += fp16_overflowed(sum, h);
      }
    }
  }
  if (f.loss && (under | over)) {
    atomicAdd(f.loss, under);  // integer sums: the order does not matter
    atomicAdd(f.loss + 1, over);
  }
  if (!f.partials) return;
  __shared__ float tree[kThreads];
  tree[threadIdx.x] = sq;
  __syncthreads();
  for (int width = kThreads / 2; width > 0; width /= 2) {
    if (int(threadIdx.x) < width) tree[threadIdx.x] = __fadd_rn(tree[threadIdx.x], tree[threadIdx.x + width]);
    __syncthreads();
  }
  if (threadIdx.x == 0) f.partials[blockIdx.x] = tree[0];
}

// *out += the partials in double: each thread a fixed stride, then a fixed tree.
__global__ void __launch_bounds__(kThreads) sum_partials(const float* partials, int64_t count, double* out) {
  __shared__ double tree[kThreads];
  double acc = 0.0;
  for (int64_t b = threadIdx.x; b < count; b += kThreads) acc += double(partials[b]);
  tree[threadIdx.x] = acc;
  __syncthreads();
  for (int width = kThreads / 2; width > 0; width /= 2) {
    if (int(threadIdx.x) < width) tree[threadIdx.x] += tree[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out += tree[0];
}

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string("CUDA fold: ") + what + ": " + cudaGetErrorString(status));
}

template <class Dst>
void launch_for(const FoldLaunch& f, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>(fold_blocks(f.n));
  switch (f.src_format) {
    case Format::kFloat32: fold_kernel<Dst, F32Bits><<<blocks, kThreads, 0, stream>>>(f); break;
    case Format::kBFloat16: fold_kernel<Dst, Bf16Bits><<<blocks, kThreads, 0, stream>>>(f); break;
    case Format::kFloat16: fold_kernel<Dst, Fp16Bits><<<blocks, kThreads, 0, stream>>>(f); break;
  }
}

} // namespace

void launch_fold(const FoldLaunch& f, void* stream_handle) {
  if (f.n <= 0) return;
  if (f.rows && f.row_len <= 0) throw std::invalid_argument("CUDA fold: rows mode needs row_len > 0");
  auto stream = static_cast<cudaStream_t>(stream_handle);
  switch (f.dst_format) {
    case Format::kFloat32: launch_for<F32Bits>(f, stream); break;
    case Format::kBFloat16: launch_for<Bf16Bits>(f, stream); break;
    case Format::kFloat16: launch_for<Fp16Bits>(f, stream); break;
  }
  check(cudaGetLastError(), "fold kernel launch");
  if (f.sq_out && f.partials) {
    sum_partials<<<1, kThreads, 0, stream>>>(f.partials, fold_blocks(f.n), f.sq_out);
    check(cudaGetLastError(), "norm kernel launch");
  }
}

} // namespace shadowgrad::accumulate::cuda
