#pragma once
// Sum of token cross-entropies over the valid (non-padding) targets, in fp32.
// The step divides it by the valid tokens of the whole global batch, never by a microbatch's own count.
//
//   at::Tensor h = model->hidden(tokens);   // first, in its own statement: ZeRO-3 gathers the output's weight there
//   at::Tensor loss = linear_token_loss_sum(h, model->output_weight(), targets);
//   (loss / global_valid_tokens).backward();
#include <ATen/core/Tensor.h>

namespace shadowgrad::train {

// logits [N, T, V] (any float dtype), targets [N, T] with data::kIgnoreIndex at padding -> fp32 scalar.
at::Tensor token_loss_sum(const at::Tensor& logits, const at::Tensor& targets);

// The same loss from the final hidden states [N, T, E] and the output projection weight [V, E], both in the
// compute dtype (a frozen weight may be in another: it is cast per use, and only the stored tensor is saved for
// backward, as model::frozen_linear does): logits = hidden @ weight^T. Equal to token_loss_sum(at::linear(hidden, weight), targets), but
// the fp32 [tokens x V] log-softmax is never materialised: the logits (compute dtype) are turned into their
// own gradient in place during the forward pass, by a fused pass per row in fp32 math (`fused`; `rows` per thread
// task), or by ATen's log_softmax and exp `rows` tokens at a time (not `fused`, and for float16); backward() is
// then two matmuls. Saves the fp32 logits, log-probabilities and their gradient (3 x 4 x tokens x V bytes).
at::Tensor linear_token_loss_sum(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                                 int64_t rows = 64, bool fused = true);

// The same per token: [N x T] fp32 cross-entropies, 0 at ignored targets; its backward takes one gradient per token.
// The preference loss sums them per answer (PreferenceLoss.h).
at::Tensor linear_token_nll(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                            int64_t rows = 64, bool fused = true);

} // namespace shadowgrad::train
