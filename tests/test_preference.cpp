// Preference tuning (use_dpo): the pair file and its checks, the pair rows (answers are the only targets, a pair's two
// sequences in one batch, truncation and dropping), and exactness: K ragged microbatches = one batch and packed =
// unpacked for every loss type (1e-6), with TRL's mean of microbatch means as the control that must fail; the
// label-smoothed sigmoid against its formula; the reference file reused, recomputed or refused.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "Gradients.h"
#include "TinyConfig.h"
#include "TokenFiles.h"
#include "TrainerProcess.h"
#include "accumulate/ShadowAccumulator.h"
#include "data/PairFile.h"
#include "data/PairSource.h"
#include "model/Decoder.h"
#include "train/PreferenceLoss.h"
#include "train/MemoryProbe.h"
#include "train/PreferenceReference.h"
#include "train/Signals.h"
#include "train/TrainStep.h"
#include "util/Errors.h"

using namespace shadowgrad;

namespace {

// `n` pairs: prompts of 1-6 tokens, answers of 1-9 (ragged); the chosen answer counts up from the prompt's last token.
std::vector<data::PairTokens> ragged_pairs(int n, uint32_t seed = 5) {
  uint32_t h = seed;
  auto next = [&] { return h = h * 1664525u + 1013904223u, h >> 8; };
  std::vector<data::PairTokens> pairs;
  for (int i = 0; i < n; ++i) {
    data::PairTokens p;
    for (uint32_t j = 0, len = 1 + next() % 6; j < len; ++j) p.prompt.push_back(next() % 64);
    for (uint32_t j = 0, len = 1 + next() % 9; j < len; ++j) p.chosen.push_back((p.prompt.back() + 1 + j) % 64);
    for (uint32_t j = 0, len = 1 + next() % 9; j < len; ++j) p.rejected.push_back(next() % 64);
    pairs.push_back(p);
  }
  return pairs;
}

std::string pair_file(const std::string& name, const std::vector<data::PairTokens>& pairs) {
  const std::string path = token_files::temp_path(name + ".pairs");
  data::write_pair_file(path, pairs);
  return path;
}

config::Config pair_config(const std::string& path, bool packing) {
  auto c = tiny_config();
  c.dataset_type = config::DatasetType::preference;
  c.use_dpo = true;
  c.dataset_path = path;
  c.packing = packing;
  c.dpo_beta = 0.5;
  return c;
}

std::unique_ptr<data::PairSource> pair_source(const config::Config& c) {
  return std::make_unique<data::PairSource>(data::PairFile::open(c.dataset_path, "dataset_path"),
                                            data::DataOptions::from_config(c), "dataset_path");
}

// A reference that differs from the starting model, so that h != 0 and every loss type has a gradient of its own.
std::vector<double> shifted_reference(const data::PairSource& s) {
  std::vector<double> ref;
  for (int64_t i = 0; i < 2 * s.pairs_kept(); ++i) ref.push_back(-20.0 + 3.0 * std::sin(0.7 * double(i)));
  return ref;
}

using gradients::Gradients;
using gradients::max_rel_diff;

// Step 0's microbatch loop: the objective and the shadow tree it leaves.
Gradients pair_step0(const config::Config& c) {
  auto source = pair_source(c);
  source->set_reference(shifted_reference(*source));
  train::TrainStep step(train::StepOptions::from_config(c), model::Decoder(model::DecoderOptions::from_config(c)),
                        *source, c10::Device(c10::kCPU));
  auto acc = step.accumulate_batch(0);
  Gradients g{acc.loss, {}};
  for (const auto& s : step.accumulator().shadows()) g.grads.push_back(s.to(at::kFloat).clone());
  return g;
}

std::string pair_load_error(const std::string& bytes) {
  try {
    data::PairFile::parse(bytes, "dataset_path 'x'");
  } catch (const DataError& e) {
    return e.what();
  }
  return "(no error)";
}

std::string pair_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void put_pair_u64(std::string& bytes, size_t at, uint64_t v) {
  for (size_t i = 0; i < 8; ++i) bytes[at + i] = char(uint8_t(v >> (8 * i)));
}

} // namespace

TEST_CASE("a pair file round-trips, and every corrupt form is refused naming the file", "[preference][data]") {
  const auto pairs = ragged_pairs(5);
  const std::string path = pair_file("roundtrip", pairs);
  const auto f = data::PairFile::open(path, "dataset_path");
  REQUIRE(f.pairs() == 5);
  for (int i = 0; i < 5; ++i) {
    const auto p = f.prompt(i), c = f.answer(i, data::Answer::chosen), r = f.answer(i, data::Answer::rejected);
    CHECK(std::vector<uint32_t>(p.ids, p.ids + p.length) == pairs[size_t(i)].prompt);
    CHECK(std::vector<uint32_t>(c.ids, c.ids + c.length) == pairs[size_t(i)].chosen);
    CHECK(std::vector<uint32_t>(r.ids, r.ids + r.length) == pairs[size_t(i)].rejected);
  }
  const std::string good = pair_file_bytes(path);
  const size_t offsets_at = size_t(data::kPairHeaderBytes) + 4 * size_t(f.total_tokens());
  CHECK_THAT(pair_load_error(good.substr(0, 40)), Catch::Contains("is truncated"));
  CHECK_THAT(pair_load_error(good.substr(0, good.size() - 8)), Catch::Contains("is truncated"));
  CHECK_THAT(pair_load_error(good + std::string(8, '\0')), Catch::Contains("has trailing bytes"));
  CHECK_THAT(pair_load_error("SGSFT\0\0\0" + good.substr(8)), Catch::Contains("not a pair file"));
  std::string bad = good;
  bad[8] = 2;  // version
  CHECK_THAT(pair_load_error(bad), Catch::Contains("version 2"));
  bad = good;
  put_pair_u64(bad, offsets_at + 8, 0);  // pair 0's prompt empty
  CHECK_THAT(pair_load_error(bad), Catch::Contains("pair 0's prompt"));
  bad = good;
  put_pair_u64(bad, offsets_at + 8 * 3, ~uint64_t(0));  // an end near 2^64
  CHECK_THAT(pair_load_error(bad), Catch::Contains("offsets"));
  bad = good;
  bad[32] = char(uint8_t(bad[32]) ^ 1);  // the largest token
  CHECK_THAT(pair_load_error(bad), Catch::Contains("largest token"));
  CHECK_THAT(pair_load_error(good), Catch::Contains("(no error)"));
}

TEST_CASE("pair rows: answers are the only targets, a pair's sequences stay together, long pairs cut or dropped",
          "[preference][data]") {
  std::vector<data::PairTokens> pairs{{{1, 2, 3}, {4, 5}, {6}}, {{7}, {8, 9, 10}, {11, 12}}};
  auto c = pair_config(pair_file("rows", pairs), false);
  auto s = pair_source(c);
  const data::PairBatch b = s->pairs_in_file_order(0, 2);
  REQUIRE(b.pairs == 2);
  REQUIRE(b.rows.tokens.size(0) == 4);  // unpacked: a row per sequence, chosen then rejected
  auto tgt = b.rows.targets.accessor<int64_t, 2>();
  auto ans = b.answer.accessor<int64_t, 2>();
  // Row 0 is 1 2 3 4 5: positions 2 and 3 predict the answer 4 5; nothing else is a target.
  CHECK(tgt[0][1] == data::kIgnoreIndex);
  CHECK(tgt[0][2] == 4);
  CHECK(tgt[0][3] == 5);
  CHECK(tgt[0][4] == data::kIgnoreIndex);
  CHECK(ans[0][2] == 0);
  CHECK(ans[1][2] == 1);  // the rejected answer 6 of pair 0
  CHECK(tgt[1][2] == 6);
  CHECK(ans[3][0] == 3);  // pair 1's rejected answer starts right after its one-token prompt
  CHECK(b.answer.ge(0).sum().item<int64_t>() == b.rows.valid_tokens());
  CHECK_FALSE(b.reference.defined());

  // Packed: fewer rows, the same targets per answer.
  c.packing = true;
  const data::PairBatch packed = pair_source(c)->pairs_in_file_order(0, 2);
  CHECK(packed.rows.tokens.size(0) < 4);
  CHECK(packed.rows.valid_tokens() == b.rows.valid_tokens());

  // max_target_length=4: pair 0 (3 + 2 tokens) is cut to one chosen answer token, or dropped.
  c.max_target_length = 4;
  c.packing = false;
  const data::PairBatch cut = pair_source(c)->pairs_in_file_order(0, 1);
  CHECK(cut.answer.eq(0).sum().item<int64_t>() == 1);
  c.sft_long_examples = config::SftLongExamples::drop;
  CHECK(pair_source(c)->pairs_kept() == 1);
  // A prompt that fills max_target_length leaves no answer token: the pair is dropped either way.
  c.max_target_length = 3;
  c.sft_long_examples = config::SftLongExamples::truncate;
  CHECK(pair_source(c)->pairs_kept() == 1);
}

TEST_CASE("K=4 ragged pair microbatches = one batch and packed = unpacked (1e-6), for every loss, and TRL's mean of "
          "microbatch means fails",
          "[preference][exact]") {
  const std::string path = pair_file("exact", ragged_pairs(32, 11));
  struct Case {
    config::DpoLossType type;
    double smoothing, nll;
  };
  for (const Case k : {Case{config::DpoLossType::sigmoid, 0, 0}, Case{config::DpoLossType::ipo, 0, 0},
                       Case{config::DpoLossType::hinge, 0, 0}, Case{config::DpoLossType::sigmoid, 0.2, 0},
                       Case{config::DpoLossType::sigmoid, 0, 0.5}}) {
    auto c = pair_config(path, false);
    c.dpo_loss_type = k.type;
    c.dpo_label_smoothing = k.smoothing;
    c.dpo_nll_weight = k.nll;
    c.per_device_batch_size = 8;
    const auto big = pair_step0(c);
    for (bool packing : {false, true}) {
      c.packing = packing;
      c.per_device_batch_size = 2;
      c.gradient_accumulation_steps = 4;
      const auto k4 = pair_step0(c);
      const double err = max_rel_diff(k4, big);
      INFO("loss " << int(k.type) << " smoothing " << k.smoothing << " nll " << k.nll << " packing " << packing
                   << ": K=4 vs one batch " << err);
      CHECK(err <= 1e-6);
      c.gradient_accumulation_steps = 1;
    }
  }

  // The control: TRL's step, (1/K) sum over microbatches of (their pairs' mean + w x their chosen tokens' mean NLL),
  // on the same pairs and weights. With ragged answers the NLL term's weights differ from one batch's.
  auto c = pair_config(path, false);
  c.dpo_nll_weight = 0.5;
  c.per_device_batch_size = 8;
  const auto big = pair_step0(c);
  auto source = pair_source(c);
  source->set_reference(shifted_reference(*source));
  model::Decoder model(model::DecoderOptions::from_config(c));
  accumulate::ShadowAccumulator acc(model->parameters(), at::kFloat);
  const auto options = train::PreferenceOptions::from_config(c);
  double loss = 0;
  std::vector<int64_t> tokens;
  acc.begin();
  for (int64_t m = 0; m < 4; ++m) {
    const data::PairBatch micro = source->pairs(2 * m, 2);
    const auto scores = train::answer_scores(model, micro, c10::Device(c10::kCPU), 64, true);
    train::PreferenceSums ignored;
    tokens.push_back(scores.chosen_tokens);
    auto l = train::preference_objective(scores, micro.reference, options, 0.5 / 4.0,
                                         1.0 / double(scores.chosen_tokens) / 4.0, ignored);
    l.backward();
    loss += l.item<double>();
  }
  acc.end();
  REQUIRE(*std::min_element(tokens.begin(), tokens.end()) < *std::max_element(tokens.begin(), tokens.end()));
  Gradients wrong{loss, {}};
  for (const auto& s : acc.shadows()) wrong.grads.push_back(s.clone());
  const double wrong_err = max_rel_diff(wrong, big);
  INFO("the mean of microbatch means: " << wrong_err);
  CHECK(wrong_err > 1e-3);
}

TEST_CASE("the label-smoothed sigmoid loss and the rewards equal their formulas", "[preference][exact]") {
  auto c = pair_config(pair_file("formula", ragged_pairs(6, 3)), false);
  c.dpo_label_smoothing = 0.3;
  c.dpo_beta = 0.7;
  auto source = pair_source(c);
  const auto ref = shifted_reference(*source);
  source->set_reference(ref);
  model::Decoder model(model::DecoderOptions::from_config(c));
  const data::PairBatch b = source->pairs_in_file_order(0, 6);
  const auto scores = train::answer_scores(model, b, c10::Device(c10::kCPU), 64, true);
  train::PreferenceSums sums;
  const double objective =
      train::preference_objective(scores, b.reference, train::PreferenceOptions::from_config(c), 1.0 / 6, 0, sums)
          .item<double>();
  const at::Tensor logps = scores.logps.detach();
  double expected = 0, chosen = 0, accuracy = 0;
  auto log_sigmoid = [](double x) { return -std::log1p(std::exp(-x)); };
  for (int i = 0; i < 6; ++i) {
    const double rc = 0.7 * (logps[2 * i].item<double>() - ref[size_t(2 * i)]);
    const double rr = 0.7 * (logps[2 * i + 1].item<double>() - ref[size_t(2 * i + 1)]);
    expected += (-(1 - 0.3) * log_sigmoid(rc - rr) - 0.3 * log_sigmoid(rr - rc)) / 6;
    chosen += rc / 6;
    accuracy += (rc > rr) / 6.0;
  }
  CHECK(objective == Approx(expected).epsilon(1e-12));
  CHECK(sums.objective(0) == Approx(expected).epsilon(1e-12));
  const auto m = sums.metrics("");
  CHECK(m[0].first == "rewards_chosen");
  CHECK(m[0].second == Approx(chosen).epsilon(1e-12));
  CHECK(m[2].second == Approx(accuracy));
}

namespace {

const c10::Device kPairCpu(c10::kCPU);

// The reference of `source` (and `eval`) prepared in `dir` by a pass of its own, with no process group.
void prepare_reference(const config::Config& c, data::PairSource& source, model::Decoder& model,
                       const std::string& dir, bool resumed, data::PairSource* eval = nullptr) {
  const train::StopSignals signals;
  train::ReferencePass ref(c, source, eval, c.per_device_batch_size, model, kPairCpu, nullptr, signals);
  ref.prepare(dir, resumed, true);
}

// Step 1 (step 0 of TrainStep) on `source` with `model`: its loss and preference sums.
train::Accumulated first_step(const config::Config& c, const data::PairSource& source, model::Decoder& model) {
  train::TrainStep step(train::StepOptions::from_config(c), model, source, kPairCpu);
  return step.accumulate_batch(0);
}

std::string fresh_reference_dir(const std::string& name) {
  const std::string dir = trainer_process::fresh_dir(name);
  std::filesystem::create_directories(dir);
  return dir;
}

} // namespace

TEST_CASE("the reference file: reused for the same start, continued where a pass stopped, recomputed for another "
          "start, refused on a resume with other pairs",
          "[preference][reference]") {
  const std::string dir = fresh_reference_dir("pref_reference");
  auto c = pair_config(pair_file("reference", ragged_pairs(10, 9)), false);
  c.per_device_batch_size = 4;  // 3 microbatches; the last one reaches into the second epoch
  auto source = pair_source(c);
  model::Decoder model(model::DecoderOptions::from_config(c));
  prepare_reference(c, *source, model, dir, false);
  const std::string file = dir + "/" + train::kReferenceFile;
  REQUIRE(std::filesystem::exists(file));
  // At step 1 the policy is the reference: every reward is 0 and the sigmoid loss is log 2.
  const train::Accumulated first = first_step(c, *source, model);
  CHECK(first.loss == Approx(std::log(2.0)).epsilon(1e-12));
  CHECK(first.preference->rewards_chosen == 0);
  CHECK(first.preference->rewards_rejected == 0);

  // The file: a 64-byte header, a done byte per microbatch (3, padded to 8), then 2 values per kept pair.
  const size_t values = 64 + 8;
  const std::string original = pair_file_bytes(file);
  REQUIRE(original.size() == values + 16 * 10);
  auto value_at = [&](const std::string& bytes, int64_t i) {
    double v;
    std::memcpy(&v, bytes.data() + values + 8 * i, 8);
    return v;
  };
  auto rewrite = [&](std::string bytes) { std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes; };
  // Same pairs, same start: the stored values are used (a marker written into them shows it).
  const int64_t in_first = source->pairs(0, 4).kept[0], in_last = source->pairs(8, 2).kept[0];
  std::string bytes = original;
  const double marker = 123.0;
  std::memcpy(bytes.data() + values + 16 * in_first, &marker, 8);
  rewrite(bytes);
  auto again = pair_source(c);
  prepare_reference(c, *again, model, dir, false);
  CHECK(again->pairs_in_file_order(in_first, 1).reference[0].item<double>() == marker);
  // A pass stopped after 2 of its 3 microbatches: the next run scores the third only.
  bytes[64 + 2] = 0;
  std::memcpy(bytes.data() + values + 16 * in_last, &marker, 8);
  rewrite(bytes);
  auto continued = pair_source(c);
  prepare_reference(c, *continued, model, dir, false);
  CHECK(continued->pairs_in_file_order(in_first, 1).reference[0].item<double>() == marker);  // kept
  CHECK(continued->pairs_in_file_order(in_last, 1).reference[0].item<double>() == value_at(original, 2 * in_last));
  CHECK(pair_file_bytes(file)[64 + 2] == 1);
  // Another start (the weights moved): recomputed.
  model->parameters()[0].data().add_(1.0);
  auto moved = pair_source(c);
  prepare_reference(c, *moved, model, dir, false);
  CHECK(moved->pairs_in_file_order(in_first, 1).reference[0].item<double>() != marker);
  // A resume with other pairs is refused; with none stored too.
  auto other = c;
  other.dataset_path = pair_file("reference_other", ragged_pairs(10, 10));
  auto other_source = pair_source(other);
  CHECK_THROWS_AS(prepare_reference(other, *other_source, model, dir, true), DataError);
  std::filesystem::remove(file);
  CHECK_THROWS_WITH(prepare_reference(c, *again, model, dir, true), Catch::Contains("is missing"));
}

// Before the reference was scored in the step's microbatches, this failed where bf16 matmuls go through oneDNN (AMX,
// avx512_bf16: kernels that depend on the batch; seen at step 1: accuracy 0.750, margin 0.0078). On an AVX2-only CPU
// torch's bf16 fallback computes row by row, the same bits in any rows, and it passed before too.
TEST_CASE("step 1's rewards are exactly 0 in bf16, packed and unpacked: the reference is scored in the step's "
          "microbatches",
          "[preference][reference][bf16]") {
  for (const bool packing : {true, false}) {
    CAPTURE(packing);
    auto c = pair_config(pair_file("bf16", ragged_pairs(8, 4)), packing);
    c.dtype = config::ComputeDtype::bfloat16;
    c.per_device_batch_size = 2;
    c.gradient_accumulation_steps = 2;
    auto source = pair_source(c);
    model::Decoder model(model::DecoderOptions::from_config(c));
    prepare_reference(c, *source, model, fresh_reference_dir("pref_bf16"), false);
    const train::Accumulated first = first_step(c, *source, model);
    CHECK(first.preference->rewards_chosen == 0);
    CHECK(first.preference->rewards_rejected == 0);
    CHECK(first.preference->rewards_accuracy == 0);
    CHECK(first.loss == Approx(std::log(2.0)).epsilon(1e-12));
  }
}

TEST_CASE("use_dpo switches lora_dropout off (learning_rate=0: step 1 is log 2, the margin 0), and "
          "dpo_disable_dropout=false keeps it",
          "[preference][lora]") {
  auto c = pair_config(pair_file("dropout", ragged_pairs(8, 3)), true);
  c.lora_rank = 4;
  c.lora_dropout = 0.1;
  c.learning_rate = 0;
  c.per_device_batch_size = 2;
  c.gradient_accumulation_steps = 2;
  auto first = [&](bool disable) {
    c.dpo_disable_dropout = disable;
    auto source = pair_source(c);
    model::Decoder model(model::DecoderOptions::from_config(c));
    // A started adapter (B != 0, as one restored from lora_restore_path), so that dropout changes the output.
    for (auto& p : model->named_parameters())
      if (p.key().find("_lora_b") != std::string::npos)
        p.value().data().copy_(at::sin(at::arange(p.value().numel(), at::kFloat)).reshape(p.value().sizes()) * 0.3);
    prepare_reference(c, *source, model, fresh_reference_dir("pref_dropout"), false);
    return first_step(c, *source, model);
  };
  const train::Accumulated off = first(true);
  CHECK(off.loss == Approx(std::log(2.0)).epsilon(1e-12));
  CHECK(off.preference->rewards_chosen - off.preference->rewards_rejected == 0);
  const train::Accumulated kept = first(false);
  CHECK(std::abs(kept.loss - std::log(2.0)) > 1e-4);
}

TEST_CASE("a pair is two sequences in the memory check: twice the activations of a row per example",
          "[preference][memory]") {
  auto c = pair_config(pair_file("memory", ragged_pairs(4)), true);
  c.per_device_batch_size = 3;
  auto rows = c;
  rows.dataset_type = config::DatasetType::synthetic;
  rows.use_dpo = false;
  CHECK(train::footprint_from_config(c, 1).activations == 2 * train::footprint_from_config(rows, 1).activations);
}

TEST_CASE("the starting weights' fingerprint: the same at 1 and 2 threads, another when one byte changes",
          "[preference][reference]") {
  auto c = tiny_config();
  model::Decoder model(model::DecoderOptions::from_config(c));
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const uint64_t one = train::starting_weights_key(model);
  at::set_num_threads(2);
  CHECK(train::starting_weights_key(model) == one);
  at::set_num_threads(threads);
  at::Tensor last = model->parameters().back();
  auto* byte = static_cast<uint8_t*>(last.data_ptr()) + last.nbytes() - 1;
  *byte ^= 1;
  CHECK(train::starting_weights_key(model) != one);
  *byte ^= 1;
  CHECK(train::starting_weights_key(model) == one);
}

TEST_CASE("use_dpo and dataset_type=preference need each other: exit 2 naming the key", "[preference][cli]") {
  const std::string path = pair_file("cli", ragged_pairs(4));
  auto r = trainer_process::run("tiny.yml use_dpo=true steps=1");
  CHECK(r.code == 2);
  CHECK_THAT(r.output, Catch::Contains("dataset_type=preference"));
  r = trainer_process::run("tiny.yml dataset_type=preference dataset_path=" + path + " steps=1");
  CHECK(r.code == 2);
  CHECK_THAT(r.output, Catch::Contains("use_dpo=true"));
  r = trainer_process::run("tiny.yml dataset_type=preference use_dpo=true dpo_loss_type=ipo dpo_label_smoothing=0.1 "
                           "dataset_path=" + path + " steps=1");
  CHECK(r.code == 2);
  CHECK_THAT(r.output, Catch::Contains("dpo_label_smoothing"));
}
