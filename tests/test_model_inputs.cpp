// Batch::model_inputs() (src/data/Batch.h): unpacked SFT rows (one example each, right-padded) go to the model
// without segment ids, so attention takes scaled_dot_product_attention's causal path instead of a [B, T, T] mask, with
// the same loss and gradient; every batch the mask matters for keeps it (two examples in a row, padding before an
// example, an example that starts past its row's first token), and for those dropping it would change the loss.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>

#include "Gradients.h"
#include "TinyConfig.h"
#include "TokenFiles.h"
#include "data/Batch.h"
#include "data/SftFile.h"
#include "data/SftSource.h"
#include "model/Decoder.h"
#include "train/TokenLoss.h"

using namespace shadowgrad;

namespace {

// 20 examples of 2-13 tokens (so every row of 16 has 3 or more padding tokens), a prompt then a counting completion
// (the target).
std::string ragged_sft_file() {
  std::vector<std::vector<uint32_t>> tokens;
  std::vector<std::vector<uint8_t>> targets;
  uint32_t h = 11;
  auto next = [&] { return h = h * 1664525u + 1013904223u, h >> 8; };
  for (int i = 0; i < 20; ++i) {
    const int length = 2 + int(next() % 12), prompt = 1 + int(next() % uint32_t(length - 1));
    tokens.emplace_back();
    targets.emplace_back();
    for (int j = 0; j < length; ++j) {
      tokens.back().push_back(j < prompt ? next() % 64 : (tokens.back().back() + 1) % 64);
      targets.back().push_back(j >= prompt);
    }
  }
  const std::string path = token_files::temp_path("model_inputs.sft");
  data::write_sft_file(path, tokens, targets);
  return path;
}

config::Config sft(const std::string& path, bool packing, const std::string& attention) {
  auto c = tiny_config();
  c.dataset_type = config::DatasetType::sft;
  c.dataset_path = path;
  c.packing = packing;
  set_key(c, "attention", attention);
  return c;
}

// The summed loss over all targets / their count, and every parameter's gradient, of `b` as the model gets it.
gradients::Gradients loss_of(model::Decoder& model, const data::Batch& b) {
  model->zero_grad();
  const auto logits = model->forward(b.tokens, b.segments, b.positions);
  auto loss = train::token_loss_sum(logits, b.targets) / double(b.valid_tokens());
  loss.backward();
  gradients::Gradients g{loss.item<double>(), {}};
  for (const auto& p : model->parameters()) g.grads.push_back(p.grad().clone());
  return g;
}

} // namespace

TEST_CASE("unpacked SFT rows reach the model without segment ids, with the same loss and gradient (1e-6)",
          "[sft][data]") {
  const std::string path = ragged_sft_file();
  for (const char* attention : {"autoselected", "dot_product"}) {
    INFO("attention=" << attention);
    auto c = sft(path, false, attention);
    data::SftSource unpacked(data::SftFile::open(path, "dataset_path"), data::DataOptions::from_config(c),
                             "dataset_path");
    const data::Batch rows = unpacked.examples(0, 0, 12), eval = unpacked.eval_examples(0, 24);  // 4 empty rows
    REQUIRE(rows.segments.defined());  // the batch keeps them: real_tokens() counts padding with them
    for (const data::Batch& b : {rows, eval, rows.slice(3, 4)}) {
      const data::Batch in = b.model_inputs();
      CHECK_FALSE(in.segments.defined());
      CHECK_FALSE(in.positions.defined());
      CHECK(in.tokens.is_same(b.tokens));
      CHECK(in.targets.is_same(b.targets));
    }
    model::Decoder model(model::DecoderOptions::from_config(c));
    const double err = gradients::max_rel_diff(loss_of(model, rows.model_inputs()), loss_of(model, rows));
    INFO("causal path against the block mask, max relative difference " << err);
    CHECK(err <= 1e-6);

    c.packing = true;
    data::SftSource packed(data::SftFile::open(path, "dataset_path"), data::DataOptions::from_config(c),
                           "dataset_path");
    const data::Batch several = packed.eval_examples(0, packed.eval_capacity());
    REQUIRE(several.segments.max().item<int64_t>() > 1);
    CHECK(several.model_inputs().segments.is_same(several.segments));  // the block mask stays
  }
}

TEST_CASE("model_inputs keeps the segment ids wherever plain causal attention would differ", "[sft][data]") {
  const std::string path = ragged_sft_file();
  auto source = [&](bool packing) {
    return data::SftSource(data::SftFile::open(path, "dataset_path"),
                           data::DataOptions::from_config(sft(path, packing, "autoselected")), "dataset_path");
  };
  const data::Batch one = source(false).examples(0, 0, 6), packed = source(true).examples(0, 0, 4);
  model::Decoder model(model::DecoderOptions::from_config(tiny_config()));
  // Each case keeps its ids, and dropping them would change the loss: the check is not idle.
  auto must_keep = [&](const data::Batch& b, const char* what) {
    INFO(what);
    CHECK(b.model_inputs().segments.is_same(b.segments));
    const data::Batch bare{b.tokens, b.targets, {}, {}};
    CHECK(gradients::max_rel_diff(loss_of(model, bare), loss_of(model, b)) > 1e-3);
  };
  REQUIRE(packed.segments.max().item<int64_t>() > 1);
  must_keep(packed, "several examples in a row");
  // Every row right-rotated by 3, into its padding: the example after 3 padding tokens, at positions 0.. .
  auto rolled = [](const at::Tensor& t) { return at::roll(t, {3}, {1}); };
  must_keep({rolled(one.tokens), rolled(one.targets), rolled(one.segments), rolled(one.positions)},
            "padding before the example");
  // No padding before it, but an example whose RoPE positions are not its indices.
  const data::Batch offset{one.tokens, one.targets, one.segments, one.positions + one.segments};
  CHECK(offset.model_inputs().segments.is_same(offset.segments));
}
