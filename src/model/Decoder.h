#pragma once
// A decoder-only transformer: token embedding; N pre-norm blocks of
// [RMSNorm -> grouped-query causal attention with RoPE] and [RMSNorm -> gated SiLU MLP];
// a final RMSNorm and an output projection (its own weight, or the embedding's: options.tied_output).
// options.attention_bias and options.qk_norm add Qwen2's q/k/v biases and Qwen3's per-head q/k norms.
// options.lora adds a low-rank adapter to the chosen projections and freezes the rest: the base tensors become
// buffers (named as the parameters were), the adapters layer{i}_{wq,...}_lora_a / _lora_b the only parameters.
//
//   shadowgrad::model::Decoder model(options);
//   torch::Tensor logits = model->forward(tokens);   // tokens [B,T] int64 -> logits [B,T,V] in compute dtype
//   torch::Tensor h = model->hidden(tokens);         // [B,T,E]; logits == model->logits(h)
//   model->hidden(tokens, segments, positions);      // packed rows: attention only within a segment, RoPE at
//                                                    // `positions` (both [B,T] int64)
//
// Generation (src/generate/ holds the decoding loop) goes through a KV cache: a prefill of the prompt in one
// forward, then one token at a time, each call projecting only the last position to the vocabulary.
//
//   model->eval();                                       // LoRA dropout is off outside training
//   KvCache cache = model->new_cache(1, prompt_len + max_new);
//   torch::Tensor logits = model->decode(prompt, cache); // [1,T] -> [1,V]: the last position's logits
//   logits = model->decode(next_token, cache);           // [1,1] -> [1,V], at position cache.length
//
// Weights are stored in options.weight_dtype and cast to options.compute_dtype where they are used, so
// bf16 compute trains fp32 master weights. Right padding needs no attention mask beyond the causal one:
// a valid token never attends to a later (padded) position.
#include <algorithm>
#include <array>
#include <functional>
#include <initializer_list>
#include <string>
#include <unordered_map>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "model/DecoderOptions.h"

namespace shadowgrad::model {

// The keys (after RoPE and the q/k norm) and values of every layer for the positions a sequence has seen, so that
// decode() computes only the new tokens. One per batch of sequences that advance together.
struct KvCache {
  std::vector<torch::Tensor> k, v;  // per layer [B, num_kv_heads, capacity, head_dim], compute dtype
  int64_t length = 0;               // positions 0..length-1 are held
  int64_t capacity() const { return k.empty() ? 0 : k.front().size(2); }
  int64_t batch() const { return k.empty() ? 0 : k.front().size(0); }
  // Forgets every position from n on (a chat turn that shares its first n tokens with the last one keeps them).
  void truncate(int64_t n) { length = std::min(length, std::max<int64_t>(n, 0)); }
};

class DecoderImpl : public torch::nn::Module {
 public:
  // Called once per unit (see UnitHooks), right after the unit's tensors are created and initialised and before the
  // next unit's are: ZeRO-3 cuts each unit as it is built (train/ModelBuild.h), so that no process holds the whole
  // model. The weights drawn are the same with or without it.
  using UnitBuilt = std::function<void(int64_t unit, DecoderImpl& model)>;
  explicit DecoderImpl(const DecoderOptions& options, const UnitBuilt& unit_built = {});

  // segments, positions: optional [B,T] int64. With segments, token i attends to token j only when j <= i and both
  // have the same segment id (block-causal: packed sequences never see one another); with positions, RoPE rotates
  // token i by positions[i] instead of i. Undefined: causal attention over positions 0..T-1.
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& segments = {},
                        const torch::Tensor& positions = {});
  // The final-normed hidden states [B,T,E] (compute dtype) and the output projection [V,E]: in the compute dtype, or
  // when it is frozen (a LoRA base) the stored tensor itself, in weight_dtype, so that a bf16 base is never held again
  // in fp32 (frozen_linear and train::linear_token_loss_sum cast it per use); an fp32 base under bf16 compute comes
  // as the step's hoisted bf16 cast (hoist_weight_cast). forward(tokens) ==
  // logits(hidden(tokens)) == at::linear(hidden(tokens), output_weight()) when the dtypes agree. The trainer feeds both
  // to train::linear_token_loss_sum, which never builds fp32 logits for the whole microbatch.
  torch::Tensor hidden(const torch::Tensor& tokens, const torch::Tensor& segments = {},
                       const torch::Tensor& positions = {});
  torch::Tensor output_weight() const;
  torch::Tensor logits(const torch::Tensor& hidden) const;

  // An empty cache for `batch` sequences of up to `capacity` positions (at most max_length, the RoPE tables' length).
  KvCache new_cache(int64_t batch, int64_t capacity) const;
  // Runs tokens [B,T] (T >= 1) at positions cache.length..cache.length+T-1, attending to the cache and causally among
  // themselves, appends their keys and values, and returns the last position's logits [B,V] (compute dtype). A
  // prefill is one call with the whole prompt; then one token per call. Runs without autograd. Equal to
  // forward(all tokens so far) at the last position (fp32: within rounding, tests/test_kv_cache.cpp).
  // Throws InputError when the tokens do not fit the cache's capacity.
  torch::Tensor decode(const torch::Tensor& tokens, KvCache& cache);

  const DecoderOptions& options() const { return options_; }
  // A base tensor (parameter, or frozen buffer under LoRA) or adapter by name; nullptr if the model has none.
  torch::Tensor* find_weight(const std::string& name);
  // LoRA dropout draws its mask for row r of the next forwards from (lora.dropout_seed, first_row + r, layer,
  // projection): the global sequence number of the row, so the masks do not depend on K, the process count or a
  // resume. The trainer sets it before each microbatch.
  void set_lora_dropout_rows(int64_t first_row) { dropout_first_row_ = first_row; }
  // Memory probes (train/MemoryProbe.h) measure what another remat_policy would save on this very model.
  void set_remat(DecoderOptions::Remat remat) { options_.remat = remat; }

  // How parameters reach the compute dtype. Unset: with .to() and index_select. A trainer sets them to
  // ShadowAccumulator::cast / gather_rows, so each gradient is folded into the shadow tree in the compute
  // dtype, with no per-parameter gradient in the weight dtype. Set {} to go back to the plain ops.
  struct WeightCasts {
    std::function<torch::Tensor(const torch::Tensor& param, c10::ScalarType dtype)> cast;
    std::function<torch::Tensor(const torch::Tensor& param, const torch::Tensor& index, c10::ScalarType dtype)> gather;
  };
  void set_weight_casts(WeightCasts casts) { casts_ = std::move(casts); }

  // ZeRO-3 (shard_parameters_over_data, distributed/ParameterShards.h): the base tensors come in units (0: the
  // embedding; 1..L: the blocks; L+1: the final norm with the output), whose storage holds their values only around
  // their use. The model says where it is; unset hooks are not called. Under no_grad no backward hook fires, and a
  // unit whose input and output need no gradient gets none either (nothing of it is read in backward then).
  struct UnitHooks {
    std::function<void(int64_t unit)> forward_begin;   // before the unit's forward reads a weight
    std::function<void(int64_t unit)> forward_end;     // after it (not called for the final unit, which the loss
                                                       // reads, nor for a tied embedding, which the output reads)
    std::function<void(int64_t unit)> backward_begin;  // before the unit's backward
    std::function<void(int64_t unit)> backward_end;    // after it
  };
  void set_unit_hooks(UnitHooks hooks) { units_ = std::move(hooks); }
  // The base tensors of each unit (parameters, or the frozen buffers under LoRA; never adapters), in registration
  // order, so that their concatenation is parameters()'s order for a full fine-tune.
  std::vector<std::vector<torch::Tensor>> unit_tensors();
  int64_t num_units() const { return options_.num_layers + 2; }
  // The unit of a base tensor by its name; -1 for an adapter, the RoPE tables and the mask.
  int64_t unit_of(const std::string& name) const;
  // A forward of one token whose result is dropped: under ZeRO-3 a process with no batch left in a loop where the
  // others still have one runs it, so that every process gathers the same units in the same order. Run it in the
  // grad mode of the others' forwards (a unit kept for a backward must be kept here too).
  void pass_units();

  // hoist_weight_cast: drops the cached compute-dtype weights, trained and frozen (call after the last microbatch's
  // backward); the next forward casts again. A cached cast is also recast if its weight changed.
  void clear_weight_cache() { weight_cache_.clear(); }
  // The most bytes the weight cache has held (0 without hoist_weight_cast).
  int64_t weight_cache_bytes() const { return weight_cache_high_; }

 private:
  struct Adapter {
    torch::Tensor a, b;  // [rank, in], [out, rank]; undefined where the projection has none
  };
  struct Block {
    int64_t index = 0;
    torch::Tensor attn_norm, wq, wk, wv, wo, mlp_norm, w_gate, w_up, w_down;
    torch::Tensor bq, bk, bv;      // attention_bias; undefined otherwise
    torch::Tensor q_norm, k_norm;  // qk_norm; undefined otherwise
    std::array<Adapter, kProjections> lora;
    const torch::Tensor& weight(Projection p) const;
    const torch::Tensor& bias(Projection p) const;  // undefined but for q, k, v with attention_bias
  };

  // What attention needs beyond the tokens: the block-causal mask [B,1,1,T,T] (0 or -inf, compute dtype) and the
  // RoPE positions [B,T]; both undefined for plain causal attention at positions 0..T-1.
  struct Layout {
    torch::Tensor mask, positions;
  };
  Layout block_causal_layout(const torch::Tensor& tokens, const torch::Tensor& segments,
                             const torch::Tensor& positions) const;
  torch::Tensor block(const Block& b, const torch::Tensor& x, const Layout& layout);
  torch::Tensor attention(const Block& b, const torch::Tensor& x, const Layout& layout);
  // The attention's inputs: x normed, then projected to q [B,T,H,D], k and v [B,T,G,D] (q and k head-normed).
  struct Heads {
    torch::Tensor q, k, v;
  };
  Heads heads(const Block& b, const torch::Tensor& x);
  // decode()'s attention of block b: the new positions' keys and values join the cache's layer b.index.
  torch::Tensor cached_attention(const Block& b, const torch::Tensor& x, KvCache& cache,
                                 const torch::Tensor& positions);
  // One layer's KV cache and where the new positions go (generation).
  struct CacheSlot {
    torch::Tensor& k;  // [B, G, capacity, D]
    torch::Tensor& v;
    int64_t start;     // positions 0..start-1 are held
  };
  // softmax(rope(q) rope(k)^T / sqrt(D) + causal) v for the projections q [B,T,H,D], k and v [B,T,G,D] -> [B,T,H*D].
  // Training and decoding both run it: with `cache`, the new keys and values are written at start..start+T-1 and
  // attention reads every cached position (layout.positions then holds the absolute positions).
  torch::Tensor attention_core(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const Layout& layout, const CacheSlot* cache = nullptr) const;
  torch::Tensor mlp(const Block& b, const torch::Tensor& x);
  torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight) const;
  // the ATen op chain (fused_kernels=false), x [B,H,T,D]; positions [B,T] or undefined
  torch::Tensor apply_rope(const torch::Tensor& x, const torch::Tensor& positions) const;
  torch::Tensor block_norm(const torch::Tensor& x, const torch::Tensor& weight) const;  // rms_norm, remat'd by minimal
  torch::Tensor compute(const torch::Tensor& weight) const;
  // A frozen base tensor (LoRA) as the frozen nodes take it: the stored tensor, or, under hoist_weight_cast when the
  // compute dtype is narrower (an fp32 base, bf16 compute), its cast cached for the step, so that each weight is cast
  // once per step and not in every microbatch's forward and again in its backward.
  torch::Tensor frozen(const torch::Tensor& weight) const;
  // weight_cache_'s entry for `weight`, made by `make` when missing or stale (filled only with grad enabled).
  torch::Tensor cached(const torch::Tensor& weight, const std::function<torch::Tensor(const torch::Tensor&)>& make) const;
  // Projection p of block b: at::linear(x, weight, bias) in the compute dtype (a frozen weight through
  // frozen_linear), plus the LoRA branch where p has one.
  torch::Tensor project(const Block& b, Projection p, const torch::Tensor& x) const;
  // The projections ps of one input x (q, k, v; gate, up): where each is a frozen base with an adapter and no
  // dropout applies, one adapted_linear node (model/FrozenLinear.h) computes them all; otherwise each alone.
  std::vector<torch::Tensor> project(const Block& b, std::initializer_list<Projection> ps, const torch::Tensor& x) const;
  // Whether projection p goes through adapted_linear: a frozen base with an adapter, no dropout on its input.
  bool adapted(const Block& b, Projection p) const;
  torch::Tensor lora_input(const torch::Tensor& x, int64_t layer, Projection p) const;  // dropout(x) while training
  // The per-head q/k RMSNorm (qk_norm) of a projection [B,T,heads,D]; the projection itself without it.
  torch::Tensor head_norm(const torch::Tensor& x, const torch::Tensor& weight) const;
  bool minimal() const { return options_.remat == DecoderOptions::Remat::minimal; }
  torch::Tensor cast(const torch::Tensor& weight) const;  // to the compute dtype, through casts_ when set

  // forward_begin(u) for the block of unit u, with the backward hooks around it (its input and output).
  torch::Tensor hooked_block(const Block& b, const torch::Tensor& x, const Layout& layout);

  DecoderOptions options_;
  WeightCasts casts_;
  UnitHooks units_;
  int64_t dropout_first_row_ = 0;
  torch::Tensor embedding_, final_norm_, output_;
  std::vector<Block> blocks_;
  struct CachedCast {
    torch::Tensor cast;
    int64_t version = -1;  // the weight's version counter when cast: an in-place update invalidates it
  };
  mutable std::unordered_map<const c10::TensorImpl*, CachedCast> weight_cache_;
  mutable int64_t weight_cache_high_ = 0;
  torch::Tensor rope_cos_, rope_sin_;  // [max_length, head_dim], compute dtype
  torch::Tensor causal_mask_;          // [max_length, max_length], 0 or -inf, compute dtype
};

TORCH_MODULE(Decoder);

} // namespace shadowgrad::model
