// Supervised fine-tuning data (dataset_type=sft): the SFT file and its checks, the label shift inside each example,
// packing, the block-causal mask and RoPE positions, and exactness: packed = unpacked, K ragged microbatches = one
// big batch (a mean of microbatch means fails), a global batch without targets skipped.
#include <catch2/catch.hpp>

#include <filesystem>
#include <functional>
#include <fstream>

#include <ATen/ATen.h>

#include "Gradients.h"
#include "TinyConfig.h"
#include "TokenFiles.h"
#include "TrainerProcess.h"
#include "accumulate/ShadowAccumulator.h"
#include "data/DataSource.h"
#include "data/Packing.h"
#include "data/SftFile.h"
#include "data/SftSource.h"
#include "model/Decoder.h"
#include "train/TokenLoss.h"
#include "train/TrainStep.h"
#include "util/Errors.h"

using namespace shadowgrad;

namespace {

struct Examples {
  std::vector<std::vector<uint32_t>> tokens;
  std::vector<std::vector<uint8_t>> targets;
};

// `n` examples of uneven lengths in [2, max_length]: a prompt of pseudo-random tokens, then a completion that counts
// up from its last prompt token (learnable); the completion is flagged as the target.
Examples ragged_examples(int n, int max_length, uint32_t vocab = 64, uint32_t seed = 7) {
  Examples e;
  uint32_t h = seed;
  auto next = [&] { return h = h * 1664525u + 1013904223u, h >> 8; };
  for (int i = 0; i < n; ++i) {
    const int length = 2 + int(next() % uint32_t(max_length - 1));
    const int prompt = 1 + int(next() % uint32_t(length - 1));
    std::vector<uint32_t> t;
    std::vector<uint8_t> f;
    for (int j = 0; j < length; ++j) {
      t.push_back(j < prompt ? next() % vocab : (t.back() + 1) % vocab);
      f.push_back(j >= prompt ? 1 : 0);
    }
    e.tokens.push_back(t);
    e.targets.push_back(f);
  }
  return e;
}

std::string sft_file(const std::string& name, const Examples& e) {
  const std::string path = token_files::temp_path(name + ".sft");
  data::write_sft_file(path, e.tokens, e.targets);
  return path;
}

config::Config sft_config(const std::string& path, bool packing) {
  auto c = tiny_config();
  c.dataset_type = config::DatasetType::sft;
  c.dataset_path = path;
  c.packing = packing;
  return c;
}

std::unique_ptr<data::SftSource> sft_source(const config::Config& c) {
  return std::make_unique<data::SftSource>(data::SftFile::open(c.dataset_path, "dataset_path"),
                                           data::DataOptions::from_config(c), "dataset_path");
}

std::string load_error_of(const std::string& path) {
  try {
    data::SftFile::open(path, "dataset_path");
  } catch (const DataError& e) {
    return e.what();
  }
  return "(no error)";
}

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string write_bytes(const std::string& name, const std::string& bytes) {
  const std::string path = token_files::temp_path(name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

using gradients::Gradients;
using gradients::max_rel_diff;

// Loss (sum over every target / all targets) and the parameters' gradients over all rows of `rows`.
Gradients loss_and_grads(model::Decoder& model, const data::Batch& rows, bool with_layout = true) {
  for (auto& p : model->parameters()) p.mutable_grad() = at::Tensor();
  const auto seg = with_layout ? rows.segments : at::Tensor(), pos = with_layout ? rows.positions : at::Tensor();
  auto sum = train::linear_token_loss_sum(model->hidden(rows.tokens, seg, pos), model->output_weight(), rows.targets);
  auto loss = sum / double(rows.valid_tokens());
  loss.backward();
  Gradients out{loss.item<double>(), {}};
  for (auto& p : model->parameters()) out.grads.push_back(p.grad().clone());
  return out;
}

} // namespace

TEST_CASE("an SFT file round-trips, and every corrupt form is refused naming the file", "[sft][data]") {
  const auto e = ragged_examples(5, 12);
  const std::string path = sft_file("round", e);
  const auto f = data::SftFile::open(path, "dataset_path");
  REQUIRE(f.examples() == 5);
  for (int i = 0; i < 5; ++i) {
    REQUIRE(f.length(i) == int64_t(e.tokens[i].size()));
    CHECK(std::equal(e.tokens[i].begin(), e.tokens[i].end(), f.tokens(i)));
    CHECK(std::equal(e.targets[i].begin(), e.targets[i].end(), f.targets(i)));
  }
  const std::string good = bytes_of(path);
  auto corrupt = [&](const std::string& name, std::string bytes) { return load_error_of(write_bytes(name, bytes)); };
  CHECK_THAT(corrupt("short", good.substr(0, 40)), Catch::Contains("is truncated") && Catch::Contains("short"));
  CHECK_THAT(corrupt("cut", good.substr(0, good.size() - 3)), Catch::Contains("is truncated"));
  CHECK_THAT(corrupt("long", good + "x"), Catch::Contains("trailing bytes"));
  std::string magic = good;
  magic[0] = 'X';
  CHECK_THAT(corrupt("magic", magic), Catch::Contains("not an SFT file") && Catch::Contains("magic"));
  std::string version = good;
  version[8] = 9;
  CHECK_THAT(corrupt("version", version), Catch::Contains("version 9"));
  // The last offset (num_tokens) moved down by one: offsets must run from 0 to num_tokens.
  std::string offsets = good;
  offsets[offsets.size() - 8] = char(offsets[offsets.size() - 8] - 1);
  CHECK_THAT(corrupt("offsets", offsets), Catch::Contains("offsets run from"));
  // Example 1's start moved onto example 0's last token: example 0 then holds fewer tokens than it says... or 1.
  std::string order = good;
  const size_t first_offsets = good.size() - 8 * 6;
  order[first_offsets + 8] = 1;  // example 0 = [0, 1): one token
  CHECK_THAT(corrupt("order", order), Catch::Contains("example 0 has offsets [0, 1)"));
  // A flag on an example's first token, a flag of 2, a header count that disagrees.
  const size_t flags_at = size_t(data::kSftHeaderBytes) + 4 * size_t(f.total_tokens());
  std::string first = good;
  first[flags_at] = 1;
  CHECK_THAT(corrupt("first", first), Catch::Contains("first token is flagged"));
  std::string two = good;
  two[flags_at + 1] = 2;
  CHECK_THAT(corrupt("two", two), Catch::Contains("target flag 2"));
  std::string count = good;
  count[32] = char(count[32] + 1);
  CHECK_THAT(corrupt("count", count), Catch::Contains("the header says"));
  CHECK_THAT(load_error_of("/nonexistent/x.sft"), Catch::Contains("/nonexistent/x.sft"));
}

TEST_CASE("SFT offsets near 2^64 are refused, not wrapped", "[sft][data]") {
  // A file of n examples (num_tokens T) with its n + 1 offsets replaced by offsets(T).
  auto with_offsets = [](int n, const std::function<std::vector<uint64_t>(uint64_t)>& offsets) {
    const std::string good = bytes_of(sft_file("wrap" + std::to_string(n), ragged_examples(n, 12)));
    uint64_t tokens = 0;
    for (int b = 0; b < 8; ++b) tokens |= uint64_t(uint8_t(good[24 + b])) << (8 * b);
    std::string bytes = good.substr(0, good.size() - 8 * size_t(n + 1));
    for (uint64_t o : offsets(tokens))
      for (int b = 0; b < 8; ++b) bytes.push_back(char(uint8_t(o >> (8 * b))));
    return bytes;
  };
  const uint64_t max = ~uint64_t(0), half = uint64_t(1) << 63;
  // offsets[0] + 2 wrapped to 1: [0, 2^64-1, T] passed, and then flags[2^64-1] was read.
  const auto wrapped = with_offsets(2, [&](uint64_t T) { return std::vector<uint64_t>{0, max, T}; });
  CHECK_THAT(load_error_of(write_bytes("wrap_max.sft", wrapped)),
             Catch::Contains("wrap_max.sft") && Catch::Contains("example 0 has offsets [0, 18446744073709551615)"));
  // No wrap, but an offset past num_tokens whose example's first flag was read before a later offset failed.
  const auto past = with_offsets(3, [&](uint64_t T) { return std::vector<uint64_t>{0, half, half + 2, T}; });
  CHECK_THAT(load_error_of(write_bytes("wrap_half.sft", past)),
             Catch::Contains("example 0 has offsets [0, 9223372036854775808)"));
}

TEST_CASE("the trainer exits 2 naming a bad SFT file", "[sft][data]") {
  const std::string path = write_bytes("bad_for_trainer.sft", std::string(100, 'x'));
  const auto r = trainer_process::run_command(std::string(TRAINER_BIN) + " tiny.yml steps=1 dataset_type=sft "
                                              "dataset_path=" + path + " enable_checkpointing=false "
                                              "base_output_directory=" + token_files::temp_path("runs_bad"));
  CHECK(r.code == 2);
  CHECK_THAT(r.output, Catch::Contains(path) && Catch::Contains("not an SFT file"));
}

TEST_CASE("SFT rows: labels shift inside each example, positions restart, prompts carry no loss", "[sft][data]") {
  const auto e = ragged_examples(40, 14);
  const std::string path = sft_file("rows", e);
  for (bool completion_only : {true, false}) {
    for (bool packing : {true, false}) {
      auto c = sft_config(path, packing);
      c.sft_train_on_completion_only = completion_only;
      auto source = sft_source(c);
      const auto rows = source->eval_examples(0, source->eval_capacity());
      int64_t expected = 0;
      for (size_t i = 0; i < e.tokens.size(); ++i)
        for (size_t j = 1; j < e.tokens[i].size(); ++j) expected += completion_only ? e.targets[i][j] : 1;
      CHECK(rows.valid_tokens() == expected);  // every target once, none invented
      int64_t all_tokens = 0;
      for (const auto& t : e.tokens) all_tokens += int64_t(t.size());
      CHECK(rows.real_tokens() == all_tokens);
      const auto tok = rows.tokens.accessor<int64_t, 2>(), tgt = rows.targets.accessor<int64_t, 2>();
      const auto seg = rows.segments.accessor<int64_t, 2>(), pos = rows.positions.accessor<int64_t, 2>();
      int64_t starts = 0;
      for (int64_t r = 0; r < rows.size(); ++r)
        for (int64_t t = 0; t < 16; ++t) {
          if (seg[r][t] != 0 && pos[r][t] == 0) ++starts;
          if (tgt[r][t] == data::kIgnoreIndex) continue;
          REQUIRE(t + 1 < 16);
          CHECK(seg[r][t + 1] == seg[r][t]);  // the target is the same example's next token
          CHECK(pos[r][t + 1] == pos[r][t] + 1);
          CHECK(tgt[r][t] == tok[r][t + 1]);
        }
      CHECK(starts == int64_t(e.tokens.size()));  // every example once, positions restarting at 0
      if (packing) CHECK(source->eval_capacity() < int64_t(e.tokens.size()));
      else CHECK(source->eval_capacity() == int64_t(e.tokens.size()));
    }
  }
}

TEST_CASE("over-long examples are truncated or dropped, as sft_long_examples says", "[sft][data]") {
  Examples e = ragged_examples(3, 10);
  e.tokens.push_back(std::vector<uint32_t>(30, 5));  // 30 tokens, the target at the end only
  e.targets.push_back(std::vector<uint8_t>(30, 0));
  e.targets.back()[29] = 1;
  const std::string path = sft_file("long", e);
  auto c = sft_config(path, true);
  auto truncating = sft_source(c);
  CHECK(truncating->examples_kept() == 4);
  // The three short ones whole and the long one cut to max_target_length = 16: were it dropped, or kept whole, this
  // would be 16 fewer, or 14 more.
  CHECK(truncating->eval_examples(0, truncating->eval_capacity()).real_tokens() ==
        int64_t(e.tokens[0].size() + e.tokens[1].size() + e.tokens[2].size()) + 16);
  c.sft_long_examples = config::SftLongExamples::drop;
  CHECK(sft_source(c)->examples_kept() == 3);
}

TEST_CASE("first-fit-decreasing packs within its buffer and never splits an example", "[sft][data]") {
  const std::vector<int64_t> lengths{9, 2, 7, 4, 3, 8, 1, 6};
  std::vector<int64_t> order{0, 1, 2, 3, 4, 5, 6, 7};
  const auto rows = data::pack_first_fit_decreasing(lengths, order, 10, 8);
  // FFD by hand: 9|1, 8|2, 7|3, 6|4 -> 4 rows, no padding.
  REQUIRE(rows.size() == 4);
  CHECK(rows[0] == data::Row{0, 6});
  CHECK(rows[3] == data::Row{7, 3});
  CHECK(data::pack_first_fit_decreasing(lengths, order, 10, 1).size() == 8);
  CHECK(data::pack_first_fit_decreasing(lengths, order, 10, 4).size() == 5);  // 9,2,7,4 | 3,8,1,6
}

TEST_CASE("SFT row order is a pure function of (seed, row), across epochs", "[sft][data]") {
  const std::string path = sft_file("order", ragged_examples(30, 14));
  for (bool packing : {true, false}) {
    auto source = sft_source(sft_config(path, packing));
    const int64_t epoch = source->rows_per_first_epoch();
    const auto all = source->examples(0, 0, 3 * epoch);
    auto fresh = sft_source(sft_config(path, packing));
    const auto part = fresh->examples(0, epoch - 2, 5);  // straddles the first epoch's end
    CHECK(at::equal(part.tokens, all.tokens.slice(0, epoch - 2, epoch + 3)));
    CHECK(at::equal(part.targets, all.targets.slice(0, epoch - 2, epoch + 3)));
    CHECK(at::equal(part.positions, all.positions.slice(0, epoch - 2, epoch + 3)));
    // Each epoch holds every example once (same real tokens), in another order.
    CHECK(all.slice(0, epoch).real_tokens() == source->eval_examples(0, source->eval_capacity()).real_tokens());
    CHECK_FALSE(at::equal(all.tokens.slice(0, 0, epoch), all.tokens.slice(0, epoch, 2 * epoch)));
  }
}

TEST_CASE("packed = unpacked: the same examples give the same loss and gradient in fp32 (1e-6)", "[sft][exact]") {
  const std::string path = sft_file("packed", ragged_examples(24, 14));
  for (bool fused : {true, false}) {
    auto c = sft_config(path, true);
    c.fused_kernels = fused;
    model::Decoder model(model::DecoderOptions::from_config(c));
    auto packed_source = sft_source(c);
    c.packing = false;
    auto unpacked_source = sft_source(c);
    const auto packed = packed_source->eval_examples(0, packed_source->eval_capacity());
    const auto unpacked = unpacked_source->eval_examples(0, unpacked_source->eval_capacity());
    REQUIRE(packed.size() < unpacked.size());
    REQUIRE(packed.valid_tokens() == unpacked.valid_tokens());
    const auto a = loss_and_grads(model, packed), b = loss_and_grads(model, unpacked);
    const double err = max_rel_diff(a, b);
    INFO("fused_kernels=" << fused << ": packed vs unpacked max relative difference " << err);
    CHECK(err <= 1e-6);
    // The unpacked rows through plain causal attention (no segment ids, positions 0..T-1): the mask and the RoPE
    // gather are the identity there.
    CHECK(max_rel_diff(loss_and_grads(model, unpacked, false), b) <= 1e-6);
    // Packing without the block mask lets later examples see earlier ones: the check above would catch it.
    auto leaky = packed;
    leaky.segments = at::Tensor();
    const double leak = max_rel_diff(loss_and_grads(model, leaky), b);
    INFO("packed rows without the block mask: " << leak);
    CHECK(leak > 1e-3);
  }
}

using gradients::accumulate_step0;

TEST_CASE("K=4 ragged SFT microbatches = one big batch (1e-6), and a mean of microbatch means fails (> 1e-3)",
          "[sft][exact]") {
  const std::string path = sft_file("ragged", ragged_examples(64, 14, 64, 11));
  for (bool packing : {false, true}) {
    auto c = sft_config(path, packing);
    c.per_device_batch_size = 8;
    const auto big = accumulate_step0(c);
    c.per_device_batch_size = 2;
    c.gradient_accumulation_steps = 4;
    const auto k4 = accumulate_step0(c);
    const double err = max_rel_diff(k4, big);
    INFO("packing=" << packing << ": K=4 vs K=1 max relative difference " << err);
    CHECK(err <= 1e-6);

    // The per-microbatch mean (1/K) sum S_m / N_m (HF Trainer before 4.46), on the same rows and weights.
    auto source = data::make_source(data::DataOptions::from_config(c));
    model::Decoder model(model::DecoderOptions::from_config(c));
    accumulate::ShadowAccumulator acc(model->parameters(), at::kFloat);
    const auto batch = source->examples(0, 0, 8);
    double loss = 0;
    std::vector<int64_t> counts;
    acc.begin();
    for (int64_t m = 0; m < 4; ++m) {
      auto micro = batch.slice(2 * m, 2);
      counts.push_back(micro.valid_tokens());
      auto l = train::token_loss_sum(model->forward(micro.tokens, micro.segments, micro.positions), micro.targets) /
               double(micro.valid_tokens()) / 4.0;
      l.backward();
      loss += l.item<double>();
    }
    acc.end();
    REQUIRE(*std::min_element(counts.begin(), counts.end()) < *std::max_element(counts.begin(), counts.end()));
    Gradients wrong{loss, {}};
    for (const auto& s : acc.shadows()) wrong.grads.push_back(s.clone());
    const double wrong_err = max_rel_diff(wrong, big);
    INFO("the mean of means: " << wrong_err);
    CHECK(wrong_err > 1e-3);
    WARN("packing=" << packing << ": K=4 vs one batch " << err << "; mean of microbatch means " << wrong_err
                    << " (target counts per microbatch " << counts[0] << "," << counts[1] << "," << counts[2] << ","
                    << counts[3] << ")");
  }
}

TEST_CASE("a global batch with no target is skipped (no update, no NaN)", "[sft][exact]") {
  Examples e;
  for (int i = 0; i < 4; ++i) {  // prompts only
    e.tokens.push_back({1, 2, 3, uint32_t(4 + i)});
    e.targets.push_back({0, 0, 0, 0});
  }
  auto c = sft_config(sft_file("prompts", e), false);
  auto source = data::make_source(data::DataOptions::from_config(c));
  train::TrainStep step(train::StepOptions::from_config(c), model::Decoder(model::DecoderOptions::from_config(c)),
                        *source, c10::Device(c10::kCPU));
  std::vector<at::Tensor> before;
  for (const auto& p : step.model()->parameters()) before.push_back(p.detach().clone());
  const auto s = step.run(0);
  CHECK(s.no_targets);
  CHECK_FALSE(s.skipped);
  CHECK(std::isfinite(s.loss));
  CHECK(s.tokens == 0);
  CHECK(s.input_tokens == 16);
  CHECK(s.padding_fraction == Approx(1.0 - 16.0 / 64.0));
  for (size_t i = 0; i < before.size(); ++i) CHECK(at::equal(step.model()->parameters()[i], before[i]));
}
