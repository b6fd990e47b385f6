#include "train/PreferenceLoss.h"

#include <stdexcept>

#include <ATen/ATen.h>

#include "config/Config.h"
#include "data/PairSource.h"
#include "train/TokenLoss.h"

namespace shadowgrad::train {

PreferenceOptions PreferenceOptions::from_config(const config::Config& c) {
  return {c.dpo_loss_type, c.dpo_beta, c.dpo_label_smoothing, c.dpo_nll_weight};
}

void PreferenceSums::add(const PreferenceSums& o) {
  auto mine = values();
  const auto theirs = o.values();
  for (size_t i = 0; i < mine.size(); ++i) mine[i] += theirs[i];
  *this = from_values(mine);
}

std::vector<double> PreferenceSums::values() const {
  return {loss, nll, rewards_chosen, rewards_rejected, rewards_accuracy, logps_chosen, logps_rejected, pairs,
          chosen_tokens};
}

PreferenceSums PreferenceSums::from_values(const std::vector<double>& v) {
  if (v.size() != 9) throw std::logic_error("PreferenceSums::from_values: 9 values expected");
  return {v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]};
}

double PreferenceSums::objective(double nll_weight) const {
  const double pair_term = pairs > 0 ? loss / pairs : 0.0;
  return nll_weight > 0 && chosen_tokens > 0 ? pair_term + nll_weight * nll / chosen_tokens : pair_term;
}

std::vector<std::pair<std::string, double>> PreferenceSums::metrics(const std::string& prefix) const {
  const double n = pairs > 0 ? pairs : 1.0;
  return {{prefix + "rewards_chosen", rewards_chosen / n},
          {prefix + "rewards_rejected", rewards_rejected / n},
          {prefix + "rewards_accuracy", rewards_accuracy / n},
          {prefix + "rewards_margin", (rewards_chosen - rewards_rejected) / n},
          {prefix + "logps_chosen", logps_chosen / n},
          {prefix + "logps_rejected", logps_rejected / n}};
}

AnswerScores answer_scores(model::Decoder& model, const data::PairBatch& batch, c10::Device device, int64_t rows,
                           bool fused) {
  const data::Batch in = batch.rows.model_inputs();
  auto segments = in.segments.defined() ? in.segments.to(device) : in.segments;
  auto positions = in.positions.defined() ? in.positions.to(device) : in.positions;
  at::Tensor h = model->hidden(in.tokens.to(device), segments, positions);  // before output_weight(): ZeRO-3's gather
  at::Tensor nll = linear_token_nll(h, model->output_weight(), in.targets.to(device), rows, fused);
  const int64_t S = 2 * batch.pairs;
  // Tokens that are no answer's go to slot S, which is dropped.
  const at::Tensor slot = batch.answer.reshape({-1}).to(device);
  const at::Tensor index = at::where(slot.ge(0), slot, at::full_like(slot, S));
  const auto options = nll.options().dtype(at::kDouble);
  at::Tensor per_answer = at::zeros({S + 1}, options).index_add(0, index, nll.to(at::kDouble)).narrow(0, 0, S);
  at::Tensor lengths = at::zeros({S + 1}, options).index_add(0, index, at::ones_like(nll, options)).narrow(0, 0, S);
  AnswerScores out;
  out.logps = per_answer.neg();
  out.lengths = lengths;
  out.chosen_nll = per_answer.slice(0, 0, S, 2).sum();
  out.chosen_tokens = int64_t(lengths.slice(0, 0, S, 2).sum().item<double>());
  return out;
}

at::Tensor preference_objective(const AnswerScores& s, const at::Tensor& reference, const PreferenceOptions& o,
                                double inv_pairs, double inv_chosen_tokens, PreferenceSums& sums) {
  if (!reference.defined()) throw std::logic_error("preference_objective: the batch has no reference log-probs");
  const int64_t S = s.logps.size(0);
  const at::Tensor ref = reference.to(s.logps.device(), at::kDouble);
  const at::Tensor pc = s.logps.slice(0, 0, S, 2), pr = s.logps.slice(0, 1, S, 2);
  const at::Tensor rc = ref.slice(0, 0, S, 2), rr = ref.slice(0, 1, S, 2);
  at::Tensor losses;
  if (o.type == config::DpoLossType::ipo) {
    const at::Tensor lc = s.lengths.slice(0, 0, S, 2), lr = s.lengths.slice(0, 1, S, 2);
    const at::Tensor h = (pc / lc - rc / lc) - (pr / lr - rr / lr);
    losses = (h - 1.0 / (2.0 * o.beta)).pow(2);
  } else {
    const at::Tensor h = (pc - rc) - (pr - rr);
    if (o.type == config::DpoLossType::hinge)
      losses = at::relu(1.0 - o.beta * h);
    else
      losses = -(1.0 - o.label_smoothing) * at::log_sigmoid(o.beta * h) - o.label_smoothing * at::log_sigmoid(-o.beta * h);
  }
  at::Tensor objective = losses.sum() * inv_pairs;
  if (o.nll_weight > 0) objective = objective + s.chosen_nll * (o.nll_weight * inv_chosen_tokens);
  // Metrics from the summed log-probs (TRL's rewards), detached.
  const at::Tensor chosen_rewards = (pc - rc).detach() * o.beta, rejected_rewards = (pr - rr).detach() * o.beta;
  PreferenceSums mine;
  mine.loss = losses.detach().sum().item<double>();
  mine.nll = s.chosen_nll.detach().item<double>();
  mine.rewards_chosen = chosen_rewards.sum().item<double>();
  mine.rewards_rejected = rejected_rewards.sum().item<double>();
  mine.rewards_accuracy = chosen_rewards.gt(rejected_rewards).sum().item<double>();
  mine.logps_chosen = pc.detach().sum().item<double>();
  mine.logps_rejected = pr.detach().sum().item<double>();
  mine.pairs = double(S / 2);
  mine.chosen_tokens = double(s.chosen_tokens);
  sums.add(mine);
  return objective;
}

} // namespace shadowgrad::train
