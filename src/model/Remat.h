#pragma once
// Rematerialisation (activation checkpointing) for LibTorch 1.13, which has no C++ checkpoint()
// (pytorch/pytorch#52744). A segment run through rematerialise() keeps only its inputs for backward; its
// backward re-runs the segment with grad on and back-propagates through that fresh graph (a nested,
// reentrant backward, as PyTorch's reentrant torch.utils.checkpoint does).
//
//   at::Tensor y = rematerialise({x}, [&](const std::vector<at::Tensor>& in) { return layer(in[0]); });
//
// Gradients of tensors the segment reads from outside (weights, their cached casts) flow through the nested
// backward to their own autograd nodes: AccumulateGrad post-hooks and folding casts fire there, in the same
// order as without remat. The segment must be deterministic (no RNG: this model has no dropout), and must
// not modify its inputs in place. Under no_grad, or with nothing requiring grad, it is a plain call.
#include <functional>
#include <vector>

#include <ATen/core/Tensor.h>

namespace shadowgrad::model {

using Segment = std::function<at::Tensor(const std::vector<at::Tensor>& inputs)>;

at::Tensor rematerialise(const std::vector<at::Tensor>& inputs, Segment segment);

} // namespace shadowgrad::model
