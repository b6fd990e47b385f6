#include "data/PairSource.h"

#include <numeric>
#include <stdexcept>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "data/Packing.h"
#include "util/Errors.h"

namespace shadowgrad::data {

PairSource::PairSource(PairFile file, const DataOptions& o, const std::string& key)
    : file_(std::move(file)), seed_(o.seed), max_length_(o.max_length), packing_(o.packing) {
  if (int64_t(file_.max_token()) >= o.vocab_size)
    throw DataError(fmt::format("{}: token id {} is >= vocab_size={}; raise vocab_size to at least {} (the "
                                "tokenizer's vocabulary), or give load_parameters_path=<the model the pairs were "
                                "tokenized for>",
                                file_.label(), file_.max_token(), o.vocab_size, int64_t(file_.max_token()) + 1));
  const bool drop_long = o.sft_long_examples == config::SftLongExamples::drop;
  int64_t truncated = 0, dropped_long = 0, no_room = 0, identical = 0, tokens = 0;
  for (int64_t i = 0; i < file_.pairs(); ++i) {
    const TokenSpan p = file_.prompt(i), c = file_.answer(i, Answer::chosen), r = file_.answer(i, Answer::rejected);
    if (c.length == r.length && std::equal(c.ids, c.ids + c.length, r.ids)) ++identical;
    const bool long_pair = p.length + std::max(c.length, r.length) > max_length_;
    if (long_pair && drop_long) {
      ++dropped_long;
      continue;
    }
    if (p.length >= max_length_) {  // not one answer token would be left
      ++no_room;
      continue;
    }
    truncated += long_pair;
    const int64_t room = max_length_ - p.length;
    kept_.push_back({i, p.length, std::min(c.length, room), std::min(r.length, room)});
    tokens += 2 * p.length + kept_.back().chosen + kept_.back().rejected;
  }
  if (kept_.empty())
    throw DataError(fmt::format("{}: none of its {} pairs fits max_target_length={} (a prompt must leave room for an "
                                "answer token; sft_long_examples={}); raise max_target_length",
                                file_.label(), file_.pairs(), max_length_, drop_long ? "drop" : "truncate"));
  spdlog::info("{}: {} pairs kept of {}, {} tokens as sequences; longer than max_target_length={}: {} truncated, {} "
               "dropped (sft_long_examples={}), {} dropped with no room for an answer; {} with identical answers (no "
               "gradient); packing={}",
               file_.label(), kept_.size(), file_.pairs(), tokens, max_length_, truncated, dropped_long,
               drop_long ? "drop" : "truncate", no_room, identical, packing_ ? "true" : "false");
}

const std::vector<int64_t>& PairSource::epoch(int64_t e) const {
  while (int64_t(epochs_.size()) <= e) {
    std::vector<int64_t> order(kept_.size());
    std::iota(order.begin(), order.end(), 0);
    shuffle_by_seed(order, seed_, int64_t(epochs_.size()));
    epochs_.push_back(std::move(order));
  }
  return epochs_[size_t(e)];
}

PairBatch PairSource::pairs(int64_t first, int64_t count) const {
  std::vector<int64_t> kept;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto n = int64_t(kept_.size());
    for (int64_t j = first; j < first + count; ++j) kept.push_back(epoch(j / n)[size_t(j % n)]);
  }
  return build(kept);
}

PairBatch PairSource::pairs_in_file_order(int64_t first, int64_t count) const {
  std::vector<int64_t> kept;
  for (int64_t j = std::max<int64_t>(first, 0); j < std::min(first + count, pairs_kept()); ++j) kept.push_back(j);
  return build(kept);
}

Batch PairSource::examples(int64_t step, int64_t first, int64_t count) const {
  if (step != 0) throw std::logic_error("PairSource: pairs are numbered by the run's cumulative pair count only");
  return pairs(first, count).rows;
}

Batch PairSource::eval_examples(int64_t first, int64_t count) const { return pairs_in_file_order(first, count).rows; }

void PairSource::set_reference(std::vector<double> logps) {
  if (int64_t(logps.size()) != 2 * pairs_kept())
    throw std::logic_error(fmt::format("PairSource::set_reference: {} values for {} pairs", logps.size(), pairs_kept()));
  reference_ = std::move(logps);
}

PairBatch PairSource::build(const std::vector<int64_t>& kept) const {
  // Sequence s of the batch is answer s: pair s/2's chosen (even) or rejected (odd) answer after its prompt.
  const auto S = int64_t(2 * kept.size());
  std::vector<int64_t> lengths(static_cast<size_t>(S));
  for (int64_t s = 0; s < S; ++s) {
    const Kept& k = kept_[size_t(kept[size_t(s / 2)])];
    lengths[size_t(s)] = k.prompt + (s % 2 == 0 ? k.chosen : k.rejected);
  }
  std::vector<int64_t> order(static_cast<size_t>(S));
  std::iota(order.begin(), order.end(), 0);
  // Unpacked: a row per sequence, in order (a buffer of 1 never reorders).
  const std::vector<Row> rows = pack_first_fit_decreasing(lengths, order, max_length_, packing_ ? std::max<int64_t>(S, 1) : 1);
  const int64_t N = int64_t(rows.size()), T = max_length_;
  PairBatch out;
  out.pairs = int64_t(kept.size());
  out.kept = kept;
  Batch& b = out.rows;
  b.tokens = at::zeros({N, T}, at::kLong);
  b.targets = at::full({N, T}, kIgnoreIndex, at::kLong);
  b.segments = at::zeros({N, T}, at::kLong);
  b.positions = at::zeros({N, T}, at::kLong);
  out.answer = at::full({N, T}, -1, at::kLong);
  auto* tok = b.tokens.data_ptr<int64_t>();
  auto* tgt = b.targets.data_ptr<int64_t>();
  auto* seg = b.segments.data_ptr<int64_t>();
  auto* pos = b.positions.data_ptr<int64_t>();
  auto* ans = out.answer.data_ptr<int64_t>();
  for (int64_t r = 0; r < N; ++r) {
    int64_t at = r * T, segment = 0;
    for (int64_t s : rows[size_t(r)]) {
      const Kept& k = kept_[size_t(kept[size_t(s / 2)])];
      const TokenSpan p = file_.prompt(k.index);
      const TokenSpan a = file_.answer(k.index, s % 2 == 0 ? Answer::chosen : Answer::rejected);
      const int64_t used = s % 2 == 0 ? k.chosen : k.rejected;
      ++segment;
      for (int64_t t = 0; t < k.prompt + used; ++t, ++at) {
        tok[at] = t < k.prompt ? p.ids[t] : a.ids[t - k.prompt];
        seg[at] = segment;
        pos[at] = t;
        // Position t predicts token t+1: a target when that token is an answer token.
        if (t + 1 >= k.prompt && t + 1 < k.prompt + used) {
          tgt[at] = a.ids[t + 1 - k.prompt];
          ans[at] = s;
        }
      }
    }
  }
  if (!reference_.empty()) {
    out.reference = at::empty({S}, at::kDouble);
    auto* ref = out.reference.data_ptr<double>();
    for (int64_t s = 0; s < S; ++s) ref[s] = reference_[size_t(2 * kept[size_t(s / 2)] + s % 2)];
  }
  return out;
}

} // namespace shadowgrad::data
