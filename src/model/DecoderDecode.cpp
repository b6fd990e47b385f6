// The generation path of the decoder: a KV cache per layer, filled by a prefill and then one token per call
// (src/generate). Attention itself is training's (DecoderImpl::attention_core in Decoder.cpp), given the cache.
#include <cmath>
#include <optional>
#include <stdexcept>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "model/Decoder.h"
#include "model/RopeFunction.h"
#include "util/Errors.h"

namespace shadowgrad::model {

KvCache DecoderImpl::new_cache(int64_t batch, int64_t capacity) const {
  if (batch < 1 || capacity < 1 || capacity > options_.max_length)
    throw InputError(fmt::format("a KV cache holds 1 to max_length ({}) positions of at least one sequence; asked for "
                                 "{} x {}", options_.max_length, batch, capacity));
  KvCache cache;
  const auto opts = rope_cos_.options();  // the compute dtype, on the model's device
  for (size_t i = 0; i < blocks_.size(); ++i)
    for (auto* t : {&cache.k, &cache.v})
      t->push_back(at::empty({batch, options_.num_kv_heads, capacity, options_.head_dim}, opts));
  return cache;
}

torch::Tensor DecoderImpl::decode(const torch::Tensor& tokens, KvCache& cache) {
  const int64_t start = cache.length;
  if (tokens.dim() != 2 || tokens.size(1) < 1 || tokens.size(0) != cache.batch() ||
      int64_t(cache.k.size()) != options_.num_layers)
    throw std::invalid_argument(fmt::format("decode: tokens must be [{}, >= 1] for this cache, got {}", cache.batch(),
                                            c10::str(tokens.sizes())));
  const int64_t B = tokens.size(0), T = tokens.size(1);
  if (start + T > cache.capacity())
    throw InputError(fmt::format("{} more positions after {} do not fit the KV cache's {} (max_target_length {})", T,
                                 start, cache.capacity(), options_.max_length));
  at::NoGradGuard no_grad;
  auto positions = at::arange(start, start + T, tokens.options().dtype(at::kLong)).expand({B, T}).contiguous();
  // ZeRO-3: each unit is gathered for its forward and let go after it, as in training's forward without grad.
  auto begin = [&](int64_t unit) { if (units_.forward_begin) units_.forward_begin(unit); };
  auto end = [&](int64_t unit) { if (units_.forward_end) units_.forward_end(unit); };
  begin(0);
  auto x = compute(embedding_.index_select(0, tokens.flatten())).view({B, T, -1});
  if (!options_.tied_output) end(0);
  for (const auto& b : blocks_) {
    begin(b.index + 1);
    auto y = x + cached_attention(b, x, cache, positions);
    x = y + mlp(b, y);
    end(b.index + 1);
  }
  cache.length = start + T;
  // Only the last position reaches the vocabulary (RMSNorm is per position).
  begin(num_units() - 1);
  return logits(rms_norm(x.select(1, T - 1), final_norm_));
}

torch::Tensor DecoderImpl::cached_attention(const Block& b, const torch::Tensor& x, KvCache& cache,
                                            const torch::Tensor& positions) {
  auto [q, k, v] = heads(b, x);
  const CacheSlot slot{cache.k[b.index], cache.v[b.index], cache.length};
  // Training's attention itself (Decoder.cpp), reading and extending the cache.
  auto out = attention_core(q, k, v, Layout{{}, positions}, &slot);
  return project(b, Projection::o, out);
}

} // namespace shadowgrad::model
