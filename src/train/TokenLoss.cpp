#include "train/TokenLoss.h"

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

#include "data/Batch.h"
#include "kernels/CrossEntropy.h"
#include "model/Bf16Bits.h"

namespace shadowgrad::train {

at::Tensor token_loss_sum(const at::Tensor& logits, const at::Tensor& targets) {
  auto flat = logits.reshape({-1, logits.size(-1)}).to(at::kFloat);
  return at::cross_entropy_loss(flat, targets.reshape({-1}), {}, at::Reduction::Sum, data::kIgnoreIndex);
}

namespace {

// The ATen path, for dtypes the fused kernel does not take (float16): per chunk of `rows`, log_softmax (fp32 out)
// and exp written straight into the logits; the target entries, softmax - 1, computed in fp32 and rounded once.
at::Tensor cross_entropy_chunked(at::Tensor& logits, const at::Tensor& targets, int64_t rows, at::Tensor* per_row) {
  auto valid = targets.ne(data::kIgnoreIndex);
  const bool padded = !valid.all().item<bool>();
  auto valid_f = valid.to(at::kFloat).unsqueeze(1);
  auto safe = targets.clamp_min(0).unsqueeze(1);
  auto loss = at::zeros({}, logits.options().dtype(at::kFloat));
  for (int64_t r = 0; r < logits.size(0); r += rows) {
    const int64_t n = std::min(rows, logits.size(0) - r);
    auto chunk = logits.narrow(0, r, n);
    auto t = safe.narrow(0, r, n), v = valid_f.narrow(0, r, n);
    auto log_probs = at::log_softmax(chunk, -1, at::kFloat);  // fp32, `rows` x V only
    auto target_log_probs = log_probs.gather(1, t);
    loss.sub_(target_log_probs.mul(v).sum());
    if (per_row) per_row->narrow(0, r, n).copy_(target_log_probs.mul(v).neg().squeeze(1));
    at::exp_out(chunk, log_probs);  // softmax, rounded once into the compute dtype
    chunk.scatter_(1, t, target_log_probs.exp().sub_(1).to(chunk.scalar_type()));
    if (padded) chunk.mul_(v.to(chunk.scalar_type()));  // padding rows get no gradient
  }
  return loss;
}

// The loss summed over rows, or per row (`per_row`: [N] fp32, 0 at ignored rows); the logits become
// d loss / d logits. bf16 and fp32 on the CPU take one fused pass per row (src/kernels/CrossEntropy.h), which makes
// no fp32 copy of the logits.
at::Tensor cross_entropy_in_place(at::Tensor& logits, const at::Tensor& targets, int64_t rows, bool fused,
                                  bool per_row) {
  const bool bf16 = logits.scalar_type() == at::kBFloat16;
  if (!fused || !logits.device().is_cpu() || (!bf16 && logits.scalar_type() != at::kFloat)) {
    if (!per_row) return cross_entropy_chunked(logits, targets, rows, nullptr);
    auto each = at::zeros({logits.size(0)}, logits.options().dtype(at::kFloat));
    cross_entropy_chunked(logits, targets, rows, &each);
    return each;
  }
  RECORD_FUNCTION("shadowgrad::cross_entropy_rows", std::vector<c10::IValue>());  // a row in profiler=trace
  auto row_loss = at::empty({logits.size(0)}, logits.options().dtype(at::kFloat));
  const int64_t n = logits.size(0), vocab = logits.size(1);
  if (bf16)
    kernels::cross_entropy_rows(model::bf16_bits(logits), targets.data_ptr<int64_t>(), row_loss.data_ptr<float>(), n,
                                vocab, data::kIgnoreIndex, rows);
  else
    kernels::cross_entropy_rows(logits.data_ptr<float>(), targets.data_ptr<int64_t>(), row_loss.data_ptr<float>(), n,
                                vocab, data::kIgnoreIndex, rows);
  return per_row ? row_loss : row_loss.sum();
}

// loss = sum over valid rows of logsumexp(l) - l[target], with l = h W^T (or that per row, `per_row`).
// d loss / d l = softmax(l) - onehot(target) on valid rows, 0 on padding; it overwrites l.
struct LinearCrossEntropy : torch::autograd::Function<LinearCrossEntropy> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& weight,
                            const at::Tensor& targets, int64_t rows, bool fused, bool per_row) {
    // A frozen weight may come in its stored dtype (a LoRA run's bf16 base under fp32 compute): it is cast here and
    // again in backward, and only the stored tensor is kept, never a cast copy of the [V, E] matrix.
    auto logits = at::linear(hidden, weight.to(hidden.scalar_type()));  // [N, V], compute dtype: the only [N, V] kept
    auto loss = cross_entropy_in_place(logits, targets.contiguous(), rows, fused, per_row);
    ctx->save_for_backward({hidden, weight});
    ctx->saved_data["grad_logits"] = logits;
    return loss;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_output) {
    auto saved = ctx->get_saved_variables();
    const auto& hidden = saved[0];
    const auto& weight = saved[1];
    auto grad_logits = ctx->saved_data["grad_logits"].toTensor();
    // fp32: a scalar (e.g. 1 / global valid tokens), or one per row for the per-row loss
    // (a per-row column in the compute dtype: a 0-dim scalar keeps the dtype, a column would promote it).
    const auto g = grad_output[0].dim() == 0 ? grad_output[0]
                                             : grad_output[0].unsqueeze(1).to(grad_logits.scalar_type());
    // Scale the small [N, E] side, not the [V, E] or [N, V] one.
    auto grad_hidden = at::matmul(grad_logits, weight.to(grad_logits.scalar_type())).mul_(g);
    // A frozen output (a LoRA run's base) needs no [V, E] gradient: skip its matmul.
    auto grad_weight = ctx->needs_input_grad(1) ? at::matmul(grad_logits.t(), hidden.mul(g)) : at::Tensor();
    return {grad_hidden, grad_weight, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

} // namespace

at::Tensor linear_token_loss_sum(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                                 int64_t rows, bool fused) {
  return LinearCrossEntropy::apply(hidden.reshape({-1, hidden.size(-1)}), weight, targets.reshape({-1}),
                                   std::max<int64_t>(1, rows), fused, false);
}

at::Tensor linear_token_nll(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                            int64_t rows, bool fused) {
  return LinearCrossEntropy::apply(hidden.reshape({-1, hidden.size(-1)}), weight, targets.reshape({-1}),
                                   std::max<int64_t>(1, rows), fused, true);
}

} // namespace shadowgrad::train
