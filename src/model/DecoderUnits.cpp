// ZeRO-3's side of the decoder (distributed/ParameterShards.h): which base tensors make each unit, and the hooks
// around a block that say where the forward and the backward are. hidden() (Decoder.cpp) calls them for the
// embedding and the final unit, decode() (DecoderDecode.cpp) for generation.
#include <stdexcept>
#include <string>

#include <ATen/ATen.h>

#include "model/BackwardCall.h"
#include "model/Decoder.h"

namespace shadowgrad::model {

void DecoderImpl::pass_units() {
  if (units_.forward_begin) hidden(at::zeros({1, 1}, rope_cos_.options().dtype(at::kLong)));
}

torch::Tensor DecoderImpl::hooked_block(const Block& b, const torch::Tensor& x, const Layout& layout) {
  if (!units_.forward_begin) return block(b, x, layout);
  const int64_t unit = b.index + 1;
  units_.forward_begin(unit);
  // The input's gradient arrives after every node of the block that reads a weight has run: the unit may go then.
  auto y = block(b, on_backward(x, [f = units_.backward_end, unit] { f(unit); }), layout);
  y = on_backward(y, [f = units_.backward_begin, unit] { f(unit); });
  units_.forward_end(unit);
  return y;
}

int64_t DecoderImpl::unit_of(const std::string& name) const {
  if (name.find("_lora_") != std::string::npos || name == "rope_cos" || name == "rope_sin" || name == "causal_mask")
    return -1;
  if (name == "embedding") return 0;
  if (name == "final_norm" || name == "output") return num_units() - 1;
  if (name.rfind("layer", 0) == 0) return std::stoll(name.substr(5)) + 1;
  throw std::logic_error("unit_of: no unit for '" + name + "'");
}

std::vector<std::vector<torch::Tensor>> DecoderImpl::unit_tensors() {
  std::vector<std::vector<torch::Tensor>> units(num_units());
  auto add = [&](const std::string& name, const torch::Tensor& t) {
    if (const int64_t unit = unit_of(name); unit >= 0) units[unit].push_back(t);
  };
  for (const auto& p : named_parameters(/*recurse=*/false)) add(p.key(), p.value());
  for (const auto& p : named_buffers(/*recurse=*/false)) add(p.key(), p.value());
  return units;
}

} // namespace shadowgrad::model
