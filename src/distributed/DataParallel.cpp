#include "distributed/DataParallel.h"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "accumulate/ShadowAccumulator.h"
#include "distributed/BucketedReduce.h"
#include "distributed/Communicator.h"
#include "distributed/Environment.h"
#include "distributed/OverlappedReduce.h"
#include "distributed/ShardPlan.h"
#include "distributed/ShardedFold.h"
#include "util/BlockHash.h"
#include "util/Hash.h"

namespace shadowgrad::distributed {

uint64_t checksum(const std::vector<at::Tensor>& tensors, uint64_t h) {
  for (const auto& t : tensors) {
    at::Tensor c = t.detach().to(at::kCPU).contiguous();
    h = util::block_hash_chain(c.data_ptr(), size_t(c.nbytes()), h);
  }
  return h;
}

std::shared_ptr<DataParallel> DataParallel::from_environment(const DataParallelOptions& options, c10::Device device) {
  const ProcessEnvironment env = ProcessEnvironment::from_environment();
  if (!env.distributed()) return nullptr;
  spdlog::info("rendezvous: rank {} of {} at {}:{} (timeout {} s)", env.rank, env.world_size, env.master_addr,
               env.master_port, options.collective_timeout_s);
  return std::make_shared<DataParallel>(Communicator::connect(env, options.collective_timeout_s, device), options);
}

DataParallel::DataParallel(std::shared_ptr<Communicator> comm, const DataParallelOptions& options)
    : comm_(std::move(comm)),
      bucket_bytes_(std::max<int64_t>(1, std::llround(options.bucket_mb * double(1 << 20)))),
      shard_optimizer_(options.shard_optimizer),
      shard_parameters_(options.shard_parameters),
      reshard_after_forward_(options.reshard_after_forward),
      config_hash_(options.config_hash),
      overlap_enabled_(options.overlap),
      shard_gradients_(options.shard_gradients) {}

DataParallel::~DataParallel() = default;

int DataParallel::rank() const { return comm_->rank(); }
int DataParallel::world_size() const { return comm_->world_size(); }

int64_t DataParallel::global_tokens(int64_t local_tokens) {
  at::Tensor t = at::full({1}, local_tokens, at::TensorOptions(comm_->device()).dtype(at::kLong));
  comm_->all_reduce_sum_(t);
  return t.item<int64_t>();
}

namespace {
double sum_over(Communicator& comm, double local) {
  at::Tensor t = at::full({1}, local, at::TensorOptions(comm.device()).dtype(at::kDouble));
  comm.all_reduce_sum_(t);
  return t.item<double>();
}
} // namespace

double DataParallel::global_sum(double local) { return sum_over(*comm_, local); }

std::vector<double> DataParallel::global_sums(const std::vector<double>& local) {
  at::Tensor t = at::tensor(local, at::kDouble).to(comm_->device());
  comm_->all_reduce_sum_(t);
  t = t.cpu().contiguous();
  return {t.data_ptr<double>(), t.data_ptr<double>() + t.numel()};
}

std::vector<accumulate::ShadowRange> DataParallel::gradient_ranges(const std::vector<at::Tensor>& params) const {
  if (!shard_gradients_) return {};
  std::vector<at::Tensor> trainable;
  for (const auto& p : params)
    if (p.requires_grad()) trainable.push_back(p);
  return shadow_ranges(ShardPlan(trainable, rank(), world_size()));
}

void DataParallel::attach(accumulate::ShadowAccumulator& acc) {
  if (!acc.holds_pieces()) return;
  sharded_ = std::make_unique<ShardedFold>(*comm_, acc, ShardPlan(acc.params(), rank(), world_size()), bucket_bytes_,
                                           overlap_enabled_);
  acc.set_norm_reducer([comm = comm_](double local) { return sum_over(*comm, local); });
}

void DataParallel::after_last_backward(accumulate::ShadowAccumulator& acc) {
  if (sharded_ && sharded_->serves(acc)) sharded_->finish();
}

void DataParallel::before_backward(accumulate::ShadowAccumulator& acc, bool last) {
  if (acc.holds_pieces()) {
    if (!sharded_ || !sharded_->serves(acc))
      throw std::logic_error("DataParallel: an accumulator of pieces that was not attach()ed");
    sharded_->before_backward();
    return;
  }
  if (!overlap_enabled_) return;
  if (!overlap_ || !overlap_->serves(acc)) {
    overlap_.reset();
    overlap_ = std::make_unique<OverlappedReduce>(*comm_, acc, bucket_bytes_);
  }
  overlap_->before_backward(last);
}

int64_t DataParallel::buckets_started_early() const { return overlap_ ? overlap_->started_early() : 0; }

void DataParallel::reduce_gradients(accumulate::ShadowAccumulator& acc, const at::Tensor& rider) {
  at::NoGradGuard no_grad;
  folds_at_last_reduce_ = acc.folds();
  if (acc.holds_pieces()) {  // summed bucket by bucket during the backward passes (after_last_backward)
    sum_rider(rider);
    if (!logged_buckets_)
      spdlog::info("gradient reduction: sharded (shard_gradients_over_data): {} fp32 buckets summed per microbatch "
                   "during its backward ({} sent before the backward ended, last step), this process keeps {} of the "
                   "shadow tree's values",
                   sharded_->buckets(), sharded_->sent_during_backward(),
                   acc.bytes() / int64_t(c10::elementSize(acc.grad_dtype())));
    logged_buckets_ = true;
    return;
  }
  const bool overlapped = overlap_ && overlap_->serves(acc);
  const int64_t buckets = overlapped ? overlap_->finish()
                                     : all_reduce_sum_bucketed(*comm_, acc.mutable_shadows(), bucket_bytes_);
  sum_rider(rider);
  if (!logged_buckets_) {
    int64_t numel = 0;
    for (const auto& s : acc.shadows()) numel += s.numel();
    spdlog::info("gradient reduction: {} {} values in {} fp32 buckets of at most {} bytes, once per step{}", numel,
                 c10::toString(acc.grad_dtype()), buckets, bucket_bytes_,
                 overlapped ? fmt::format(", overlapped with the last backward ({} of them started during it)",
                                          overlap_->started_early())
                            : "");
    logged_buckets_ = true;
  }
}

void DataParallel::sum_rider(const at::Tensor& rider) {
  if (!rider.defined() || rider.numel() == 0) return;
  at::Tensor r = rider.view({-1});
  comm_->all_reduce_sum_(r);
}

std::vector<int64_t> DataParallel::all_gather_ints(const std::vector<int64_t>& mine) {
  const int world = world_size();
  const auto n = int64_t(mine.size());
  at::Tensor in = at::empty({n}, at::kLong);
  std::memcpy(in.data_ptr<int64_t>(), mine.data(), mine.size() * sizeof(int64_t));
  in = in.to(comm_->device());  // NCCL gathers device tensors
  at::Tensor all = at::empty({world, n}, in.options());
  std::vector<at::Tensor> out;
  for (int r = 0; r < world; ++r) out.push_back(all[r]);
  comm_->all_gather(out, in);
  all = all.cpu().contiguous();
  return std::vector<int64_t>(all.data_ptr<int64_t>(), all.data_ptr<int64_t>() + world * n);
}

void DataParallel::verify_same_start(const std::vector<at::Tensor>& params, uint64_t after) {
  const int world = world_size();
  const std::vector<int64_t> all = all_gather_ints({int64_t(config_hash_), int64_t(checksum(params, after))});
  const char* what[2] = {"the resolved config (same CONFIG and key=value overrides on every process)",
                         "the initial weights (same init_weights_seed and model keys on every process)"};
  for (int k = 0; k < 2; ++k)
    for (int r = 1; r < world; ++r)
      if (all[2 * r + k] != all[k])
        throw std::runtime_error(fmt::format("rank {} and rank 0 differ in {}: checksum {:016x} vs {:016x}", r,
                                             what[k], uint64_t(all[2 * r + k]), uint64_t(all[k])));
}

} // namespace shadowgrad::distributed
