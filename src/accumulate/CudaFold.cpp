#include "accumulate/CudaFold.h"

#include <stdexcept>
#include <string>

#include <ATen/ATen.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "accumulate/SquaredNorm.h"
#include "accumulate/CudaLibrary.h"
#include "accumulate/cuda/FoldLaunch.h"

namespace shadowgrad::accumulate {

static_assert(cuda::kFoldBlock == kNormBlock, "the CUDA fold's norm partials use SquaredNorm.h's blocks");

void CudaTally::reset() {
  if (micro_sq.defined()) micro_sq.zero_();
  if (loss.defined()) loss.zero_();
}

namespace {

// The kernel's launcher in libshadowgrad_cuda.so (loaded on the first call), or null.
auto kernel() {
  const CudaLibrary* library = cuda_library();
  return library ? library->launch_fold : nullptr;
}

cuda::Format format_of(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return cuda::Format::kFloat32;
    case at::kBFloat16: return cuda::Format::kBFloat16;
    case at::kHalf: return cuda::Format::kFloat16;
    default:
      throw std::invalid_argument(std::string("CUDA fold: float32, bfloat16 or float16 tensors only, not ") +
                                  c10::toString(t.scalar_type()));
  }
}

void* current_stream(const at::Tensor& t) {
  return c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(t.device()).native_handle();
}

void launch(const at::Tensor& dst, const at::Tensor& src, const at::Tensor& rows, int64_t row_len,
            const CudaFoldOptions& o, CudaTally& tally) {
  if (!dst.is_cuda() || !dst.is_contiguous() || src.device() != dst.device())
    throw std::invalid_argument("CUDA fold: the shadow must be a contiguous CUDA tensor, the gradient on its device");
  const at::Tensor s = src.is_contiguous() && !src.is_neg() ? src : src.contiguous().resolve_neg();
  cuda::FoldLaunch f;
  f.dst = dst.data_ptr();
  f.dst_format = format_of(dst);
  f.src = s.data_ptr();
  f.src_format = format_of(s);
  f.n = s.numel();
  if (rows.defined()) {
    f.rows = rows.data_ptr<int64_t>();
    f.row_len = row_len;
  }
  f.overwrite = o.overwrite;
  f.stochastic = o.stochastic;
  f.key = o.key;
  const auto on_device = at::TensorOptions(dst.device());
  if (o.micro >= 0) {
    if (!tally.micro_sq.defined() || tally.micro_sq.numel() <= o.micro) {
      at::Tensor grown = at::zeros({std::max<int64_t>(64, 2 * (o.micro + 1))}, on_device.dtype(at::kDouble));
      if (tally.micro_sq.defined()) grown.narrow(0, 0, tally.micro_sq.numel()).copy_(tally.micro_sq);
      tally.micro_sq = grown;
    }
    const int64_t blocks = cuda::fold_blocks(f.n);
    if (!tally.scratch.defined() || tally.scratch.numel() < blocks)
      tally.scratch = at::empty({blocks}, on_device.dtype(at::kFloat));
    f.sq_out = tally.micro_sq.data_ptr<double>() + o.micro;
    f.partials = tally.scratch.data_ptr<float>();
  }
  if (o.count_loss) {
    if (!tally.loss.defined()) tally.loss = at::zeros({2}, on_device.dtype(at::kLong));
    f.loss = reinterpret_cast<unsigned long long*>(tally.loss.data_ptr<int64_t>());
  }
  const auto launch_fold = kernel();
  if (!launch_fold)
    throw std::logic_error("CUDA fold: no CUDA fold kernel (" +
                           (cuda_library() ? std::string("libshadowgrad_cuda.so was built without nvcc")
                                           : cuda_library_error()) +
                           ")");
  launch_fold(f, current_stream(dst));
}

} // namespace

bool cuda_fold_built() { return kernel() != nullptr; }

void cuda_fold_(const at::Tensor& dst, const at::Tensor& src, const CudaFoldOptions& options, CudaTally& tally) {
  if (src.numel() != dst.numel())
    throw std::invalid_argument("CUDA fold: " + std::to_string(src.numel()) + " gradient elements for a shadow of " +
                                std::to_string(dst.numel()));
  launch(dst, src, {}, 0, options, tally);
}

void cuda_fold_rows_(const at::Tensor& dst, const at::Tensor& rows, const at::Tensor& values,
                     const CudaFoldOptions& options, CudaTally& tally) {
  if (dst.dim() != 2 || rows.scalar_type() != at::kLong || values.dim() != 2 || values.size(0) != rows.numel() ||
      values.size(1) != dst.size(1))
    throw std::invalid_argument("CUDA fold: rows need dst [R, D], rows int64 [U] and values [U, D]");
  launch(dst, values, rows.contiguous(), dst.size(1), options, tally);
}

} // namespace shadowgrad::accumulate
