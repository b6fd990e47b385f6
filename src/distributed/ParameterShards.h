#pragma once
// ZeRO-3 (shard_parameters_over_data=true, docs/distributed.md "Sharded training"): each process keeps only its range
// of the model's base tensors, and a unit's whole tensors (a decoder block, the embedding, the final norm with the
// output) exist only around the unit's use.
//
//   ParameterShards shards(comm, model->unit_tensors(), reshard_after_forward);   // a model built whole, or:
//   ParameterShards shards(comm, base_elements, units, reshard_after_forward);    // before the model, then
//   model::Decoder model(options, [&](int64_t u, model::DecoderImpl& m) { shards.adopt(u, m.unit_tensors()[u]); });
//                                     // each unit cut as it is built: no process ever holds the whole model
//   dp->verify_same_start(..., shards.start_checksum());
//   optimizer over shards.pieces()    // a full fine-tune: the master weights of this range, as ZeRO-1's pieces
//   model->set_unit_hooks(shards.hooks());
//   ... forward/backward: each unit is gathered before use and released after ...
//   after the update: shards.release_all()   // the next forward gathers the updated pieces
//
// The range is ShardPlan's over the concatenated unit tensors: for a full fine-tune that is ZeRO-1's range over the
// parameters, so the optimizer's pieces, the checkpoints' shard files and their re-sharding are ZeRO-1's. Each
// process keeps its pieces as tensors of their own; a unit's tensors are views of one flat buffer whose storage is
// given back (0 bytes) when the unit is released and allocated again when it is gathered. A gather is one broadcast
// per process whose range meets the unit, from that process (a unit usually lies in one or two ranges), started
// ahead: forward gathers unit u+1 while unit u computes, backward unit u-1 while unit u's backward runs. Collectives
// are issued in the model's order of units, the same on every process.
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include <ATen/core/Tensor.h>

#include "distributed/ShardPlan.h"
#include "model/Decoder.h"

namespace shadowgrad::distributed {

class Communicator;
class PendingCollective;

class ParameterShards {
 public:
  // `units`: the tensors of each unit in flat order (contiguous, one dtype and device per unit), holding the
  // starting values, the same on every process. Keeps this process's pieces, then releases every unit.
  ParameterShards(std::shared_ptr<Communicator> comm, std::vector<std::vector<at::Tensor>> units,
                  bool reshard_after_forward);
  // Before the model exists: `total` elements of base tensors (model::count_weights(o).base) in `units` units, each
  // then given to adopt() as it is built.
  ParameterShards(std::shared_ptr<Communicator> comm, int64_t total, int64_t units, bool reshard_after_forward);
  ~ParameterShards();

  // Unit `unit`'s tensors (as unit_tensors() lists them), whole, with their starting values: this process keeps its
  // pieces, the unit's hash joins start_checksum(), and its storage is given back. Units come in order 0, 1, ...;
  // throws std::logic_error otherwise, or when the tensors pass `total`.
  void adopt(int64_t unit, std::vector<at::Tensor> tensors);
  // distributed::checksum of every adopted tensor in flat order (of the whole weights, though never held whole):
  // what verify_same_start compares across processes.
  uint64_t start_checksum() const { return checksum_; }

  const ShardPlan& plan() const { return plan_; }
  // This process's pieces of the unit tensors, 1-D, in flat order, the non-empty ones only.
  const std::vector<at::Tensor>& pieces() const { return pieces_; }
  // The hooks that gather and release units as the model runs. Throws std::logic_error while units are missing.
  model::DecoderImpl::UnitHooks hooks();
  // Cast before the gather (MaxText's order): with a compute dtype narrower than the stored one (bf16 compute, fp32
  // weights), every matrix (2-D or more) travels in it and lands widened again. The model casts each matrix to the
  // compute dtype before every use (matmuls, the embedding's rows, a frozen base), so it computes with the same
  // values and the gather sends half the bytes. 1-D tensors (norm scales, read in fp32; biases) travel as stored.
  void cast_before_gather(c10::ScalarType compute_dtype);

  void gather(int64_t unit);   // waits for a prefetch, or gathers now
  void prefetch(int64_t unit); // starts the gather (no-op if gathered, or out of range)
  void release(int64_t unit);  // the unit's storage is given back (waits for a gather in flight first)
  void release_all();
  // Every unit gathered with the masters' exact values (nothing travels cast), for whoever reads or writes the whole
  // weights; then adopt_values() after a load wrote into them: the pieces take the tensors' values of this range.
  void gather_all();
  void adopt_values();

  // Bytes the gathered units hold now, and the most they have held.
  int64_t gathered_bytes() const { return gathered_bytes_; }
  int64_t gathered_bytes_high() const { return gathered_high_; }
  // The largest unit's bytes: with the prefetch, at most two units are gathered at once (three under
  // reshard_after_forward=false's backward, and a tied embedding stays for the step).
  int64_t largest_unit_bytes() const;

 private:
  struct Unit;
  void start(Unit& unit);
  void send_part(Unit& unit, int owner, int64_t lo, int64_t hi);  // [lo, hi) of the unit's buffer, from `owner`
  std::shared_ptr<Communicator> comm_;
  bool reshard_after_forward_;
  std::vector<std::unique_ptr<Unit>> units_;
  std::vector<at::Tensor> tensors_;       // every unit's tensors, flat order
  ShardPlan plan_;
  std::vector<at::Tensor> pieces_;        // non-empty pieces, flat order
  std::vector<int64_t> piece_of_;         // tensor index -> index into pieces_, -1 when empty
  int64_t gathered_bytes_ = 0, gathered_high_ = 0;
  std::optional<c10::ScalarType> travel_dtype_;  // cast_before_gather's, when narrower than the weights
  int64_t adopted_ = 0;  // units adopted so far
  uint64_t checksum_;
};

} // namespace shadowgrad::distributed
