// The gradient reduction overlapped with the last backward (distributed/OverlappedReduce.h), on CPU with Gloo's
// asynchronous work: the same bits as the reduction after the backward, buckets really started during it, and the
// bug of InfiniTrain #213 (a bucket sent after the first microbatch, the later folds lost) caught loudly.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "RankThreads.h"
#include "TinyConfig.h"
#include "accumulate/ShadowAccumulator.h"
#include "data/DataSource.h"
#include "distributed/BucketedReduce.h"
#include "distributed/DataParallel.h"
#include "distributed/OverlappedReduce.h"
#include "model/Decoder.h"
#include "train/TokenLoss.h"
#include "train/TrainStep.h"

using namespace shadowgrad;

namespace {

config::Config overlap_config(int64_t k, bool overlap, config::GradDtype grad_dtype) {
  auto c = tiny_config();
  c.synthetic_min_length_fraction = 0.2;
  c.gradient_accumulation_steps = k;
  c.per_device_batch_size = 2;
  c.grad_reduce_bucket_mb = 0.004;  // about 1000 fp32 values: many buckets, several per large parameter
  c.overlap_gradient_reduction = overlap;
  c.grad_dtype = grad_dtype;
  return c;
}

bool same_bits(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const at::Tensor x = a[i].contiguous(), y = b[i].contiguous();
    if (x.sizes() != y.sizes() || x.scalar_type() != y.scalar_type() ||
        std::memcmp(x.data_ptr(), y.data_ptr(), x.numel() * x.element_size()) != 0)
      return false;
  }
  return true;
}

struct RunResult {
  std::vector<at::Tensor> weights;  // after the steps
  int64_t buckets = 0, early = 0;
};

// `world` ranks train `steps` steps; rank 0's weights and overlap counts come back.
RunResult train_ranks(int world, int64_t k, bool overlap, config::GradDtype grad_dtype, int64_t steps) {
  RunResult out;
  auto errors = run_ranks(world, [&](distributed::Communicator& comm) {
    const auto c = overlap_config(k, overlap, grad_dtype);
    auto dp = std::make_shared<distributed::DataParallel>(share(comm), distributed::DataParallelOptions::from_config(c));
    auto source = data::make_source(data::DataOptions::from_config(c));
    train::TrainStep step(train::StepOptions::from_config(c), model::Decoder(model::DecoderOptions::from_config(c)),
                          *source, c10::Device(c10::kCPU), dp);
    for (int64_t s = 0; s < steps; ++s) step.run(s);
    if (comm.rank() != 0) return;
    for (const auto& p : step.accumulator().params()) out.weights.push_back(p.detach().clone());
    int64_t numel = 0;
    for (const auto& p : step.accumulator().params()) numel += p.numel();
    out.buckets = distributed::bucket_count(numel, dp->bucket_bytes());
    out.early = dp->buckets_started_early();
  });
  require_no_errors(errors);
  return out;
}

} // namespace

TEST_CASE("overlapped reduction: bitwise the reduction after the backward, buckets started during it",
          "[distributed][overlap]") {
  struct Case {
    int world;
    int64_t k;
    config::GradDtype grad_dtype;
  };
  using config::GradDtype;
  for (const Case& c : {Case{2, 3, GradDtype::bfloat16}, Case{3, 2, GradDtype::float32}, Case{2, 1, GradDtype::bfloat16}}) {
    INFO("world " << c.world << ", K " << c.k << ", bf16 shadow " << (c.grad_dtype == GradDtype::bfloat16));
    // K = 1: the first step has no backward before its last to count against; the second and third overlap.
    const RunResult after = train_ranks(c.world, c.k, false, c.grad_dtype, 3);
    const RunResult overlapped = train_ranks(c.world, c.k, true, c.grad_dtype, 3);
    CHECK(same_bits(overlapped.weights, after.weights));
    CHECK(after.early == 0);
    REQUIRE(overlapped.buckets > 4);
    // All but the buckets the embedding (the backward's last parameter) shares with a later parameter, at least.
    CHECK(overlapped.early >= overlapped.buckets / 2);
    INFO("buckets " << overlapped.buckets << ", started during the last backward " << overlapped.early);
  }
}

TEST_CASE("overlapped reduction: a bucket sent after the first microbatch (InfiniTrain #213) throws, never drops folds",
          "[distributed][overlap][order]") {
  std::vector<std::string> messages(2);
  auto errors = run_ranks(2, [&](distributed::Communicator& comm) {
    const auto c = overlap_config(2, true, config::GradDtype::float32);
    auto source = data::make_source(data::DataOptions::from_config(c));
    model::Decoder model(model::DecoderOptions::from_config(c));
    accumulate::ShadowAccumulator acc(model->parameters(), at::kFloat);
    distributed::OverlappedReduce overlap(comm, acc, int64_t(c.grad_reduce_bucket_mb * (1 << 20)));
    data::Batch batch = source->examples(0, comm.rank() * 4, 4);
    auto backward = [&](int m) {
      data::Batch micro = batch.slice(m * 2, 2);
      (train::token_loss_sum(model->forward(micro.tokens), micro.targets) * 1e-3).backward();
    };
    // A correct step first, so the counts of one backward are known.
    acc.begin(0);
    for (int m = 0; m < 2; ++m) {
      overlap.before_backward(m == 1);
      backward(m);
    }
    acc.end();
    overlap.finish();
    acc.zero_();
    // The bug: the first microbatch declared last, so its buckets go out; the second microbatch's folds follow.
    acc.begin(1);
    overlap.before_backward(true);
    backward(0);
    try {
      backward(1);
    } catch (const std::logic_error& e) {
      messages[comm.rank()] = e.what();
    }
    acc.end();
    overlap.finish();  // the buckets already sent still complete on both ranks
  });
  require_no_errors(errors);
  for (const auto& m : messages) CHECK_THAT(m, Catch::Contains("after its bucket") && Catch::Contains("had been sent"));
}

TEST_CASE("overlapped reduction: declaring a second last backward before finish() throws", "[distributed][overlap]") {
  auto errors = run_ranks(1, [&](distributed::Communicator& comm) {
    auto w = at::zeros({10}).requires_grad_();
    accumulate::ShadowAccumulator acc({w}, at::kFloat);
    distributed::OverlappedReduce overlap(comm, acc, 16);
    acc.begin(0);
    overlap.before_backward(false);
    w.sum().backward();
    overlap.before_backward(true);
    w.sum().backward();
    CHECK_THROWS_AS(overlap.before_backward(true), std::logic_error);
    acc.end();
    CHECK(overlap.finish() == 3);  // 10 values in buckets of 4
    CHECK(overlap.started_early() == 3);
    CHECK(acc.shadows()[0].eq(2.0f).all().item<bool>());  // one rank: the sum is the folded gradient
  });
  require_no_errors(errors);
}
