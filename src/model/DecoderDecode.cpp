// The generation path of the decoder: a KV cache per layer, filled by a prefill and then one token per call
// (src/generate). Training never comes here; its attention is DecoderImpl::attention in Decoder.cpp.
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
  auto x = compute(embedding_.index_select(0, tokens.flatten())).view({B, T, -1});
  for (const auto& b : blocks_) {
    auto y = x + cached_attention(b, x, cache, positions);
    x = y + mlp(b, y);
  }
  cache.length = start + T;
  // Only the last position reaches the vocabulary (RMSNorm is per position).
  return at::linear(rms_norm(x.select(1, T - 1), final_norm_), output_weight());
}

torch::Tensor DecoderImpl::cached_attention(const Block& b, const torch::Tensor& x, KvCache& cache,
                                            const torch::Tensor& positions) {
  const auto& o = options_;
  const int64_t B = x.size(0), T = x.size(1), G = o.num_kv_heads, R = o.num_query_heads / G, D = o.head_dim;
  const int64_t start = cache.length, S = start + T;
  auto [q_proj, k_proj, v] = heads(b, x);
  const double scale = 1.0 / std::sqrt(double(D));
  // [B,H,T,D] and [B,G,T,D], rotated at their absolute positions, as attention_core does.
  auto q = o.fused_kernels ? rope(q_proj, rope_cos_, rope_sin_, scale, positions)
                           : apply_rope(q_proj.transpose(1, 2), positions).mul_(scale);
  auto k = o.fused_kernels ? rope(k_proj, rope_cos_, rope_sin_, 1.0, positions)
                           : apply_rope(k_proj.transpose(1, 2), positions);
  auto& k_cache = cache.k[b.index];
  auto& v_cache = cache.v[b.index];
  k_cache.narrow(2, start, T).copy_(k);
  v_cache.narrow(2, start, T).copy_(v.transpose(1, 2));
  auto keys = k_cache.narrow(2, 0, S), values = v_cache.narrow(2, 0, S);
  // New token i (position start+i) sees positions 0..start+i: no mask for one token, the plain causal one for a
  // prefill from 0, else the causal mask's rows start..S-1.
  const bool causal_from_zero = start == 0 && T > 1;
  auto mask = T > 1 && !causal_from_zero ? causal_mask_.slice(0, start, S).slice(1, 0, S) : at::Tensor();
  at::Tensor out;
  if (o.attention == DecoderOptions::Attention::autoselected) {
    out = at::scaled_dot_product_attention(q, keys, values, mask.defined() ? std::optional<at::Tensor>(mask) : std::nullopt,
                                           0.0, causal_from_zero, 1.0, /*enable_gqa=*/G != o.num_query_heads);
  } else {
    auto scores = at::matmul(q.reshape({B, G, R * T, D}), keys.transpose(-2, -1));  // [B,G,R*T,S]
    if (T > 1) scores.view({B, G, R, T, S}).add_(causal_mask_.slice(0, start, S).slice(1, 0, S));
    out = at::matmul(at::softmax(scores, -1), values).view({B, o.num_query_heads, T, D});
  }
  return project(b, Projection::o, out.transpose(1, 2).reshape({B, T, o.num_query_heads * D}));
}

} // namespace shadowgrad::model
