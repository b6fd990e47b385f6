#pragma once
// The public surface of shadowgrad, as installed by `cmake --install`: the gradient-accumulation engine
// (ShadowAccumulator: the shadow tree, its folding casts, global-norm clipping and the optimizer step).
// Link shadowgrad::shadowgrad from find_package(shadowgrad); ShadowAccumulator.h has the API.
//
//   #include <shadowgrad/shadowgrad.h>
//   shadowgrad::ShadowAccumulator acc(model->parameters(), at::kBFloat16);
//   acc.begin();  /* K x backward() */  acc.end();
//   acc.clip_global_norm_(1.0);
//   acc.step(optimizer);
//
// Installed, the engine header sits next to this file (include/shadowgrad/accumulate/); in the source tree it is
// src/accumulate/, found through the include path rooted at src/.
#include "accumulate/ShadowAccumulator.h"
#include "accumulate/StochasticRounding.h"

namespace shadowgrad {
using accumulate::Rounding;  // acc.set_rounding(Rounding::kStochastic, seed): see StochasticRounding.h
using accumulate::ShadowAccumulator;
} // namespace shadowgrad
