#pragma once
// The decoder's weights counted from its options alone, before any tensor exists: the base (trained, or frozen under
// LoRA) and the LoRA adapters, as DecoderImpl's constructor shapes them (tests/test_memory_footprint.cpp holds the
// two together). The counts saturate (util/Saturating.h): a crafted rank or width gives INT64_MAX, never a wrapped
// figure that would pass a fit check.
//
//   WeightCount n = count_weights(DecoderOptions::from_config(cfg));
//   refuse_weights_beyond_headroom(o, "runs/sft");   // InputError before the decoder is built, when they cannot fit
//   if (auto w = lora_rank_warning(o); !w.empty()) spdlog::warn("{}", w);
#include <cstdint>
#include <string>

#include "model/DecoderOptions.h"

namespace shadowgrad::model {

struct WeightCount {
  int64_t base = 0;        // elements of every base tensor (projections, biases, norms, embedding, untied output)
  int64_t adapters = 0;    // elements of the LoRA A and B matrices (0 without LoRA)
  int64_t never_cast = 0;  // base elements that reach the compute dtype without compute(): the norms and, untied, the
                           // embedding (gathered by row)
  int64_t bytes = 0;       // the base in weight_dtype plus the fp32 adapters
};

WeightCount count_weights(const DecoderOptions& o);

// For the readers that build a decoder to use it (export_hf, generate; the trainer checks its whole footprint,
// train/MemoryProbe.h): throws InputError when count_weights(o).bytes is over what this process may take
// (memory/MemoryBudget.h), naming `what`, the figure, its parts and the headroom's source. A crafted rank or width is
// refused here, exit 2, and not in LibTorch's allocator. Does nothing when no headroom can be read.
void refuse_weights_beyond_headroom(const DecoderOptions& o, const std::string& what);

// "" unless a LoRA rank is above a targeted projection's smaller side (min(in, out)): such an adapter can express
// nothing a rank of that side could not (B A has rank at most min(in, out)), and costs more. The text names the rank,
// the projections and their sides.
std::string lora_rank_warning(const DecoderOptions& o);

} // namespace shadowgrad::model
