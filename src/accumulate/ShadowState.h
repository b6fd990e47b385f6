#pragma once
// The shadow tree and its bookkeeping, shared by ShadowAccumulator and the folding autograd nodes
// (FoldingCast.h). Internal to src/accumulate.
#include <chrono>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include <ATen/core/Tensor.h>

namespace torch::autograd {
struct Node;
}

namespace shadowgrad::accumulate {

struct ShadowState {
  std::vector<at::Tensor> params;
  std::vector<at::Tensor> shadows;
  std::unordered_map<const c10::TensorImpl*, size_t> index_of;  // parameter -> position in params
  // Holding the AccumulateGrad nodes keeps them (and our hooks on them) alive across graphs; the same
  // technique DDP's Reducer uses.
  std::vector<std::shared_ptr<torch::autograd::Node>> grad_nodes;
  std::vector<uintptr_t> hook_keys;
  c10::ScalarType grad_dtype = c10::kFloat;
  // stale[i]: shadows[i] holds a finished step's values and counts as zero. The next fold overwrites it
  // (copy, not add): the zeroing pass after each optimizer step and the first fold's read of those zeros are
  // saved. settle() zeroes the ones no fold reached, before anything reads the tree.
  std::vector<char> stale;
  bool open = false;
  int64_t folds = 0;
  double fold_seconds = 0;

  // shadows[i] += grad, computed in fp32 and rounded once into grad_dtype. `grad` may be in any float dtype.
  void fold(size_t i, const at::Tensor& grad);
  // shadows[i][index[r]] += rows[r] for every r: duplicates are summed in fp32 first (in index order, as a
  // dense index_add would), then each touched shadow row gets one fp32 add, rounded once.
  void fold_rows(size_t i, const at::Tensor& index, const at::Tensor& rows);
  void mark_all_stale() { stale.assign(shadows.size(), 1); }
  void settle();

 private:
  struct Timer {
    ShadowState& s;
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    ~Timer() {
      ++s.folds;
      s.fold_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
  };
};

} // namespace shadowgrad::accumulate
