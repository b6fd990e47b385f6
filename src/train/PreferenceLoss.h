#pragma once
// The preference objective (use_dpo) of one microbatch, normalised over the whole global batch:
//   sum over the microbatch's pairs of l_i / P  +  dpo_nll_weight x (its chosen answers' summed NLL) / N
// with P the global batch's pairs and N its chosen answer tokens, both counted over every microbatch and process
// before the first backward. Each l_i depends on its own pair only, and a pair's two sequences share a microbatch,
// so the K folded gradients sum to the gradient of the un-split batch, whatever the split.
// h = (chosen - ref chosen) - (rejected - ref rejected) over the answers' summed log-probs (TRL 1.16):
//   sigmoid  -(1-eps) log sigmoid(beta h) - eps log sigmoid(-beta h)     (eps = dpo_label_smoothing, cDPO)
//   ipo      (h - 1/(2 beta))^2, each log-prob divided by its answer's token count
//   hinge    relu(1 - beta h)
//
//   AnswerScores s = answer_scores(model, batch, device, 64, true);
//   at::Tensor objective = preference_objective(s, batch.reference, options, 1.0 / P, 1.0 / N, sums);
//   objective.backward();
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "config/ConfigEnums.h"
#include "model/Decoder.h"

namespace shadowgrad::config {
struct Config;
}
namespace shadowgrad::data {
struct PairBatch;
}

namespace shadowgrad::train {

struct PreferenceOptions {
  config::DpoLossType type = config::DpoLossType::sigmoid;
  double beta = 0.1;
  double label_smoothing = 0;
  double nll_weight = 0;
  static PreferenceOptions from_config(const config::Config& cfg);
};

// Sums over pairs (divide by `pairs` for TRL's means), and what normalises them.
struct PreferenceSums {
  double loss = 0;  // sum of l_i
  double nll = 0;   // the chosen answers' summed NLL
  double rewards_chosen = 0, rewards_rejected = 0, rewards_accuracy = 0, logps_chosen = 0, logps_rejected = 0;
  double pairs = 0, chosen_tokens = 0;

  void add(const PreferenceSums& o);
  std::vector<double> values() const;  // for one all-reduce; from_values() undoes it
  static PreferenceSums from_values(const std::vector<double>& v);
  // The objective: loss / pairs + nll_weight x nll / chosen_tokens.
  double objective(double nll_weight) const;
  // metrics.jsonl's names (rewards_margin = chosen - rejected), each a mean over pairs, `prefix`ed ("eval_").
  std::vector<std::pair<std::string, double>> metrics(const std::string& prefix) const;
};

// The model's summed log-prob of each answer of a batch, with autograd when grad mode is on.
struct AnswerScores {
  at::Tensor logps;        // [2 x pairs] double: answer 2i chosen, 2i+1 rejected of pair i
  at::Tensor lengths;      // [2 x pairs] double: answer tokens
  at::Tensor chosen_nll;   // double scalar: the chosen answers' summed NLL
  int64_t chosen_tokens = 0;
};
AnswerScores answer_scores(model::Decoder& model, const data::PairBatch& batch, c10::Device device, int64_t rows,
                           bool fused);

// The microbatch's share of the objective (above), to backward; adds its sums (detached) to `sums`.
// `reference` is the batch's [2 x pairs] reference log-probs.
at::Tensor preference_objective(const AnswerScores& scores, const at::Tensor& reference, const PreferenceOptions& o,
                                double inv_pairs, double inv_chosen_tokens, PreferenceSums& sums);

} // namespace shadowgrad::train
