#include "model/WeightCount.h"

#include <algorithm>
#include <array>

#include <c10/core/ScalarType.h>
#include <fmt/format.h>

#include "memory/Footprint.h"
#include "memory/MemoryBudget.h"
#include "util/Errors.h"
#include "util/Saturating.h"

namespace shadowgrad::model {

namespace {

using util::sat_add;
using util::sat_mul;

// [in, out] of each projection, in Projection's order.
std::array<std::array<int64_t, 2>, kProjections> projection_sides(const DecoderOptions& o) {
  const int64_t E = o.emb_dim, Q = sat_mul(o.num_query_heads, o.head_dim), KV = sat_mul(o.num_kv_heads, o.head_dim),
                M = o.mlp_dim;
  return {{{E, Q}, {E, KV}, {E, KV}, {Q, E}, {E, M}, {E, M}, {M, E}}};
}

} // namespace

WeightCount count_weights(const DecoderOptions& o) {
  const int64_t E = o.emb_dim;
  const auto sides = projection_sides(o);
  const int64_t layer_norms = sat_add(sat_mul(2, E), o.qk_norm ? sat_mul(2, o.head_dim) : 0);
  int64_t layer = layer_norms;
  for (const auto& [in, out] : sides) layer = sat_add(layer, sat_mul(in, out));
  if (o.attention_bias) layer = sat_add(layer, sat_add(sides[0][1], sat_mul(2, sides[1][1])));  // q, k, v biases
  const int64_t embedding = sat_mul(o.vocab_size, E);
  WeightCount n;
  n.base = sat_add(sat_add(sat_mul(embedding, o.tied_output ? 1 : 2), E), sat_mul(o.num_layers, layer));
  n.never_cast = sat_add(sat_add(sat_mul(o.num_layers, layer_norms), E), o.tied_output ? 0 : embedding);
  for (Projection p : kAllProjections)
    if (o.lora.targets(p))
      n.adapters = sat_add(n.adapters, sat_mul(sat_mul(o.num_layers, o.lora.rank),
                                               sat_add(sides[int(p)][0], sides[int(p)][1])));
  n.bytes = sat_add(sat_mul(n.base, int64_t(c10::elementSize(o.weight_dtype))),
                    sat_mul(n.adapters, int64_t(c10::elementSize(c10::kFloat))));
  return n;
}

void refuse_weights_beyond_headroom(const DecoderOptions& o, const std::string& what) {
  const WeightCount n = count_weights(o);
  const memory::MemoryHeadroom headroom = memory::read_headroom();
  if (headroom.bytes < 0 || n.bytes <= headroom.bytes) return;
  const std::string adapters =
      o.lora.enabled() ? fmt::format(" and {:.4g} fp32 adapter values (LoRA r={})", double(n.adapters), o.lora.rank)
                       : "";
  throw InputError(fmt::format("{}: its weights alone take {} ({:.4g} base values in {}{}), more than this process may "
                               "take, {} ({}); found before allocating them",
                               what, memory::gib(n.bytes), double(n.base), c10::toString(o.weight_dtype), adapters,
                               memory::gib(headroom.bytes), headroom.source));
}

std::string lora_rank_warning(const DecoderOptions& o) {
  if (!o.lora.enabled()) return "";
  const auto sides = projection_sides(o);
  std::string over;
  for (Projection p : kAllProjections) {
    const int64_t side = std::min(sides[int(p)][0], sides[int(p)][1]);
    if (o.lora.targets(p) && o.lora.rank > side)
      over += fmt::format("{}{} ({} x {})", over.empty() ? "" : ", ", hf_projection_name(p), sides[int(p)][1],
                          sides[int(p)][0]);
  }
  if (over.empty()) return "";
  return fmt::format("LoRA r={} is above the smaller side of {}: B A has rank at most that side, so the extra rank adds "
                     "parameters and memory but nothing a full-rank update of the projection could not do; a rank up "
                     "to the smaller side is as expressive",
                     o.lora.rank, over);
}

} // namespace shadowgrad::model
