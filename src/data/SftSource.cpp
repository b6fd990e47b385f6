#include "data/SftSource.h"

#include <numeric>
#include <stdexcept>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "util/Errors.h"
#include "util/Hash.h"

namespace shadowgrad::data {

SftSource::SftSource(SftFile file, const DataOptions& o, const std::string& key)
    : file_(std::move(file)), seed_(o.seed), max_length_(o.max_length), packing_(o.packing),
      completion_only_(o.sft_train_on_completion_only) {
  if (int64_t(file_.max_token()) >= o.vocab_size)
    throw DataError(fmt::format("{}: token id {} is >= vocab_size={}; raise vocab_size to at least {} (the "
                                "tokenizer's vocabulary)",
                                file_.label(), file_.max_token(), o.vocab_size, int64_t(file_.max_token()) + 1));
  const bool drop_long = o.sft_long_examples == config::SftLongExamples::drop;
  int64_t truncated = 0, dropped_long = 0, no_target = 0, tokens = 0, targets = 0;
  for (int64_t i = 0; i < file_.examples(); ++i) {
    int64_t length = file_.length(i);
    if (length > max_length_) {
      if (drop_long) {
        ++dropped_long;
        continue;
      }
      ++truncated;
      length = max_length_;
    }
    int64_t t = length - 1;  // completion_only=false: every token but the first
    if (completion_only_) t = std::accumulate(file_.targets(i), file_.targets(i) + length, int64_t(0));
    if (t == 0) ++no_target;  // kept: the order stays the file's, and a batch of only these is skipped by the step
    kept_.push_back({i, length});
    lengths_.push_back(length);
    tokens += length;
    targets += t;
  }
  if (kept_.empty())
    throw DataError(fmt::format("{}: all of its {} examples are longer than max_target_length={} and "
                                "sft_long_examples=drop",
                                file_.label(), file_.examples(), max_length_));
  std::vector<int64_t> in_order(kept_.size());
  std::iota(in_order.begin(), in_order.end(), 0);
  eval_rows_ = pack(in_order);
  spdlog::info("{}: {} examples, {} tokens, {} targets ({}); longer than max_target_length={}: {} truncated, {} "
               "dropped (sft_long_examples={}); {} with no target (within max_target_length); packing={}: {} rows per epoch, "
               "{:.1f}% padding",
               file_.label(), kept_.size(), tokens, targets,
               completion_only_ ? "completions only" : "every token but each example's first", max_length_, truncated,
               dropped_long, drop_long ? "drop" : "truncate", no_target, packing_ ? "true" : "false",
               rows_per_first_epoch(), 100.0 * first_epoch_padding());
}

std::vector<Row> SftSource::pack(const std::vector<int64_t>& order) const {
  return pack_first_fit_decreasing(lengths_, order, max_length_, packing_ ? kPackingBuffer : 1);
}

const std::vector<Row>& SftSource::epoch(int64_t e) const {
  while (int64_t(epochs_.size()) <= e) {
    const int64_t k = int64_t(epochs_.size());
    std::vector<int64_t> order(kept_.size());
    std::iota(order.begin(), order.end(), 0);
    shuffle_by_seed(order, seed_, 2 * k);  // streams 2e and 2e+1: the epoch's example order and its row order
    std::vector<Row> rows = pack(order);
    std::vector<int64_t> row_order(rows.size());
    std::iota(row_order.begin(), row_order.end(), 0);
    shuffle_by_seed(row_order, seed_, 2 * k + 1);  // FFD emits a buffer's longest examples first
    std::vector<Row> shuffled;
    shuffled.reserve(rows.size());
    for (int64_t r : row_order) shuffled.push_back(std::move(rows[size_t(r)]));
    epoch_start_.push_back(epochs_.empty() ? 0 : epoch_start_.back() + int64_t(epochs_.back().size()));
    epochs_.push_back(std::move(shuffled));
  }
  return epochs_[size_t(e)];
}

int64_t SftSource::rows_per_first_epoch() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return int64_t(epoch(0).size());
}

int64_t SftSource::examples_in_epochs(int64_t epochs) const {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t rows = 0;
  for (int64_t e = 0; e < epochs; ++e) rows += int64_t(epoch(e).size());
  return rows;
}

double SftSource::first_epoch_padding() const {
  const int64_t rows = rows_per_first_epoch();
  const int64_t used = std::accumulate(lengths_.begin(), lengths_.end(), int64_t(0));
  return 1.0 - double(used) / double(rows * max_length_);
}

Batch SftSource::examples(int64_t step, int64_t first, int64_t count) const {
  // Only ExampleOrder::sequences (key (0, row)): the per-step order predates this source, so no run can ask for it.
  if (step != 0) throw std::logic_error("SftSource: rows are numbered by the run's cumulative row count only");
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<const Row*> rows;
  int64_t e = 0;  // rows are read in increasing order: the epoch only moves forward
  auto end_of = [this](int64_t k) {
    const auto n = int64_t(epoch(k).size());  // builds epoch k first, and with it epoch_start_[k]
    return epoch_start_[size_t(k)] + n;
  };
  for (int64_t j = first; j < first + count; ++j) {
    while (j >= end_of(e)) ++e;
    rows.push_back(&epochs_[size_t(e)][size_t(j - epoch_start_[size_t(e)])]);
  }
  return build(rows);
}

Batch SftSource::eval_examples(int64_t first, int64_t count) const {
  static const Row empty;
  std::vector<const Row*> rows;
  for (int64_t j = first; j < first + count; ++j) rows.push_back(j < eval_capacity() ? &eval_rows_[size_t(j)] : &empty);
  return build(rows);
}

Batch SftSource::build(const std::vector<const Row*>& rows) const {
  const int64_t N = int64_t(rows.size()), T = max_length_;
  Batch b;
  b.tokens = at::zeros({N, T}, at::kLong);
  b.targets = at::full({N, T}, kIgnoreIndex, at::kLong);
  b.segments = at::zeros({N, T}, at::kLong);
  b.positions = at::zeros({N, T}, at::kLong);
  auto* tok = b.tokens.data_ptr<int64_t>();
  auto* tgt = b.targets.data_ptr<int64_t>();
  auto* seg = b.segments.data_ptr<int64_t>();
  auto* pos = b.positions.data_ptr<int64_t>();
  for (int64_t r = 0; r < N; ++r) {
    int64_t at = r * T, segment = 0;
    for (int64_t k : *rows[size_t(r)]) {
      const Example& x = kept_[size_t(k)];
      const uint32_t* ids = file_.tokens(x.index);
      const uint8_t* flag = file_.targets(x.index);
      ++segment;
      for (int64_t t = 0; t < x.length; ++t, ++at) {
        tok[at] = ids[t];
        seg[at] = segment;
        pos[at] = t;
        // The shift, inside the example: position t predicts token t+1 if that token is a target.
        if (t + 1 < x.length && (!completion_only_ || flag[t + 1])) tgt[at] = ids[t + 1];
      }
    }
  }
  return b;
}

} // namespace shadowgrad::data
