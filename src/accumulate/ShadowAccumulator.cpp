#include "accumulate/ShadowAccumulator.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/optim/optimizer.h>

#include "accumulate/FoldingCast.h"
#include "accumulate/MixedAdd.h"
#include "accumulate/Scale.h"
#include "accumulate/ShadowState.h"
#include "accumulate/SquaredNorm.h"

namespace shadowgrad::accumulate {

namespace {

// t[rows] += sums, in fp32 math, rounded once into t's dtype; rows are distinct.
void add_rows_nearest(at::Tensor& t, const at::Tensor& rows, const at::Tensor& sums) {
  t.index_copy_(0, rows, t.index_select(0, rows).to(at::kFloat).add_(sums).to(t.scalar_type()));
}

} // namespace

void ShadowState::hand_to_sink(size_t i, const at::Tensor& grad) {
  RECORD_FUNCTION("shadowgrad::fold", std::vector<c10::IValue>());
  Timer timer{*this};
  if (measure) add_micro(i, squared_norm(grad));  // this process's microbatch, before the reduction
  sink(i, grad, /*fresh=*/false);
}

void ShadowState::fold_now(size_t i, const at::Tensor& grad, bool reduced) {
  if (!reference.empty()) mixed_add_(reference[i], grad);  // outside the timer: a diagnostic, not the fold
  RECORD_FUNCTION("shadowgrad::fold", std::vector<c10::IValue>());  // a row of its own in profiler=trace
  Timer timer{*this, !reduced};
  const bool measure = this->measure && !reduced;
  const bool overwrite = stale[i];
  stale[i] = 0;
  double sq = 0;
  bool measured = false;  // by the fused loop
  if (on_cuda) {
    cuda_fold_(shadows[i], grad, cuda_options(i, overwrite, measure), tally);  // the norm is tallied on the device
    loss.elements += grad_dtype == c10::kHalf ? grad.numel() : 0;
    return;
  }
  if (uses_kernel()) {
    const uint64_t key = next_key(i);
    loss += overwrite ? round_copy_(shadows[i], grad, key, rounding) : round_add_(shadows[i], grad, key, rounding);
  } else if (overwrite) {
    mixed_copy_(shadows[i], grad, measure ? &sq : nullptr);  // == 0 + grad rounded once (up to the sign of a zero)
    measured = true;
  } else {
    mixed_add_(shadows[i], grad, measure ? &sq : nullptr);  // fp32 math, rounded once into grad_dtype
    measured = true;
  }
  // The gradient as it arrived (before any rounding into the shadow), while it is still in cache.
  if (measure) add_micro(i, measured ? sq : squared_norm(grad));
}

void ShadowState::settle() {
  for (size_t i = 0; i < shadows.size(); ++i)
    if (stale[i]) {
      shadows[i].zero_();
      stale[i] = 0;
    }
}

void ShadowState::fold_rows_now(size_t i, const at::Tensor& index, const at::Tensor& rows) {
  // Duplicates summed in fp32 first, in index order (as a dense index_add would).
  auto [unique, inverse] = at::_unique(index, /*sorted=*/true, /*return_inverse=*/true);
  auto sums = at::zeros({unique.size(0), rows.size(-1)}, rows.options().dtype(at::kFloat))
                  .index_add_(0, inverse, rows.reshape({-1, rows.size(-1)}).to(at::kFloat));
  if (sink) {  // the sink reduces dense gradients: the rows' sums placed in a zero tensor of the parameter's shape
    RECORD_FUNCTION("shadowgrad::fold", std::vector<c10::IValue>());
    Timer timer{*this};
    if (measure) add_micro(i, squared_norm(sums));
    sink(i, at::zeros(params[i].sizes(), sums.options()).index_copy_(0, unique, sums), /*fresh=*/true);
    return;
  }
  if (!reference.empty()) add_rows_nearest(reference[i], unique, sums);
  RECORD_FUNCTION("shadowgrad::fold", std::vector<c10::IValue>());
  Timer timer{*this};
  if (stale[i]) {
    shadows[i].zero_();  // only some rows are about to be written
    stale[i] = 0;
  }
  if (on_cuda) {
    cuda_fold_rows_(shadows[i], unique, sums, cuda_options(i, false, measure), tally);
    loss.elements += grad_dtype == c10::kHalf ? sums.numel() : 0;
    return;
  }
  if (uses_kernel())
    loss += round_add_rows_(shadows[i], unique, sums, next_key(i), rounding);
  else
    add_rows_nearest(shadows[i], unique, sums);
  if (measure) add_micro(i, squared_norm(sums));  // duplicates already summed: the rows' contribution
}

CudaFoldOptions ShadowState::cuda_options(size_t i, bool overwrite, bool measure) {
  CudaFoldOptions o;
  o.overwrite = overwrite;
  o.stochastic = rounding == Rounding::kStochastic && grad_dtype != c10::kFloat;
  o.key = o.stochastic ? next_key(i) : 0;  // the CPU kernel's keys, in the same order
  o.count_loss = grad_dtype == c10::kHalf;
  if (measure) {
    o.micro = micro_of[i]++;
    if (micro_sq.size() <= size_t(o.micro)) micro_sq.resize(size_t(o.micro) + 1, 0.0);  // read_tally() fills them
  }
  return o;
}

void ShadowState::read_tally() {
  if (!on_cuda) return;
  if (!micro_sq.empty() && tally.micro_sq.defined()) {
    const at::Tensor host = tally.micro_sq.narrow(0, 0, int64_t(micro_sq.size())).cpu();
    for (size_t m = 0; m < micro_sq.size(); ++m) micro_sq[m] = host.data_ptr<double>()[m];
  }
  if (tally.loss.defined()) {
    const at::Tensor host = tally.loss.cpu();
    loss.underflowed = host.data_ptr<int64_t>()[0];
    loss.overflowed = host.data_ptr<int64_t>()[1];
  }
}

void ShadowState::close_reference() {
  if (reference.empty()) return;
  double diff2 = 0, ref2 = 0;
  for (size_t i = 0; i < shadows.size(); ++i) {
    // One parameter's fp32 difference at a time: no second full-size tree. Out of place: for a float32 shadow
    // .to(kFloat) is the shadow itself, and an in-place sub_ would zero the step's gradient.
    const double d = at::linalg_vector_norm(at::sub(shadows[i].to(at::kFloat), reference[i])).item<double>();
    const double r = at::linalg_vector_norm(reference[i]).item<double>();
    diff2 += d * d;
    ref2 += r * r;
  }
  reference_error = ref2 > 0 ? std::sqrt(diff2 / ref2) : 0.0;
  reference_sq_norm = 0;
  for (const auto& r : reference) reference_sq_norm += squared_norm(r);
  reference.clear();
}

ShadowAccumulator::ShadowAccumulator(const std::vector<at::Tensor>& params, c10::ScalarType grad_dtype)
    : ShadowAccumulator(params, grad_dtype, {}) {}

ShadowAccumulator::ShadowAccumulator(const std::vector<at::Tensor>& params, c10::ScalarType grad_dtype,
                                     const std::vector<ShadowRange>& ranges)
    : state_(std::make_shared<ShadowState>()) {
  auto& s = *state_;
  s.pieces = !ranges.empty();
  s.grad_dtype = grad_dtype;
  static std::atomic<uint64_t> serials{0};
  s.serial = ++serials;
  for (const auto& p : params) {
    if (!p.requires_grad()) continue;
    if (!p.is_leaf()) throw std::invalid_argument("ShadowAccumulator: parameters must be leaf tensors");
    s.index_of[p.unsafeGetTensorImpl()] = s.params.size();
    // Allocated once and reused every step.
    if (!s.pieces) {
      s.shadows.push_back(at::zeros_like(p, p.options().dtype(grad_dtype)));
    } else {
      const ShadowRange r = s.params.size() < ranges.size() ? ranges[s.params.size()] : ShadowRange{-1, -1};
      if (r.offset < 0 || r.numel < 0 || r.offset + r.numel > p.numel())
        throw std::invalid_argument("ShadowAccumulator: one range per trainable parameter, inside it");
      s.shadows.push_back(at::zeros({r.numel}, p.options().dtype(grad_dtype)));
    }
    s.params.push_back(p);
  }
  if (s.pieces && ranges.size() != s.params.size())
    throw std::invalid_argument("ShadowAccumulator: one range per trainable parameter");
  s.stale.assign(s.shadows.size(), 0);
  s.on_cuda = !s.shadows.empty();
  for (const auto& t : s.shadows) {
    s.on_cpu = s.on_cpu && t.device().is_cpu();
    s.on_cuda = s.on_cuda && t.is_cuda();
  }
  s.on_cuda = s.on_cuda && cuda_fold_built();  // asked only for CUDA shadows: it loads the CUDA library
  std::weak_ptr<ShadowState> weak = state_;
  for (size_t i = 0; i < s.params.size(); ++i) {
    auto node = torch::autograd::impl::grad_accumulator(s.params[i]);
    s.hook_keys.push_back(node->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [weak, i](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          // Runs right after autograd stored a microbatch's gradient in params[i].grad(): fold it, free it.
          auto state = weak.lock();
          if (!state || !state->open) return outputs;
          at::Tensor& grad = state->params[i].mutable_grad();
          if (grad.defined()) {
            state->fold(i, grad);
            grad.reset();
          }
          return outputs;
        })));
    s.grad_nodes.push_back(std::move(node));
  }
}

ShadowAccumulator::~ShadowAccumulator() {
  for (size_t i = 0; i < state_->grad_nodes.size(); ++i) state_->grad_nodes[i]->del_post_hook(state_->hook_keys[i]);
}

void ShadowAccumulator::begin() { begin(state_->window + 1); }

void ShadowAccumulator::begin(int64_t window, bool with_reference) {
  auto& s = *state_;
  for (const auto& p : s.params)
    if (p.grad().defined())
      throw std::logic_error("ShadowAccumulator::begin: a parameter already has .grad; it would be folded twice");
  if (window < 0) throw std::invalid_argument("ShadowAccumulator::begin: the window number must be >= 0");
  s.open = true;
  s.folds = 0;
  s.fold_seconds = 0;
  s.window = window;
  s.fold_number.assign(s.params.size(), 0);
  s.micro_of.assign(s.params.size(), 0);
  s.micro_sq.clear();
  s.loss = {};
  s.tally.reset();
  s.reference_error = std::numeric_limits<double>::quiet_NaN();
  s.reference_sq_norm = std::numeric_limits<double>::quiet_NaN();
  s.reference.clear();
  if (!with_reference) return;
  int64_t bytes = 0;
  for (const auto& t : s.shadows) {  // shaped as the shadows: whole parameters, or this process's pieces
    s.reference.push_back(at::zeros_like(t, t.options().dtype(at::kFloat)));
    bytes += t.numel() * int64_t(sizeof(float));
  }
  s.reference_bytes_high = std::max(s.reference_bytes_high, bytes);
}

void ShadowAccumulator::end() {
  state_->open = false;
  state_->settle();  // parameters no microbatch reached read as zero
  state_->read_tally();
  state_->close_reference();
}

void ShadowAccumulator::set_rounding(Rounding rounding, uint64_t seed) {
  if (rounding == Rounding::kStochastic && !state_->on_cpu && !state_->on_cuda)
    throw std::invalid_argument(cuda_fold_built()
                                    ? "ShadowAccumulator: stochastic rounding needs the shadows all on the CPU or all "
                                      "on CUDA"
                                    : "ShadowAccumulator: stochastic rounding of non-CPU shadows needs a build with the "
                                      "CUDA fold (a CUDA LibTorch and nvcc)");
  state_->rounding = rounding;
  state_->seed = seed;
}

Rounding ShadowAccumulator::rounding() const { return state_->rounding; }
double ShadowAccumulator::reference_error() const { return state_->reference_error; }
double ShadowAccumulator::reference_sq_norm() const { return state_->reference_sq_norm; }
int64_t ShadowAccumulator::reference_bytes() const { return state_->reference_bytes_high; }
RoundingLoss ShadowAccumulator::rounding_loss() const { return state_->loss; }
void ShadowAccumulator::set_fold_observer(std::function<void(size_t)> observer) {
  state_->observer = std::move(observer);
}
void ShadowAccumulator::set_fold_sink(std::function<void(size_t, const at::Tensor&, bool)> sink) {
  if (sink && !state_->pieces)
    throw std::logic_error("ShadowAccumulator::set_fold_sink: only an accumulator built with ranges hands its folds on");
  state_->sink = std::move(sink);
}
void ShadowAccumulator::fold_piece(size_t param, const at::Tensor& piece) {
  auto& s = *state_;
  if (piece.numel() != s.shadows.at(param).numel())
    throw std::invalid_argument("ShadowAccumulator::fold_piece: the piece is not the shadow's length");
  if (!s.open) throw std::logic_error("ShadowAccumulator::fold_piece: outside begin()/end()");
  s.fold_reduced(param, piece);
}
void ShadowAccumulator::set_norm_reducer(std::function<double(double)> reducer) {
  state_->norm_reducer = std::move(reducer);
}
bool ShadowAccumulator::holds_pieces() const { return state_->pieces; }
void ShadowAccumulator::set_measure_sq_norms(bool on) { state_->measure = on; }
bool ShadowAccumulator::measures_sq_norms() const { return state_->measure; }
const std::vector<double>& ShadowAccumulator::microbatch_sq_norms() const { return state_->micro_sq; }

double ShadowAccumulator::squared_norm() const {
  state_->settle();
  double total = 0;
  for (const auto& s : state_->shadows) total += accumulate::squared_norm(s);
  return state_->norm_reducer ? state_->norm_reducer(total) : total;
}

double ShadowAccumulator::global_norm() const {
  state_->settle();
  const auto& shadows = state_->shadows;
  if (state_->norm_reducer) return std::sqrt(squared_norm());  // pieces: every process's squares summed
  if (!shadows.empty() && std::all_of(shadows.begin(), shadows.end(), [](const at::Tensor& s) {
        return s.scalar_type() == at::kBFloat16 && s.device().is_cpu();
      })) {
    // bf16 on the CPU: the blocked sums of SquaredNorm.h, widened in registers (LibTorch 1.13's norm with
    // dtype=float copies each shadow to fp32 first: 130-160 ms for a 32000 x 512 one on 2 cores, under load).
    return std::sqrt(squared_norm());
  }
  std::vector<at::Tensor> norms;
  norms.reserve(state_->shadows.size());
  // Each norm is accumulated in fp32 from the grad_dtype tensor, one parameter at a time.
  for (const auto& s : state_->shadows) norms.push_back(at::linalg_vector_norm(s, 2, c10::nullopt, false, at::kFloat));
  if (norms.empty()) return 0.0;
  return at::linalg_vector_norm(at::stack(norms)).item<double>();
}

void ShadowAccumulator::scale_(double factor) {
  state_->settle();
  for (auto& s : state_->shadows) scale_tensor_(s, factor);  // fp32 math, rounded once per element
}

double ShadowAccumulator::clip_factor(double norm, double max_norm) {
  return max_norm > 0 && std::isfinite(norm) && norm > max_norm ? max_norm / (norm + 1e-6) : 1.0;
}

double ShadowAccumulator::clip_global_norm_(double max_norm) {
  const double norm = global_norm();
  const double factor = clip_factor(norm, max_norm);
  if (factor != 1.0) scale_(factor);
  return norm;
}

void ShadowAccumulator::step(torch::optim::Optimizer& optimizer) {
  auto& s = *state_;
  if (s.pieces)
    throw std::logic_error("ShadowAccumulator::step: the shadows are this process's pieces; the sharded optimizer "
                           "(distributed/ShardedOptimizer.h) steps them");
  s.settle();
  for (size_t i = 0; i < s.params.size(); ++i) s.params[i].mutable_grad() = s.shadows[i];
  optimizer.step();
  for (size_t i = 0; i < s.params.size(); ++i) s.params[i].mutable_grad() = at::Tensor();
  zero_();
}

void ShadowAccumulator::zero_() { state_->mark_all_stale(); }  // lazily: see ShadowState::stale

size_t ShadowAccumulator::position(const at::Tensor& param) const {
  auto it = state_->index_of.find(param.unsafeGetTensorImpl());
  if (it == state_->index_of.end())
    throw std::invalid_argument("ShadowAccumulator: the tensor is not one of the accumulated parameters");
  return it->second;
}

at::Tensor ShadowAccumulator::cast(const at::Tensor& param, c10::ScalarType dtype) const {
  return folding_cast(state_, position(param), param, dtype);
}

at::Tensor ShadowAccumulator::gather_rows(const at::Tensor& param, const at::Tensor& index,
                                          c10::ScalarType dtype) const {
  return folding_gather(state_, position(param), param, index, dtype);
}

const std::vector<at::Tensor>& ShadowAccumulator::params() const { return state_->params; }
const std::vector<at::Tensor>& ShadowAccumulator::shadows() const {
  state_->settle();
  return state_->shadows;
}
std::vector<at::Tensor>& ShadowAccumulator::mutable_shadows() {
  state_->settle();
  return state_->shadows;
}
c10::ScalarType ShadowAccumulator::grad_dtype() const { return state_->grad_dtype; }
uint64_t ShadowAccumulator::serial() const { return state_->serial; }
int64_t ShadowAccumulator::folds() const { return state_->folds; }
double ShadowAccumulator::fold_seconds() const { return state_->fold_seconds; }

int64_t ShadowAccumulator::bytes() const {
  int64_t total = 0;
  for (const auto& s : state_->shadows) total += s.numel() * static_cast<int64_t>(s.element_size());
  return total;
}

} // namespace shadowgrad::accumulate
