#pragma once
// The gradient-accumulation engine: a shadow tree of one tensor per trainable parameter, held in
// grad_dtype, into which every microbatch's gradient is folded the moment autograd produces it.
// Works with any torch::nn::Module: it only needs the parameter list.
//
//   ShadowAccumulator acc(module->parameters(), at::kBFloat16);
//   acc.begin();
//   for (auto& mb : microbatches) (loss_sum(mb) / global_valid_tokens).backward();
//   acc.end();                                  // no p.grad() is defined now
//   double norm = acc.clip_global_norm_(1.0);   // fp32 norm, per-parameter scaling
//   acc.step(optimizer);                        // optimizer reads the shadow as .grad; shadow zeroed
//
// How the fold works (see docs/how-ga-works.md): a post-hook on each parameter's AccumulateGrad node
// runs the moment autograd has stored that parameter's gradient; it adds it into the shadow tensor
// (`shadow.add_(g)`: the sum is computed in fp32 and rounded once into grad_dtype) and frees it. So
// at most one parameter's fp32 gradient is alive at a time, p.grad() is undefined whenever user code
// can look, and no fp32 gradient tree ever exists. Outside begin()/end() the hooks do nothing and
// backward() behaves as usual.
#include <functional>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

namespace torch::optim {
class Optimizer;
}

namespace shadowgrad::accumulate {

struct ShadowState;
enum class Rounding : int;  // accumulate/StochasticRounding.h
struct RoundingLoss;

// The part of a parameter (flattened) that a process's shadow holds under sharded gradients.
struct ShadowRange {
  int64_t offset = 0;
  int64_t numel = 0;
};

class ShadowAccumulator {
 public:
  // `params`: the trainable parameters (those without requires_grad are ignored).
  ShadowAccumulator(const std::vector<at::Tensor>& params, c10::ScalarType grad_dtype);
  // Sharded gradients (shard_gradients_over_data, docs/distributed.md): one range per trainable parameter; each
  // shadow is then the 1-D piece `ranges[i]` of its parameter (possibly empty), and every gradient autograd produces
  // goes whole to the fold sink, which reduces it over the processes and folds this process's pieces back with
  // fold_piece(). Without a sink nothing is folded. An empty `ranges` is the constructor above.
  ShadowAccumulator(const std::vector<at::Tensor>& params, c10::ScalarType grad_dtype,
                    const std::vector<ShadowRange>& ranges);
  ~ShadowAccumulator();
  ShadowAccumulator(const ShadowAccumulator&) = delete;
  ShadowAccumulator& operator=(const ShadowAccumulator&) = delete;

  // Opens an accumulation window: gradients from backward() are folded into the shadow tree. Windows are
  // numbered 0, 1, 2, ...; begin(window) names the number (a trainer passes its optimizer step, so that
  // stochastic rounding after a resume draws the bits the uninterrupted run drew). `with_reference`: this
  // window also folds every gradient into an fp32 reference tree (4 B/param until end()), for reference_error().
  void begin();
  void begin(int64_t window, bool with_reference = false);
  // Closes the window.
  void end();

  // How each fold is rounded into a bfloat16 or float16 shadow (float32 shadows are not rounded). Stochastic
  // bits come from a hash of (seed, window, the parameter's fold number in the window, parameter, element).
  void set_rounding(Rounding rounding, uint64_t seed = 0);
  Rounding rounding() const;
  // After end() of a window begun with_reference: ||shadow - reference|| / ||reference||, fp32 norms over the
  // whole tree; 0 for a float32 shadow (the same adds in the same order). NaN for other windows.
  double reference_error() const;
  // The same window's ||reference||^2, as squared_norm() computes it: the big batch without the shadow's rounding.
  double reference_sq_norm() const;
  // The most bytes the reference tree has held (0 if no window had one).
  int64_t reference_bytes() const;
  // float16 shadows: the elements of the current or last window's folds that underflowed to 0 or overflowed
  // to Inf (the rest of the fold survived). Zero counts for other dtypes.
  RoundingLoss rounding_loss() const;

  // The gradient noise scale's small batches (docs/batch-size.md): one value per backward() of the current or last
  // window, in fold order (on CUDA, after end(): the device's sums are read then): the squared L2 norm of everything that backward folded, summed over parameters (fp32
  // squares and block sums, added in double; the same bits at any thread count). Taken from each gradient as it is
  // folded, before it is rounded into the shadow; fused into the add on the common paths. Assumes each parameter
  // receives one gradient per backward (what autograd does for a parameter); a parameter that some backward does
  // not reach shifts its later folds to earlier entries. On by default; off, the list stays empty.
  const std::vector<double>& microbatch_sq_norms() const;
  void set_measure_sq_norms(bool on);
  bool measures_sq_norms() const;
  // Called with the parameter's position in params() after each of its folds inside a window, on the thread that
  // ran the fold (autograd's): e.g. to start a bucket's reduction once its parameters are complete
  // (distributed/OverlappedReduce.h). An empty function removes it.
  void set_fold_observer(std::function<void(size_t)> observer);
  // Built with ranges: receives each gradient whole (any float dtype; the embedding's rows as a dense fp32 tensor),
  // with the parameter's position, on autograd's thread, after microbatch_sq_norms() took its norm. `fresh`: the
  // tensor was made for the sink alone (the dense rows), which may keep and overwrite it instead of copying it.
  void set_fold_sink(std::function<void(size_t param, const at::Tensor& grad, bool fresh)> sink);
  // Folds the reduced `piece` (the sum over processes of this range of a microbatch's gradient, 1-D, the shadow's
  // length) into shadows()[param]: fp32 math rounded once, as fold does. Inside begin()/end() only.
  void fold_piece(size_t param, const at::Tensor& piece);
  bool holds_pieces() const;
  // squared_norm() and global_norm() return reducer(local sum of squares) when set: every process's pieces' sum.
  // Every process must then call them together (it is a collective).
  void set_norm_reducer(std::function<double(double)> reducer);

  // The big batch: the squared L2 norm of the shadow tree, computed as microbatch_sq_norms() are.
  double squared_norm() const;

  // Global L2 norm of the shadow tree, computed in fp32.
  double global_norm() const;
  // Multiplies every shadow tensor by `factor`, parameter by parameter, in fp32 math stored back in grad_dtype.
  void scale_(double factor);
  // If `max_norm` > 0 and the norm exceeds it, scales to max_norm. Returns the norm before clipping.
  double clip_global_norm_(double max_norm);
  // The factor clip_global_norm_ scales by for a tree of this norm: max_norm / (norm + 1e-6) when max_norm > 0 and
  // the norm is finite and above it, else 1. An optimizer that scales as it reads (train::FusedAdamW) takes it
  // instead of a scale_() pass.
  static double clip_factor(double norm, double max_norm);

  // Lends the shadow tree to `optimizer` as .grad, runs one step, then zeroes the shadow and unsets .grad.
  void step(torch::optim::Optimizer& optimizer);
  // Zeroes the shadow tree without an update (e.g. a skipped step). Lazily: the next fold of each parameter
  // overwrites its shadow instead of adding to it, and any read (shadows(), the norm, a step) sees zeros.
  void zero_();

  // `param` in `dtype` (== param.to(dtype) / param.index_select(0, index).to(dtype)), wired so that its
  // gradient, in `dtype`, is folded straight into the shadow tree: for bf16 compute on fp32 weights no fp32
  // gradient is made, and the gather folds only the rows it read. Outside begin()/end() backward sets
  // param.grad() as the plain op would. See FoldingCast.h.
  at::Tensor cast(const at::Tensor& param, c10::ScalarType dtype) const;
  at::Tensor gather_rows(const at::Tensor& param, const at::Tensor& index, c10::ScalarType dtype) const;

  const std::vector<at::Tensor>& params() const;
  // The shadow tree, to read (norms, comparisons, copies). It is never modified through this accessor.
  const std::vector<at::Tensor>& shadows() const;
  // The shadow tree, to modify in place between end() and step(): e.g. a data-parallel all-reduce.
  std::vector<at::Tensor>& mutable_shadows();
  c10::ScalarType grad_dtype() const;
  // A number unique to this accumulator within the process (1, 2, ...): an identity that outlives address reuse.
  uint64_t serial() const;
  // Bytes held by the shadow tree.
  int64_t bytes() const;
  // How many gradients were folded in the current or last window (one per parameter per microbatch).
  int64_t folds() const;
  // Wall seconds spent folding (add into the shadow, free the gradient) in the current or last window.
  double fold_seconds() const;

 private:
  size_t position(const at::Tensor& param) const;  // throws for a tensor that is not an accumulated parameter
  std::shared_ptr<ShadowState> state_;
};

} // namespace shadowgrad::accumulate
