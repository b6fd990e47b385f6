// How the decoder's weights reach the compute dtype: cast per use, or once per step (hoist_weight_cast) through the
// weight cache, for trained weights (compute()) and a frozen base (frozen()).
#include <algorithm>
#include <functional>

#include <ATen/ATen.h>

#include "model/Decoder.h"

namespace shadowgrad::model {

torch::Tensor DecoderImpl::compute(const torch::Tensor& weight) const {
  if (weight.scalar_type() == options_.compute_dtype) return weight;
  // Hoisting caches the cast of a parameter (a leaf), built with grad enabled so that every
  // microbatch's graph shares its cast node: each backward delivers its own gradient through it, as
  // separate casts would. Under no_grad, or for non-leaves, cast afresh.
  if (!options_.hoist_weight_cast || !weight.is_leaf() || !weight.requires_grad()) return cast(weight);
  return cached(weight, [this](const torch::Tensor& w) { return cast(w); });
}

torch::Tensor DecoderImpl::frozen(const torch::Tensor& weight) const {
  // Only a narrowing cast is cached (an fp32 base under bf16 compute: 2 bytes a parameter more for the step, as a
  // trained weight's hoisted cast): a bf16 base under fp32 compute would be held again in 4 bytes, so the frozen
  // nodes cast it per use instead, forward and backward.
  if (!weight.defined() || weight.scalar_type() == options_.compute_dtype || !options_.hoist_weight_cast ||
      weight.requires_grad() || int64_t(c10::elementSize(options_.compute_dtype)) >= int64_t(weight.element_size()))
    return weight;
  return cached(weight, [this](const torch::Tensor& w) { return w.to(options_.compute_dtype); });
}

torch::Tensor DecoderImpl::cached(const torch::Tensor& weight,
                                  const std::function<torch::Tensor(const torch::Tensor&)>& make) const {
  if (!at::GradMode::is_enabled()) {
    // A rematerialised block's forward runs under no_grad: it may read a valid cached cast, but never fills one.
    auto it = weight_cache_.find(weight.unsafeGetTensorImpl());
    return it != weight_cache_.end() && it->second.version == weight._version() ? it->second.cast : make(weight);
  }
  CachedCast& entry = weight_cache_[weight.unsafeGetTensorImpl()];
  if (!entry.cast.defined() || entry.version != weight._version()) {
    entry = {make(weight), weight._version()};
    int64_t bytes = 0;
    for (const auto& [impl, cached] : weight_cache_) bytes += cached.cast.numel() * int64_t(cached.cast.element_size());
    weight_cache_high_ = std::max(weight_cache_high_, bytes);
  }
  return entry.cast;
}

torch::Tensor DecoderImpl::cast(const torch::Tensor& weight) const {
  return casts_.cast && weight.is_leaf() && weight.requires_grad() ? casts_.cast(weight, options_.compute_dtype)
                                         : weight.to(options_.compute_dtype);
}

} // namespace shadowgrad::model
