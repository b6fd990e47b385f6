#pragma once
// The gradient noise scale B_simple = tr(Sigma) / |G|^2 (McCandlish et al. 2018, arXiv 1812.06162, appendix A),
// estimated online from what gradient accumulation already has: each microbatch's gradient (the small batch,
// measured while it is folded) and the accumulated, reduced gradient (the big batch). See docs/batch-size.md.
//
//   NoiseScale gns(0.95);
//   ...after the reduction of step s, with every microbatch of the global batch over all processes:
//   std::optional<NoiseScaleStep> e = gns.update(folded_sq, micro_tokens, shadow_sq, global_tokens);
//   e->gns_tokens   // B_simple in tokens: the ratio of the two EMAs
//
// The trainer divides each microbatch's loss sum by the global batch's valid tokens T, so microbatch m (b_m valid
// tokens) folds g_m = (b_m / T) G_m, where G_m is its per-token mean gradient: |G_m|^2 = folded_sq[m] (T / b_m)^2.
// The big batch is the per-token mean over all T tokens: |G_big|^2 = shadow_sq. For each microbatch the unbiased
// two-batch estimators (B_small = b_m, B_big = T) are
//   |G|^2     ~ (T |G_big|^2 - b_m |G_m|^2) / (T - b_m)
//   tr(Sigma) ~ (|G_m|^2 - |G_big|^2) / (1/b_m - 1/T)
// and the step's estimate of each is their mean over microbatches (each is unbiased, so the mean is too). The two
// are smoothed separately by EMAs; B_simple is the ratio of the EMAs (a mean of per-step ratios is biased). A split of
// the same global batch into other microbatches (K, per_device_batch_size, processes) estimates the same quantity.
#include <cstdint>
#include <optional>
#include <vector>

namespace shadowgrad::train {

// What one step adds to metrics.jsonl.
struct NoiseScaleStep {
  double grad_sq_norm_micro = 0;   // mean over microbatches of |G_m|^2 (per-token mean gradients)
  double grad_sq_norm_global = 0;  // |G_big|^2
  double gns_tokens = 0;           // EMA(tr Sigma) / EMA(|G|^2), tokens; NaN while EMA(|G|^2) <= 0
};

// The EMA state, carried in checkpoints (bitwise resume).
struct NoiseScaleState {
  double ema_grad_sq = 0;  // EMA of the |G|^2 estimates
  double ema_trace = 0;    // EMA of the tr(Sigma) estimates
  int64_t updates = 0;     // steps folded into the EMAs
};

class NoiseScale {
 public:
  explicit NoiseScale(double decay, NoiseScaleState state = {}) : decay_(decay), state_(state) {}

  // nullopt (and no EMA update) when there is no small batch: fewer than two microbatches with tokens, or any
  // input non-finite (a skipped step).
  std::optional<NoiseScaleStep> update(const std::vector<double>& folded_sq, const std::vector<int64_t>& micro_tokens,
                                       double big_sq, int64_t global_tokens);

  const NoiseScaleState& state() const { return state_; }
  void set_state(const NoiseScaleState& state) { state_ = state; }
  double gns_tokens() const;

 private:
  double decay_;
  NoiseScaleState state_;
};

} // namespace shadowgrad::train
