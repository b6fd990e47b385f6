#include "distributed/ShardedFold.h"

#include <algorithm>
#include <stdexcept>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "accumulate/ShadowAccumulator.h"
#include "distributed/BucketedReduce.h"

namespace shadowgrad::distributed {

std::vector<accumulate::ShadowRange> shadow_ranges(const ShardPlan& plan) {
  std::vector<accumulate::ShadowRange> out;
  for (const auto& p : plan.pieces()) out.push_back({p.offset, p.numel});
  return out;
}

ShardedFold::ShardedFold(Communicator& comm, accumulate::ShadowAccumulator& acc, ShardPlan plan, int64_t bucket_bytes,
                         bool overlap)
    : comm_(comm), acc_(acc), serial_(acc.serial()), plan_(std::move(plan)), overlap_(overlap) {
  const auto& params = acc.params();
  if (params.size() != plan_.pieces().size())
    throw std::invalid_argument("ShardedFold: the plan is not over the accumulator's parameters");
  const int64_t per = bucket_elements(bucket_bytes);
  int64_t flat = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const int64_t n = params[i].numel();
    // A new bucket unless this parameter fits in the open one.
    if (bucket_first_param_.empty() || bucket_len_.back() + n > per) {
      bucket_first_param_.push_back(int64_t(i));
      bucket_end_param_.push_back(int64_t(i));
      bucket_begin_.push_back(flat);
      bucket_len_.push_back(0);
    }
    bucket_end_param_.back() = int64_t(i) + 1;
    bucket_len_.back() += n;
    bucket_of_.push_back(int64_t(bucket_first_param_.size()) - 1);
    first_.push_back(flat);
    flat += n;
  }
  arrived_.assign(params.size(), 0);
  expected_.assign(params.size(), -1);
  buffers_.resize(bucket_first_param_.size());
  sent_.assign(bucket_first_param_.size(), 0);
  next_ = buckets() - 1;
  // The sink outlives neither side silently: this object may go before the accumulator (a new DataParallel), or
  // after it (the accumulator's TrainStep first): so the sink holds a handle, emptied here, and never touches acc_.
  acc_.set_fold_sink([self = self_](size_t param, const at::Tensor& grad, bool fresh) {
    if (!*self) throw std::logic_error("ShardedFold: a gradient arrived after the sharded fold was destroyed");
    (*self)->receive(param, grad, fresh);
  });
}

ShardedFold::~ShardedFold() { *self_ = nullptr; }

bool ShardedFold::serves(const accumulate::ShadowAccumulator& acc) const { return acc.serial() == serial_; }

void ShardedFold::receive(size_t param, const at::Tensor& grad, bool fresh) {
  at::NoGradGuard no_grad;
  if (!in_backward_) throw std::logic_error("ShardedFold: a gradient arrived outside before_backward()/finish()");
  const int64_t b = bucket_of_[param];
  if (sent_[size_t(b)])
    throw std::logic_error(fmt::format("ShardedFold: a gradient of parameter {} arrived after its bucket {} was reduced "
                                       "(more gradients in this backward than in the one before)",
                                       param, b));
  at::Tensor& buffer = buffers_[size_t(b)];
  // A parameter alone in its bucket whose dense gradient was made for the sink (the embedding's rows): that tensor
  // becomes the bucket, so the largest gradient is not held twice.
  if (!buffer.defined() && fresh && grad.scalar_type() == at::kFloat && grad.is_contiguous() &&
      grad.numel() == bucket_len_[size_t(b)]) {
    buffer = grad.view({-1});
  } else {
    if (!buffer.defined()) buffer = at::zeros({bucket_len_[size_t(b)]}, grad.options().dtype(at::kFloat));
    buffer.narrow(0, first_[param] - bucket_begin_[size_t(b)], grad.numel()).view(grad.sizes()).add_(grad);
  }
  ++arrived_[param];
  while (next_ >= 0 && ready(next_)) {
    send(next_--);
    ++sent_early_;
  }
}

bool ShardedFold::ready(int64_t bucket) const {
  for (int64_t i = bucket_first_param_[size_t(bucket)]; i < bucket_end_param_[size_t(bucket)]; ++i)
    if (expected_[size_t(i)] < 0 || arrived_[size_t(i)] < expected_[size_t(i)]) return false;
  return true;
}

void ShardedFold::send(int64_t bucket) {
  at::Tensor buffer = std::move(buffers_[size_t(bucket)]);
  if (!buffer.defined())  // nothing of this bucket arrived in this backward: its sum is the others' gradients
    buffer = at::zeros({bucket_len_[size_t(bucket)]}, acc_.params().front().options().dtype(at::kFloat));
  sent_[size_t(bucket)] = 1;
  flying_.push_back({bucket, buffer, comm_.start_all_reduce_sum(buffer)});
  if (!overlap_ || flying_.size() > 2) retire_oldest();
}

void ShardedFold::retire_oldest() {
  InFlight f = std::move(flying_.front());
  flying_.pop_front();
  f.work.wait();
  at::NoGradGuard no_grad;
  const int64_t b = f.bucket;
  for (int64_t i = bucket_first_param_[size_t(b)]; i < bucket_end_param_[size_t(b)]; ++i) {
    const Piece& piece = plan_.piece(size_t(i));
    if (piece.numel == 0) continue;
    acc_.fold_piece(size_t(i), f.buffer.narrow(0, first_[size_t(i)] - bucket_begin_[size_t(b)] + piece.offset,
                                               piece.numel));
  }
}

void ShardedFold::end_backward() {
  if (!in_backward_) return;
  while (next_ >= 0) send(next_--);
  while (!flying_.empty()) retire_oldest();
  expected_ = arrived_;
  arrived_.assign(arrived_.size(), 0);
  sent_.assign(sent_.size(), 0);
  next_ = buckets() - 1;
  in_backward_ = false;
}

void ShardedFold::before_backward() {
  end_backward();
  in_backward_ = true;  // every process calls this K times and finish() once: the same collectives on each
}

void ShardedFold::finish() {
  end_backward();
  sent_early_last_ = sent_early_;
  sent_early_ = 0;
}

} // namespace shadowgrad::distributed
