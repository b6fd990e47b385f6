#pragma once
// Shape and dtypes of the decoder, separate from the full config so the model can be built without it.
#include <cstdint>
#include <string>

#include <c10/core/ScalarType.h>

#include "config/ConfigEnums.h"
#include "model/LoraOptions.h"
#include "model/RopeTable.h"

namespace shadowgrad::config {
struct Config;
}

namespace shadowgrad::model {

struct DecoderOptions {
  int64_t vocab_size = 64;
  int64_t emb_dim = 32;
  int64_t num_query_heads = 2;
  int64_t num_kv_heads = 1;
  int64_t head_dim = 16;
  int64_t mlp_dim = 64;
  int64_t num_layers = 2;
  int64_t max_length = 16;
  double norm_eps = 1e-6;
  double rope_max_timescale = 10000;
  RopeScaling rope_scaling;  // model/RopeTable.h
  // What sets the Llama-family architectures apart (src/hub maps a Hugging Face config.json onto these). The
  // forward reads them; it has no notion of a family.
  bool attention_bias = false;  // q, k and v projections have biases (Qwen2)
  bool qk_norm = false;         // RMSNorm over each head of q and k before RoPE (Qwen3)
  bool tied_output = false;     // the output projection is the embedding: one parameter serving both uses
  // LoRA (model/LoraOptions.h): with a rank, every base tensor is a frozen buffer held in weight_dtype, and the
  // adapters are the module's only parameters (fp32), so whatever takes parameters() trains just them.
  LoraOptions lora;
  c10::ScalarType compute_dtype = c10::kFloat;
  c10::ScalarType weight_dtype = c10::kFloat;
  uint64_t init_seed = 0;
  // Cast each weight to compute_dtype once per optimizer step (kept through the GA loop) instead of
  // once per microbatch.
  bool hoist_weight_cast = false;
  // RMSNorm (and SwiGLU, RoPE) as fused loops of src/kernels; false: the ATen op chains.
  bool fused_kernels = true;
  // What backward may keep of each decoder block (MaxText's remat_policy; see model/Remat.h):
  // none: everything autograd saves; full: only the block's input, the block is re-run in backward;
  // minimal: the outputs of the projection matmuls, the norms, RoPE, the attention core and SiLU are re-run.
  using Remat = config::RematPolicy;
  // autoselected: LibTorch's scaled_dot_product_attention (a fused kernel; no [T x T] probabilities kept);
  // dot_product: matmul, mask, softmax, matmul.
  using Attention = config::AttentionKernel;
  Attention attention = Attention::autoselected;
  Remat remat = Remat::none;

  static DecoderOptions from_config(const config::Config& cfg);
};

} // namespace shadowgrad::model
