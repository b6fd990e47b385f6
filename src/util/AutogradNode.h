#pragma once
// Owning pointers to autograd nodes across torch releases: std::shared_ptr<Node> with torch's deleteNode before
// 2.13, c10::intrusive_ptr<Node> since. Code that makes or holds nodes of its own uses these two names only.
//
//   util::NodePtr node = util::make_node<MyBackward>(args...);
//   node->set_next_edges(torch::autograd::collect_next_edges(inputs));
//   torch::autograd::set_history(out, node);
#include <type_traits>
#include <utility>

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

namespace shadowgrad::util {

// Whatever LibTorch hands out for a leaf's AccumulateGrad node.
using NodePtr = decltype(torch::autograd::impl::grad_accumulator(std::declval<const at::Tensor&>()));

template <class T, class... Args>
NodePtr make_node(Args&&... args) {
  if constexpr (std::is_same_v<NodePtr, std::shared_ptr<torch::autograd::Node>>) {
    // deleteNode is found by argument-dependent lookup (T derives from torch::autograd::Node), so this branch
    // names nothing that releases without it lack.
    return std::shared_ptr<T>(new T(std::forward<Args>(args)...), [](T* node) { deleteNode(node); });
  } else {
    return c10::make_intrusive<T>(std::forward<Args>(args)...);
  }
}

} // namespace shadowgrad::util
