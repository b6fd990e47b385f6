#pragma once
// The shadow tree and its bookkeeping, shared by ShadowAccumulator and the folding autograd nodes
// (FoldingCast.h). Internal to src/accumulate.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include <ATen/core/Tensor.h>

#include "accumulate/CudaFold.h"
#include "accumulate/StochasticRounding.h"
#include "util/AutogradNode.h"


namespace shadowgrad::accumulate {

struct ShadowState {
  std::vector<at::Tensor> params;
  std::vector<at::Tensor> shadows;
  std::unordered_map<const c10::TensorImpl*, size_t> index_of;  // parameter -> position in params
  // Holding the AccumulateGrad nodes keeps them (and our hooks on them) alive across graphs; the same
  // technique DDP's Reducer uses.
  std::vector<util::NodePtr> grad_nodes;
  std::vector<uintptr_t> hook_keys;
  c10::ScalarType grad_dtype = c10::kFloat;
  uint64_t serial = 0;  // ShadowAccumulator::serial
  // stale[i]: shadows[i] holds a finished step's values and counts as zero. The next fold overwrites it
  // (copy, not add): the zeroing pass after each optimizer step and the first fold's read of those zeros are
  // saved. settle() zeroes the ones no fold reached, before anything reads the tree.
  std::vector<char> stale;
  bool open = false;
  int64_t folds = 0;
  double fold_seconds = 0;

  // How each fold's fp32 sum is rounded into a bf16/fp16 shadow. Stochastic bits are keyed on (seed, window,
  // the parameter's fold number within the window, parameter index, element): see StochasticRounding.h.
  // bf16 + nearest stays on at::add_ (the original path); fp16 always goes through the rounding kernel, which
  // counts what underflowed (bit for bit add_'s result with nearest).
  Rounding rounding = Rounding::kNearest;
  uint64_t seed = 0;
  int64_t window = -1;                // the trainer's optimizer step, or a count of windows
  std::vector<int64_t> fold_number;   // per parameter, within the window
  RoundingLoss loss;                  // of the current or last window (float16 only)
  // grad_fidelity_period: an fp32 tree that receives the same folds, exactly added, for one window.
  std::vector<at::Tensor> reference;
  int64_t reference_bytes_high = 0;
  double reference_error = 0;         // ||shadow - reference|| / ||reference|| of the last measured window
  double reference_sq_norm = 0;       // ||reference||^2 of the last measured window (squared_norm's blocks)

  // The gradient noise scale's measurement (SquaredNorm.h): micro_sq[m] is the squared L2 norm of everything the
  // m-th backward of the window folded, summed over parameters. A parameter's k-th fold in a window belongs to
  // backward k (micro_of[i] counts them): autograd delivers a parameter's gradient once per backward, and nested
  // (rematerialising) backwards do not change that, whereas the end of a backward is not visible to a hook.
  bool measure = true;
  std::vector<int64_t> micro_of;
  std::vector<double> micro_sq;
  void add_micro(size_t i, double sq) {
    const auto m = size_t(micro_of[i]++);
    if (micro_sq.size() <= m) micro_sq.resize(m + 1, 0.0);
    micro_sq[m] += sq;
  }

  // The CPU rounding kernel (StochasticRounding.h) where add_ cannot do the rounding. CUDA shadows all take the
  // one-pass CUDA fold (CudaFold.h) when the build has it, whose norms and float16 counts wait in `tally` until
  // end(); shadows elsewhere keep at::add_ (round to nearest, uncounted).
  bool uses_kernel() const {
    return on_cpu && (grad_dtype == c10::kHalf || (grad_dtype == c10::kBFloat16 && rounding == Rounding::kStochastic));
  }
  bool on_cpu = true;
  bool on_cuda = false;  // every shadow on CUDA, and the build has the CUDA fold
  CudaTally tally;
  CudaFoldOptions cuda_options(size_t i, bool overwrite, bool measure);
  // end(): the device tallies into micro_sq and loss (the window's one wait for the GPU).
  void read_tally();
  uint64_t next_key(size_t i) {
    return rounding_key(seed, {uint64_t(window), uint64_t(fold_number[i]++), uint64_t(i)});
  }

  // shadows[i] += grad, computed in fp32 and rounded once into grad_dtype. `grad` may be in any float dtype.
  // With a sink (the shadows are pieces) the gradient is measured and handed to it instead.
  void fold(size_t i, const at::Tensor& grad) {
    if (sink) return hand_to_sink(i, grad);
    fold_now(i, grad, /*reduced=*/false);
    if (observer) observer(i);
  }
  // shadows[i][index[r]] += rows[r] for every r: duplicates are summed in fp32 first (in index order, as a
  // dense index_add would), then each touched shadow row gets one fp32 add, rounded once.
  void fold_rows(size_t i, const at::Tensor& index, const at::Tensor& rows) {
    fold_rows_now(i, index, rows);
    if (observer) observer(i);
  }
  // A reduced piece of parameter i's gradient (ShadowAccumulator::fold_piece): folded as above, neither measured nor
  // counted again (the sink's hand-over was).
  void fold_reduced(size_t i, const at::Tensor& piece) { fold_now(i, piece, /*reduced=*/true); }
  std::function<void(size_t)> observer;  // ShadowAccumulator::set_fold_observer
  // ShadowAccumulator(params, dtype, ranges): each shadow is the 1-D piece of its parameter that this process owns;
  // every gradient goes to `sink` whole, which folds the reduced pieces back through fold_reduced.
  bool pieces = false;
  std::function<void(size_t, const at::Tensor&, bool)> sink;
  std::function<double(double)> norm_reducer;  // the sum of every process's squared norm
  void mark_all_stale() { stale.assign(shadows.size(), 1); }
  void settle();
  // Ends a measured window: the relative error of the shadow tree against the reference, then frees it.
  void close_reference();

 private:
  void fold_now(size_t i, const at::Tensor& grad, bool reduced);
  void hand_to_sink(size_t i, const at::Tensor& grad);
  void fold_rows_now(size_t i, const at::Tensor& index, const at::Tensor& rows);
  struct Timer {
    ShadowState& s;
    bool count = true;
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    ~Timer() {
      s.folds += count ? 1 : 0;
      s.fold_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
  };
};

} // namespace shadowgrad::accumulate
