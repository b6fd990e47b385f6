#include "distributed/OverlappedReduce.h"

#include <algorithm>
#include <stdexcept>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "accumulate/ShadowAccumulator.h"
#include "distributed/BucketedReduce.h"

namespace shadowgrad::distributed {

OverlappedReduce::OverlappedReduce(Communicator& comm, accumulate::ShadowAccumulator& acc, int64_t bucket_bytes,
                                   int in_flight)
    : comm_(comm), acc_(acc), serial_(acc.serial()), flat_(acc.shadows()), in_flight_(std::max(1, in_flight)) {
  const int64_t total = flat_.numel();
  const int64_t per = std::max<int64_t>(1, std::min(total, bucket_elements(bucket_bytes)));
  // all_reduce_sum_bucketed's buckets, exactly: what makes the two reductions give the same bits.
  for (int64_t begin = 0; begin < total; begin += per) {
    bucket_begin_.push_back(begin);
    bucket_len_.push_back(std::min(per, total - begin));
  }
  params_in_bucket_.assign(bucket_begin_.size(), 0);
  int64_t offset = 0;
  for (const auto& shadow : acc.shadows()) {
    std::vector<int64_t> mine;
    if (shadow.numel() > 0)
      for (int64_t b = offset / per; b <= (offset + shadow.numel() - 1) / per; ++b) {
        mine.push_back(b);
        ++params_in_bucket_[size_t(b)];
      }
    buckets_of_param_.push_back(std::move(mine));
    offset += shadow.numel();
  }
  folds_now_.assign(buckets_of_param_.size(), 0);
  folds_before_.assign(buckets_of_param_.size(), -1);
  // The accumulator may outlive this object or die first (a TrainStep owns it, DataParallel owns this): the observer
  // holds only a weak handle, and the destructor touches nothing of the accumulator's.
  std::weak_ptr<OverlappedReduce*> handle = self_;
  acc_.set_fold_observer([handle](size_t i) {
    if (auto self = handle.lock()) (*self)->on_fold(i);
  });
}

OverlappedReduce::~OverlappedReduce() = default;

bool OverlappedReduce::serves(const accumulate::ShadowAccumulator& acc) const {
  return acc.serial() == serial_;
}

void OverlappedReduce::before_backward(bool last) {
  if (counting_)
    throw std::logic_error("OverlappedReduce: a backward after the one declared last, before finish(): its folds "
                           "would miss the buckets already sent");
  if (seen_backward_) folds_before_ = folds_now_;
  std::fill(folds_now_.begin(), folds_now_.end(), 0);
  counting_ = last && seen_backward_;
  seen_backward_ = true;
  if (!counting_) return;
  waiting_ = params_in_bucket_;
  started_.assign(bucket_begin_.size(), 0);
  next_ = buckets() - 1;
}

void OverlappedReduce::on_fold(size_t i) {
  ++folds_now_[i];
  if (!counting_) return;
  for (int64_t b : buckets_of_param_[i])
    if (started_[size_t(b)])
      throw std::logic_error(fmt::format(
          "overlap_gradient_reduction: parameter {} received fold {} of the last backward after its bucket {} had been "
          "sent (the backward before gave it {}): the graph changed between microbatches; set "
          "overlap_gradient_reduction=false",
          i, folds_now_[i], b, folds_before_[i]));
  // A parameter the backward before did not reach (0 folds) holds its bucket until finish(): its shadow is only
  // zeroed by ShadowAccumulator::end().
  if (folds_before_[i] <= 0 || folds_now_[i] != folds_before_[i]) return;
  for (int64_t b : buckets_of_param_[i]) --waiting_[size_t(b)];
  start_ready();
}

void OverlappedReduce::start_ready() {
  while (next_ >= 0 && waiting_[size_t(next_)] == 0) {
    start(next_);
    ++started_early_now_;
    --next_;
  }
}

void OverlappedReduce::start(int64_t bucket) {
  at::NoGradGuard no_grad;
  if (free_buffers_.empty() && int64_t(flying_.size()) >= in_flight_) retire_oldest();
  at::Tensor buffer;
  if (free_buffers_.empty()) {
    buffer = at::empty({bucket_len_.front()}, acc_.shadows().front().options().dtype(at::kFloat));
  } else {
    buffer = std::move(free_buffers_.back());
    free_buffers_.pop_back();
  }
  at::Tensor part = buffer.narrow(0, 0, bucket_len_[size_t(bucket)]);  // a prefix: contiguous
  flat_.read(bucket_begin_[size_t(bucket)], part);
  started_[size_t(bucket)] = 1;
  flying_.push_back({bucket, buffer, comm_.start_all_reduce_sum(part)});
}

void OverlappedReduce::retire_oldest() {
  at::NoGradGuard no_grad;
  InFlight f = std::move(flying_.front());
  flying_.pop_front();
  f.work.wait();
  flat_.write(bucket_begin_[size_t(f.bucket)], f.buffer.narrow(0, 0, bucket_len_[size_t(f.bucket)]));
  free_buffers_.push_back(std::move(f.buffer));
}

int64_t OverlappedReduce::finish() {
  if (!counting_) {  // nothing was started early: the first step with one microbatch
    started_.assign(bucket_begin_.size(), 0);
    next_ = buckets() - 1;
  }
  counting_ = false;
  started_early_ = started_early_now_;
  started_early_now_ = 0;
  for (; next_ >= 0; --next_)
    if (!started_[size_t(next_)]) start(next_);
  while (!flying_.empty()) retire_oldest();
  return buckets();
}

} // namespace shadowgrad::distributed
