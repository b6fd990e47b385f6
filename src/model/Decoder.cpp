#include "model/Decoder.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <optional>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include "config/Config.h"
#include "config/Dtypes.h"
#include "model/BackwardCall.h"
#include "model/FrozenLinear.h"
#include "model/Remat.h"
#include "model/RmsNormFunction.h"
#include "model/RopeTable.h"
#include "model/RopeFunction.h"
#include "model/SwiGluFunction.h"
#include "util/Errors.h"
#include "util/Hash.h"

namespace shadowgrad::model {

namespace {

// A generator of `device`'s kind seeded with `seed` alone (a CUDA one: Philox at offset 0), so a draw from it is a
// function of the seed.
at::Generator seeded_generator(c10::Device device, uint64_t seed) {
  if (device.is_cpu()) return at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Generator base = at::globalContext().defaultGenerator(device), g;
  {
    std::lock_guard<std::mutex> lock(base.mutex());
    g = base.clone();
  }
  g.set_current_seed(seed);
  return g;
}

} // namespace

DecoderOptions DecoderOptions::from_config(const config::Config& c) {
  DecoderOptions o;
  o.vocab_size = c.vocab_size;
  o.emb_dim = c.base_emb_dim;
  o.num_query_heads = c.base_num_query_heads;
  o.num_kv_heads = c.base_num_kv_heads;
  o.head_dim = c.head_dim;
  o.mlp_dim = c.base_mlp_dim;
  o.num_layers = c.base_num_decoder_layers;
  o.max_length = c.max_target_length;
  o.norm_eps = c.normalization_layer_epsilon;
  o.rope_max_timescale = c.rope_max_timescale;
  o.rope_scaling = RopeScaling::from_config(c);
  o.attention_bias = c.attention_bias;
  o.qk_norm = c.use_qk_norm;
  o.tied_output = c.logits_via_embedding;
  o.compute_dtype = config::scalar_type(config::resolve_compute_dtype(c.dtype, c.hardware));
  o.weight_dtype = config::scalar_type(c.weight_dtype);
  o.init_seed = static_cast<uint64_t>(c.init_weights_seed);
  // ZeRO-3 holds a layer's weights only around its use; a cast copy of every weight held for the step would undo it.
  o.hoist_weight_cast = c.hoist_weight_cast && !c.shard_parameters_over_data;
  o.fused_kernels = c.fused_kernels;
  o.remat = c.remat_policy;
  o.attention = c.attention;
  o.lora = LoraOptions::from_config(c);
  return o;
}

DecoderImpl::DecoderImpl(const DecoderOptions& o, const UnitBuilt& unit_built) : options_(o) {
  if (o.num_query_heads % o.num_kv_heads != 0)
    throw ConfigError(fmt::format("num_query_heads ({}) must be a multiple of num_kv_heads ({})", o.num_query_heads,
                                  o.num_kv_heads));
  // Initialise on CPU in fp32 from one generator, in a fixed order, so weights depend only on init_seed.
  auto gen = at::make_generator<at::CPUGeneratorImpl>(o.init_seed);
  const double residual_std = 0.02 / std::sqrt(2.0 * o.num_layers);
  // Under LoRA the base is frozen: buffers, so parameters() is the adapters alone. The draws are the same either way.
  auto base = [&](const std::string& name, torch::Tensor t) {
    return o.lora.enabled() ? register_buffer(name, t.to(o.weight_dtype)) : register_parameter(name, t.to(o.weight_dtype));
  };
  auto param = [&](const std::string& name, std::vector<int64_t> shape, double std) {
    return base(name, std > 0 ? at::empty(shape, at::kFloat).normal_(0, std, gen) : at::ones(shape, at::kFloat));
  };
  auto zeros = [&](const std::string& name, int64_t size) { return base(name, at::zeros({size}, at::kFloat)); };
  // peft's initialisation, from a generator of its own so the base draws do not move: A kaiming-uniform with
  // a = sqrt(5), that is U(-1/sqrt(in), 1/sqrt(in)); B zero, so the first forward equals the base model's.
  auto lora_gen = at::make_generator<at::CPUGeneratorImpl>(util::mix64(o.init_seed ^ 0x4c6f5241ull));
  const int64_t E = o.emb_dim, Q = o.num_query_heads * o.head_dim, KV = o.num_kv_heads * o.head_dim;
  // A tied embedding is also the output projection, so it starts at the output's scale.
  embedding_ = param("embedding", {o.vocab_size, E}, o.tied_output ? 0.02 : 1.0);
  auto built = [&](int64_t unit) {
    if (unit_built) unit_built(unit, *this);
  };
  built(0);
  for (int64_t i = 0; i < o.num_layers; ++i) {
    const std::string p = fmt::format("layer{}_", i);
    Block b;
    b.index = i;
    b.attn_norm = param(p + "attn_norm", {E}, 0);
    b.wq = param(p + "wq", {Q, E}, 0.02);
    b.wk = param(p + "wk", {KV, E}, 0.02);
    b.wv = param(p + "wv", {KV, E}, 0.02);
    b.wo = param(p + "wo", {E, Q}, residual_std);
    b.mlp_norm = param(p + "mlp_norm", {E}, 0);
    b.w_gate = param(p + "w_gate", {o.mlp_dim, E}, 0.02);
    b.w_up = param(p + "w_up", {o.mlp_dim, E}, 0.02);
    b.w_down = param(p + "w_down", {E, o.mlp_dim}, residual_std);
    if (o.attention_bias) {
      b.bq = zeros(p + "bq", Q);
      b.bk = zeros(p + "bk", KV);
      b.bv = zeros(p + "bv", KV);
    }
    if (o.qk_norm) {
      b.q_norm = param(p + "q_norm", {o.head_dim}, 0);
      b.k_norm = param(p + "k_norm", {o.head_dim}, 0);
    }
    for (Projection proj : kAllProjections) {
      if (!o.lora.targets(proj)) continue;
      const auto& w = b.weight(proj);
      const int64_t out = w.size(0), in = w.size(1), r = o.lora.rank;
      const std::string name = p + projection_suffix(proj);
      const double bound = 1.0 / std::sqrt(double(in));
      b.lora[int(proj)].a = register_parameter(name + "_lora_a", at::empty({r, in}, at::kFloat).uniform_(-bound, bound, lora_gen));
      b.lora[int(proj)].b = register_parameter(name + "_lora_b", at::zeros({out, r}, at::kFloat));
    }
    blocks_.push_back(b);
    built(i + 1);
  }
  final_norm_ = param("final_norm", {E}, 0);
  output_ = o.tied_output ? embedding_ : param("output", {o.vocab_size, E}, 0.02);
  built(o.num_layers + 1);

  // RoPE tables are computed once, in fp64, and stored in the compute dtype (half-split convention).
  auto inv_freq = rope_inverse_frequencies(o.rope_max_timescale, o.head_dim, o.rope_scaling);
  auto angles = at::outer(at::arange(o.max_length, at::kDouble), inv_freq);  // [T, D/2]
  rope_cos_ = register_buffer("rope_cos", at::cat({angles.cos(), angles.cos()}, -1).to(o.compute_dtype));
  rope_sin_ = register_buffer("rope_sin", at::cat({angles.sin(), angles.sin()}, -1).to(o.compute_dtype));
  causal_mask_ = register_buffer(
      "causal_mask",
      at::full({o.max_length, o.max_length}, -std::numeric_limits<float>::infinity(), o.compute_dtype).triu(1));
}

const torch::Tensor& DecoderImpl::Block::weight(Projection p) const {
  const torch::Tensor* w[] = {&wq, &wk, &wv, &wo, &w_gate, &w_up, &w_down};
  return *w[int(p)];
}

const torch::Tensor& DecoderImpl::Block::bias(Projection p) const {
  static const torch::Tensor none;
  return p == Projection::q ? bq : p == Projection::k ? bk : p == Projection::v ? bv : none;
}

torch::Tensor* DecoderImpl::find_weight(const std::string& name) {
  if (auto* p = named_parameters(/*recurse=*/false).find(name)) return p;
  return named_buffers(/*recurse=*/false).find(name);
}

bool DecoderImpl::adapted(const Block& b, Projection p) const {
  return b.lora[int(p)].a.defined() && !b.weight(p).requires_grad() && (options_.lora.dropout <= 0 || !is_training());
}

std::vector<torch::Tensor> DecoderImpl::project(const Block& b, std::initializer_list<Projection> ps,
                                                const torch::Tensor& x) const {
  const bool biased = b.bias(*ps.begin()).defined();
  const bool fused = std::all_of(ps.begin(), ps.end(),
                                 [&](Projection p) { return adapted(b, p) && b.bias(p).defined() == biased; });
  std::vector<torch::Tensor> out;
  if (!fused) {
    for (Projection p : ps) out.push_back(project(b, p, x));
    return out;
  }
  // The adapters in the compute dtype: compute() casts each once per step (hoist_weight_cast), fp32 ones not at all.
  std::vector<AdaptedProjection> adapters;
  for (Projection p : ps)
    adapters.push_back({frozen(b.weight(p)), frozen(b.bias(p)), compute(b.lora[int(p)].a), compute(b.lora[int(p)].b)});
  return adapted_linear(x, adapters, options_.lora.scale);
}

torch::Tensor DecoderImpl::project(const Block& b, Projection p, const torch::Tensor& x) const {
  const torch::Tensor &weight = b.weight(p), &bias = b.bias(p);
  if (adapted(b, p)) return project(b, {p}, x)[0];
  torch::Tensor y = !weight.requires_grad() ? frozen_linear(x, frozen(weight), frozen(bias))
                    : bias.defined()        ? at::linear(x, compute(weight), compute(bias))
                                            : at::linear(x, compute(weight));
  const Adapter& adapter = b.lora[int(p)];
  if (!adapter.a.defined()) return y;
  // peft's order: base(x) + lora_B(lora_A(dropout(x))) * scale.
  auto branch = at::linear(at::linear(lora_input(x, b.index, p), compute(adapter.a)), compute(adapter.b));
  return y + branch * options_.lora.scale;
}

torch::Tensor DecoderImpl::lora_input(const torch::Tensor& x, int64_t layer, Projection p) const {
  const double drop = options_.lora.dropout;
  if (drop <= 0 || !is_training()) return x;
  // One generator per row, keyed by the row's global sequence number: the same mask at any K, any process count,
  // after a resume, and again when remat re-runs the block. Drawn on x's device, 1 byte an element: backward keeps
  // the mask alone (where's condition), not a copy in the compute dtype.
  const int64_t rows = x.size(0);
  auto keep = at::empty(x.sizes(), x.options().dtype(at::kBool));
  for (int64_t r = 0; r < rows; ++r) {
    const uint64_t key = util::mix64(util::mix64(options_.lora.dropout_seed ^ uint64_t(dropout_first_row_ + r)) ^
                                     uint64_t(layer * kProjections + int(p)));
    keep[r].bernoulli_(1.0 - drop, seeded_generator(x.device(), key));
  }
  return at::where(keep, x * (1.0 / (1.0 - drop)), 0.0);
}

torch::Tensor DecoderImpl::head_norm(const torch::Tensor& x, const torch::Tensor& weight) const {
  return weight.defined() ? rms_norm(x, weight) : x;
}

torch::Tensor DecoderImpl::rms_norm(const torch::Tensor& x, const torch::Tensor& weight) const {
  // fp32 math inside (a bf16 mean of squares loses too much precision), one node: x's two uses inside the norm
  // are one input of it, so remat_policy=minimal, which re-runs it, sums x's gradients in the same order.
  auto y = options_.fused_kernels ? fused_rms_norm(x, weight, options_.norm_eps)
                                  : rms_norm_op_chain(x, weight, options_.norm_eps);
  return y.to(options_.compute_dtype);
}

torch::Tensor DecoderImpl::apply_rope(const torch::Tensor& x, const torch::Tensor& positions) const {
  const int64_t T = x.size(2), half = x.size(3) / 2;
  auto cos = rope_cos_.slice(0, 0, T), sin = rope_sin_.slice(0, 0, T);
  if (positions.defined()) {  // each token's own row of the tables: [B,1,T,D], broadcast over heads
    cos = rope_cos_.index_select(0, positions.flatten()).view({x.size(0), 1, T, -1});
    sin = rope_sin_.index_select(0, positions.flatten()).view({x.size(0), 1, T, -1});
  }
  auto rotated = at::cat({-x.slice(-1, half), x.slice(-1, 0, half)}, -1);
  return x * cos + rotated * sin;
}

torch::Tensor DecoderImpl::block_norm(const torch::Tensor& x, const torch::Tensor& weight) const {
  if (!minimal()) return rms_norm(x, weight);
  return rematerialise({x}, [this, &weight](const std::vector<at::Tensor>& in) { return rms_norm(in[0], weight); });
}

torch::Tensor DecoderImpl::block(const Block& b, const torch::Tensor& x, const Layout& layout) {
  auto body = [this, &b, layout](const std::vector<at::Tensor>& in) {
    auto y = in[0] + attention(b, in[0], layout);
    return y + mlp(b, y);
  };
  if (options_.remat == DecoderOptions::Remat::full) return rematerialise({x}, body);
  return body({x});
}

DecoderImpl::Heads DecoderImpl::heads(const Block& b, const torch::Tensor& x) {
  const auto& o = options_;
  const int64_t B = x.size(0), T = x.size(1), G = o.num_kv_heads;
  auto h = block_norm(x, b.attn_norm);
  auto qkv = project(b, {Projection::q, Projection::k, Projection::v}, h);
  return {head_norm(qkv[0].view({B, T, o.num_query_heads, o.head_dim}), b.q_norm),
          head_norm(qkv[1].view({B, T, G, o.head_dim}), b.k_norm), qkv[2].view({B, T, G, o.head_dim})};
}

torch::Tensor DecoderImpl::attention(const Block& b, const torch::Tensor& x, const Layout& layout) {
  auto [q, k, v] = heads(b, x);
  auto out = minimal() ? rematerialise({q, k, v},
                                       [this, layout](const std::vector<at::Tensor>& in) {
                                         return attention_core(in[0], in[1], in[2], layout);
                                       })
                       : attention_core(q, k, v, layout);
  return project(b, Projection::o, out);
}

torch::Tensor DecoderImpl::attention_core(const torch::Tensor& q_proj, const torch::Tensor& k_proj,
                                          const torch::Tensor& v_proj, const Layout& layout,
                                          const CacheSlot* cache) const {
  const auto& o = options_;
  const int64_t B = q_proj.size(0), T = q_proj.size(1), G = o.num_kv_heads, R = o.num_query_heads / o.num_kv_heads;
  // Rotate, scale the small side (q; 1/sqrt(64) is a power of two, so exact), and move to [B,H,T,D]: one fused
  // pass each (model/RopeFunction.h), or the ATen op chain.
  const double scale = 1.0 / std::sqrt(double(o.head_dim));
  const auto& pos = layout.positions;
  auto q = o.fused_kernels ? rope(q_proj, rope_cos_, rope_sin_, scale, pos)
                           : apply_rope(q_proj.transpose(1, 2), pos).mul_(scale);
  auto k = o.fused_kernels ? rope(k_proj, rope_cos_, rope_sin_, 1.0, pos) : apply_rope(k_proj.transpose(1, 2), pos);
  auto v = v_proj.transpose(1, 2);
  // Keys and values: this call's own, or the cache's after this call's are written into it.
  const int64_t start = cache ? cache->start : 0, S = start + T;
  if (cache) {
    cache->k.narrow(2, start, T).copy_(k);
    cache->v.narrow(2, start, T).copy_(v);
    k = cache->k.narrow(2, 0, S);
    v = cache->v.narrow(2, 0, S);
  }
  // The mask: a packed batch's block-causal one (additive, [B,1,T,T] over the heads); else causal from position 0
  // (SDPA's own causal kernel), none for one new token, or the causal mask's rows start..S-1 for a chunk after start.
  at::Tensor mask = layout.mask.defined() ? layout.mask.view({B, 1, T, T})
                    : start > 0 && T > 1  ? causal_mask_.slice(0, start, S).slice(1, 0, S)
                                          : at::Tensor();
  const bool causal = !mask.defined() && start == 0 && T > 1;
  if (o.attention == DecoderOptions::Attention::autoselected) {
    auto out = at::scaled_dot_product_attention(q, k, v, mask.defined() ? std::optional<at::Tensor>(mask) : std::nullopt,
                                                0.0, causal, 1.0, /*enable_gqa=*/G != o.num_query_heads);
    return out.transpose(1, 2).reshape({B, T, o.num_query_heads * o.head_dim});
  }
  // Grouped-query attention without copying K/V: the R query heads of a group are stacked along the
  // row dimension, so one batched matmul per group serves them all.
  auto qg = q.reshape({B, G, R * T, o.head_dim});  // a view of the fused RoPE's contiguous output
  auto scores = at::matmul(qg, k.transpose(-2, -1));  // [B, G, R*T, S]
  if (mask.defined())
    scores.view({B, G, R, T, S}).add_(mask.dim() == 4 ? mask.unsqueeze(1) : mask);
  else if (causal)
    scores.view({B, G, R, T, S}).add_(causal_mask_.slice(0, 0, T).slice(1, 0, T));
  // Softmax in the compute dtype: the kernel accumulates in fp32 and rounds once, as a fp32 softmax followed by
  // a cast would, without two extra fp32 [T x T] tensors per head (measured in docs/performance.md).
  auto probs = at::softmax(scores, -1).view({B, G, R * T, S});
  auto out = at::matmul(probs, v).view({B, o.num_query_heads, T, o.head_dim});
  return out.transpose(1, 2).reshape({B, T, o.num_query_heads * o.head_dim});
}

torch::Tensor DecoderImpl::mlp(const Block& b, const torch::Tensor& x) {
  auto h = block_norm(x, b.mlp_norm);
  auto gate_up = project(b, {Projection::gate, Projection::up}, h);
  const auto &gate = gate_up[0], &up = gate_up[1];
  // silu(gate) * up in one fused node (model/SwiGluFunction.h). It keeps only gate and up for backward, as
  // remat_policy=minimal's rematerialisation of the op chain does, so every policy runs it plainly.
  auto gated = options_.fused_kernels ? swiglu(gate, up)
               : minimal()            ? rematerialise({gate, up},
                                                      [](const std::vector<at::Tensor>& in) {
                                                        return at::silu(in[0]) * in[1];
                                                      })
                                      : at::silu(gate) * up;
  return project(b, Projection::down, gated);
}

DecoderImpl::Layout DecoderImpl::block_causal_layout(const torch::Tensor& tokens, const torch::Tensor& segments,
                                                     const torch::Tensor& positions) const {
  for (const auto* t : {&segments, &positions})
    if (t->defined() && t->sizes() != tokens.sizes())
      throw std::invalid_argument(fmt::format("segments and positions must be shaped like tokens {}, got {}",
                                              c10::str(tokens.sizes()), c10::str(t->sizes())));
  if (positions.defined() && positions.numel() > 0 &&
      (positions.min().item<int64_t>() < 0 || positions.max().item<int64_t>() >= options_.max_length))
    throw std::invalid_argument(fmt::format("positions must lie in [0, {})", options_.max_length));
  Layout layout{{}, positions};
  if (!segments.defined()) return layout;
  // Allowed: same segment and not later. Built once per forward, shared by every layer.
  const int64_t B = tokens.size(0), T = tokens.size(1);
  auto same = segments.unsqueeze(2).eq(segments.unsqueeze(1));  // [B,T,T]: query i, key j
  auto allowed = same.logical_and_(causal_mask_.slice(0, 0, T).slice(1, 0, T).eq(0).unsqueeze(0));
  layout.mask = at::zeros({B, T, T}, causal_mask_.options())
                    .masked_fill_(allowed.logical_not(), -std::numeric_limits<double>::infinity())
                    .view({B, 1, 1, T, T});
  return layout;
}

torch::Tensor DecoderImpl::forward(const torch::Tensor& tokens, const torch::Tensor& segments,
                                   const torch::Tensor& positions) {
  return logits(hidden(tokens, segments, positions));
}

// A frozen output (or tied embedding) goes as stored, or as the step's hoisted narrowing cast (frozen()): never a
// widened copy of the [V, E] matrix living until backward.
torch::Tensor DecoderImpl::output_weight() const { return output_.requires_grad() ? compute(output_) : frozen(output_); }

torch::Tensor DecoderImpl::logits(const torch::Tensor& hidden) const {
  return output_.requires_grad() ? at::linear(hidden, compute(output_)) : frozen_linear(hidden, frozen(output_), {});
}

torch::Tensor DecoderImpl::hidden(const torch::Tensor& tokens, const torch::Tensor& segments,
                                  const torch::Tensor& positions) {
  if (tokens.dim() != 2 || tokens.size(1) > options_.max_length)
    throw std::invalid_argument(fmt::format("tokens must be [batch, <= {}], got {}", options_.max_length,
                                            c10::str(tokens.sizes())));
  const Layout layout = block_causal_layout(tokens, segments, positions);
  // Gather first, then cast: only the rows in use are converted.
  auto flat = tokens.flatten();
  if (units_.forward_begin) units_.forward_begin(0);
  auto rows = casts_.gather && embedding_.requires_grad() ? casts_.gather(embedding_, flat, options_.compute_dtype)
                            : compute(embedding_.index_select(0, flat));
  auto x = rows.view({tokens.size(0), tokens.size(1), -1});
  if (units_.forward_end && !options_.tied_output) units_.forward_end(0);  // the gather's backward needs no weight
  for (const auto& b : blocks_) x = hooked_block(b, x, layout);
  const int64_t last = num_units() - 1;
  if (units_.forward_begin) {
    units_.forward_begin(last);
    x = on_backward(x, [f = units_.backward_end, last] { f(last); });
  }
  return rms_norm(x, final_norm_);
}

} // namespace shadowgrad::model
