#pragma once
// The key of a parameter in torch::optim::Optimizer::state(): the TensorImpl's address, as a void* since torch 2.13,
// formatted as a string before. Code that looks up or writes optimizer state of its own uses this only.
//
//   auto it = optimizer.state().find(util::optimizer_state_key(p));
#include <sstream>
#include <string>
#include <type_traits>

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>

namespace shadowgrad::util {

using OptimizerStateKey = std::remove_cv_t<
    typename std::remove_reference_t<decltype(std::declval<torch::optim::Optimizer&>().state())>::key_type>;

// A template so that only the branch for this torch's key type is compiled.
template <class Key = OptimizerStateKey>
Key optimizer_state_key(const at::Tensor& p) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream s;  // what c10::guts::to_string printed for the address
    s << static_cast<const void*>(p.unsafeGetTensorImpl());
    return s.str();
  } else {
    return static_cast<Key>(p.unsafeGetTensorImpl());
  }
}

} // namespace shadowgrad::util
