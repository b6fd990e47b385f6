#include "distributed/ParameterShards.h"

#include <algorithm>
#include <stdexcept>

#include <ATen/ATen.h>
#include <c10/core/Allocator.h>
#include <fmt/format.h>

#include "distributed/Communicator.h"
#include "distributed/DataParallel.h"

namespace shadowgrad::distributed {

struct ParameterShards::Unit {
  int64_t begin = 0, numel = 0;       // flat range of the unit
  size_t first = 0, count = 0;        // its tensors in tensors_
  at::Tensor buffer;                  // 1-D, the tensors are views of it; storage of 0 bytes when released
  bool gathered = true;
  std::vector<PendingCollective> pending;
  std::vector<std::pair<at::Tensor, at::Tensor>> landing;  // cast_before_gather: (what travels, where it widens to)
  int64_t bytes() const { return numel * int64_t(buffer.element_size()); }
};

namespace {

int64_t total_numel(const std::vector<std::vector<at::Tensor>>& units) {
  int64_t n = 0;
  for (const auto& u : units)
    for (const auto& t : u) n += t.numel();
  return n;
}

// The storage keeps its identity (every view and every tensor autograd saved still points at it): only its bytes go
// and come back, as FSDP's flat parameters do.
void free_storage(const at::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(c10::DataPtr(nullptr, t.device()));
  s->set_nbytes(0);
}

void allocate_storage(const at::Tensor& t, size_t nbytes) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(c10::GetAllocator(t.device().type())->allocate(nbytes));
  s->set_nbytes(nbytes);
}

} // namespace

ParameterShards::ParameterShards(std::shared_ptr<Communicator> comm, std::vector<std::vector<at::Tensor>> units,
                                 bool reshard_after_forward)
    : ParameterShards(std::move(comm), total_numel(units), int64_t(units.size()), reshard_after_forward) {
  for (size_t u = 0; u < units.size(); ++u) adopt(int64_t(u), std::move(units[u]));
}

ParameterShards::ParameterShards(std::shared_ptr<Communicator> comm, int64_t total, int64_t units,
                                 bool reshard_after_forward)
    : comm_(std::move(comm)),
      reshard_after_forward_(reshard_after_forward),
      plan_(total, comm_->rank(), comm_->world_size()),
      checksum_(util::kFnv1aOffset) {
  for (int64_t u = 0; u < units; ++u) units_.push_back(std::make_unique<Unit>());
}

void ParameterShards::adopt(int64_t u, std::vector<at::Tensor> tensors) {
  if (u != adopted_ || u >= int64_t(units_.size()))
    throw std::logic_error(fmt::format("ParameterShards: unit {} adopted after {} of {}", u, adopted_, units_.size()));
  at::NoGradGuard no_grad;
  Unit& unit = *units_[u];
  unit.begin = plan_.placed();
  unit.first = tensors_.size();
  unit.count = tensors.size();
  for (const auto& t : tensors) {
    if (t.scalar_type() != tensors.front().scalar_type() || t.device() != tensors.front().device())
      throw std::invalid_argument("ParameterShards: a unit's tensors must share one dtype and device");
    unit.numel += t.numel();
  }
  checksum_ = checksum(tensors, checksum_);
  if (!tensors.empty()) {
    // The unit's tensors become views of one flat buffer holding their values.
    unit.buffer = at::empty({unit.numel}, tensors.front().options());
    int64_t at = 0;
    for (auto& t : tensors) {
      unit.buffer.narrow(0, at, t.numel()).copy_(t.reshape({-1}));
      t.set_(unit.buffer.storage(), at, t.sizes(), t.contiguous().strides());
      at += t.numel();
    }
  }
  for (auto& t : tensors) {
    const Piece& p = plan_.add(t.numel());
    piece_of_.push_back(p.numel > 0 ? int64_t(pieces_.size()) : -1);
    if (p.numel > 0) pieces_.push_back(t.detach().view({-1}).narrow(0, p.offset, p.numel).clone());
    tensors_.push_back(t);
  }
  ++adopted_;
  // Given back at once: what training gathers is counted, not the unit it was built from.
  if (unit.buffer.defined()) free_storage(unit.buffer);
  unit.gathered = false;
}

// No collective here: a destructor may run while another process has gone. Whoever reads the model after the run
// calls gather_all() first.
ParameterShards::~ParameterShards() = default;

model::DecoderImpl::UnitHooks ParameterShards::hooks() {
  if (adopted_ != int64_t(units_.size()) || plan_.placed() != plan_.total())
    throw std::logic_error(fmt::format("ParameterShards: {} of {} units adopted, {} of {} elements", adopted_,
                                       units_.size(), plan_.placed(), plan_.total()));
  model::DecoderImpl::UnitHooks h;
  h.forward_begin = [this](int64_t u) {
    gather(u);
    prefetch(u + 1);
  };
  h.forward_end = [this](int64_t u) {
    // Without grad there is no backward to keep the unit for.
    if (reshard_after_forward_ || !at::GradMode::is_enabled()) release(u);
  };
  h.backward_begin = [this](int64_t u) {
    gather(u);
    if (u > 1) prefetch(u - 1);  // unit 0's backward (the embedding's gather) reads no weight
  };
  h.backward_end = [this](int64_t u) { release(u); };
  return h;
}

void ParameterShards::start(Unit& unit) {
  at::NoGradGuard no_grad;
  allocate_storage(unit.buffer, size_t(unit.bytes()));
  unit.gathered = true;
  gathered_bytes_ += unit.bytes();
  gathered_high_ = std::max(gathered_high_, gathered_bytes_);
  // This process's pieces go into its part of the buffer; then every owner's part is broadcast from it.
  for (size_t i = unit.first; i < unit.first + unit.count; ++i) {
    if (piece_of_[i] < 0) continue;
    const int64_t at = tensors_[i].storage_offset() + plan_.piece(i).offset;
    unit.buffer.narrow(0, at, plan_.piece(i).numel).copy_(pieces_[piece_of_[i]]);
  }
  const int64_t size = plan_.shard_size(), end = unit.begin + unit.numel;
  for (int r = int(unit.begin / size); r < comm_->world_size() && int64_t(r) * size < end; ++r) {
    const int64_t lo = std::max(unit.begin, int64_t(r) * size), hi = std::min(end, int64_t(r + 1) * size);
    if (hi > lo) send_part(unit, r, lo - unit.begin, hi - unit.begin);
  }
}

void ParameterShards::send_part(Unit& unit, int owner, int64_t lo, int64_t hi) {
  if (!travel_dtype_) {
    at::Tensor part = unit.buffer.narrow(0, lo, hi - lo);
    unit.pending.push_back(comm_->start_broadcast(part, owner));
    return;
  }
  // One broadcast per run of tensors that travel alike: matrices cast, 1-D tensors as stored.
  auto cast = [&](size_t i) { return tensors_[i].dim() >= 2; };
  int64_t run_lo = lo;
  for (size_t i = unit.first; i < unit.first + unit.count; ++i) {
    const int64_t t_hi = std::min(hi, tensors_[i].storage_offset() + tensors_[i].numel());
    const bool last = i + 1 == unit.first + unit.count || t_hi >= hi;
    if (t_hi <= run_lo || (!last && cast(i + 1) == cast(i))) continue;
    at::Tensor part = unit.buffer.narrow(0, run_lo, t_hi - run_lo);
    if (cast(i)) {
      at::Tensor wire = owner == comm_->rank() ? part.to(*travel_dtype_)
                                               : at::empty({part.numel()}, part.options().dtype(*travel_dtype_));
      unit.pending.push_back(comm_->start_broadcast(wire, owner));
      unit.landing.emplace_back(wire, part);
    } else {
      unit.pending.push_back(comm_->start_broadcast(part, owner));
    }
    run_lo = t_hi;
    if (last) break;
  }
}

void ParameterShards::cast_before_gather(c10::ScalarType compute_dtype) {
  travel_dtype_.reset();
  for (const auto& t : tensors_)
    if (int64_t(c10::elementSize(compute_dtype)) < int64_t(t.element_size())) travel_dtype_ = compute_dtype;
}

void ParameterShards::gather(int64_t u) {
  if (u < 0 || u >= int64_t(units_.size()) || !units_[u]->buffer.defined()) return;
  Unit& unit = *units_[u];
  if (!unit.gathered) start(unit);
  for (auto& p : unit.pending) p.wait();
  unit.pending.clear();
  at::NoGradGuard no_grad;
  for (auto& [wire, place] : unit.landing) place.copy_(wire);  // every process, the owner too: the same values
  unit.landing.clear();
}

void ParameterShards::prefetch(int64_t u) {
  if (u < 0 || u >= int64_t(units_.size()) || !units_[u]->buffer.defined() || units_[u]->gathered) return;
  start(*units_[u]);
}

void ParameterShards::release(int64_t u) {
  if (u < 0 || u >= int64_t(units_.size()) || !units_[u]->buffer.defined() || !units_[u]->gathered) return;
  Unit& unit = *units_[u];
  for (auto& p : unit.pending) p.wait();
  unit.pending.clear();
  unit.landing.clear();
  free_storage(unit.buffer);
  unit.gathered = false;
  gathered_bytes_ -= unit.bytes();
}

int64_t ParameterShards::largest_unit_bytes() const {
  int64_t most = 0;
  for (const auto& u : units_)
    if (u->buffer.defined()) most = std::max(most, u->bytes());
  return most;
}

void ParameterShards::release_all() {
  for (int64_t u = 0; u < int64_t(units_.size()); ++u) release(u);
}

void ParameterShards::gather_all() {
  // Whoever reads the whole weights (a fingerprint, a load) reads the masters' values: nothing travels cast.
  const auto travel = travel_dtype_;
  travel_dtype_.reset();
  release_all();
  for (int64_t u = 0; u < int64_t(units_.size()); ++u) gather(u);
  travel_dtype_ = travel;
}

void ParameterShards::adopt_values() {
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < tensors_.size(); ++i)
    if (piece_of_[i] >= 0)
      pieces_[piece_of_[i]].copy_(tensors_[i].detach().view({-1}).narrow(0, plan_.piece(i).offset, plan_.piece(i).numel));
}

} // namespace shadowgrad::distributed
