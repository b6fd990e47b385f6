// A model shadowgrad has never seen (embedding -> conv -> BatchNorm -> linear), trained with gradient
// accumulation from the installed package. Synthetic task: each sequence draws its tokens from one of four
// disjoint "topic" ranges; the model predicts the topic. Prints the loss of every optimizer step and exits 1
// if the loss did not fall (mean of the last 3 steps not below half the first step's).
//
//   foreign_model [steps=30] [K=4]
#include <cstdio>
#include <cstdlib>
#include <string>

#include <torch/nn/functional/loss.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adamw.h>
#include <torch/utils.h>

#include <shadowgrad/shadowgrad.h>

struct TopicNetImpl : torch::nn::Module {
  static constexpr int64_t kVocab = 64, kTopics = 4;
  torch::nn::Embedding embed{register_module("embed", torch::nn::Embedding(kVocab, 16))};
  torch::nn::Conv1d conv{register_module("conv", torch::nn::Conv1d(torch::nn::Conv1dOptions(16, 32, 3).padding(1)))};
  torch::nn::BatchNorm1d norm{register_module("norm", torch::nn::BatchNorm1d(32))};
  torch::nn::Linear head{register_module("head", torch::nn::Linear(32, kTopics))};

  torch::Tensor forward(const torch::Tensor& tokens) {       // [B, T] int64
    auto x = embed(tokens).transpose(1, 2);                  // [B, 16, T]
    x = torch::relu(norm(conv(x)));                          // [B, 32, T]
    return head(x.mean(2));                                  // [B, kTopics]
  }
};
TORCH_MODULE(TopicNet);

// One microbatch: `batch` sequences of 24 tokens, each from its topic's 16-token range.
std::pair<torch::Tensor, torch::Tensor> microbatch(int64_t batch) {
  auto topics = torch::randint(TopicNetImpl::kTopics, {batch}, torch::kLong);
  auto tokens = torch::randint(16, {batch, 24}, torch::kLong) + topics.unsqueeze(1) * 16;
  return {tokens, topics};
}

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 30;
  const int K = argc > 2 ? std::atoi(argv[2]) : 4;
  torch::manual_seed(0);
  TopicNet model;
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(3e-3));

  double first = 0, last3 = 0;
  // ---- gradient accumulation with shadowgrad: a bf16 shadow tree, K microbatches, one update ----
  shadowgrad::ShadowAccumulator acc(model->parameters(), at::kBFloat16);
  for (int step = 1; step <= steps; ++step) {
    double loss_sum = 0;
    acc.begin();
    for (int k = 0; k < K; ++k) {
      auto [x, y] = microbatch(8);
      auto loss = torch::nn::functional::cross_entropy(model(x), y);
      (loss / K).backward();                     // folded into the shadow tree; p.grad() stays undefined
      loss_sum += loss.item<double>();
    }
    acc.end();
    double norm = acc.clip_global_norm_(1.0);
    acc.step(optimizer);                         // AdamW reads the bf16 shadows as .grad; shadows zeroed
    // ---- end of the GA part ----
    double loss = loss_sum / K;
    std::printf("step %d loss %.4f grad_norm %.4f\n", step, loss, norm);
    if (step == 1) first = loss;
    if (step > steps - 3) last3 += loss / 3;
  }
  std::printf("first %.4f last3 %.4f shadow bytes %lld (%s)\n", first, last3, static_cast<long long>(acc.bytes()),
              last3 < 0.5 * first ? "loss fell" : "loss did NOT fall");
  return last3 < 0.5 * first ? 0 : 1;
}
