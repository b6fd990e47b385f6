#pragma once
// Autograd nodes that fold a parameter's gradient into the shadow tree in the dtype the model computes
// in, so the gradient never exists in the parameter's own dtype (for bf16 compute on fp32 weights: no
// fp32 gradient at all, not even for one parameter, and no bf16 -> fp32 copy per microbatch).
//
//   at::Tensor w16 = folding_cast(state, i, w, at::kBFloat16);                  // == w.to(bf16)
//   at::Tensor rows = folding_gather(state, i, table, tokens, at::kBFloat16);  // == table.index_select(0, tokens).to(bf16)
//
// Backward adds the incoming gradient straight into shadows[i] (the gather: only the rows it read) and
// sends nothing to the parameter's AccumulateGrad. Outside an accumulation window (ShadowAccumulator::begin/end)
// they behave like the plain ops: the parameter's .grad is set as usual.
#include <cstddef>
#include <memory>

#include <ATen/core/Tensor.h>

namespace shadowgrad::accumulate {

struct ShadowState;

at::Tensor folding_cast(const std::shared_ptr<ShadowState>& state, size_t i, const at::Tensor& param,
                        c10::ScalarType dtype);
at::Tensor folding_gather(const std::shared_ptr<ShadowState>& state, size_t i, const at::Tensor& param,
                          const at::Tensor& index, c10::ScalarType dtype);

} // namespace shadowgrad::accumulate
