#pragma once
// Supervised fine-tuning data (dataset_type=sft) from an SFT file (SftFile.h). A training row is max_length tokens:
// with packing, whole examples packed by first-fit-decreasing (Packing.h); without, one example, right-padded.
// Labels are shifted inside each example: position t of an example targets its token t+1 when that token is a
// target, so no target crosses from one example to the next, and an example's last position has none.
// Each token carries its example's segment id (1, 2, ... within the row; 0 for padding) and its position in the
// example (0 at each example's start), from which the model builds a block-causal mask and gathers RoPE. Unpacked rows
// keep them too (they count the padding); Batch::model_inputs() drops them for the model, which needs no mask there.
//
// Order: epoch e shuffles the examples with (data_shuffle_seed, e), packs them, and shuffles the rows; row j of the
// run is row j of the concatenated epochs. So row j is a pure function of (seed, j): the global batch of a step
// does not depend on K or the process count, and a resumed run reads the rows it would have read.
// Eval: the held-out examples in file order, packed the same way; eval_examples past the last row are empty rows
// (no target), so an evaluation covering the rows with any batch size sees every example once.
//
//   SftSource s(SftFile::open(path, "dataset_path"), options, "dataset_path");
//   Batch b = s.examples(0, first_row, count);   // rows [first_row, first_row + count)
#include <mutex>
#include <string>
#include <vector>

#include "data/DataSource.h"
#include "data/Packing.h"
#include "data/SftFile.h"

namespace shadowgrad::data {

// Examples per first-fit-decreasing buffer: over 1024 examples FFD's rows are within a few percent of the best
// packing (docs/data.md has the measured padding), and a row depends on no example outside its buffer.
inline constexpr int64_t kPackingBuffer = 1024;

class SftSource : public DataSource {
 public:
  SftSource(SftFile file, const DataOptions& options, const std::string& key);
  Batch examples(int64_t step, int64_t first, int64_t count) const override;
  Batch eval_examples(int64_t first, int64_t count) const override;
  int64_t eval_capacity() const override { return int64_t(eval_rows_.size()); }
  bool eval_pads_past_end() const override { return true; }

  int64_t examples_kept() const { return int64_t(kept_.size()); }
  // Rows of the first epoch (packed or not), and its padding fraction: what packing achieved.
  int64_t rows_per_first_epoch() const;
  // Rows of epochs [0, epochs): each epoch packs its own shuffle, so their row counts may differ slightly.
  int64_t examples_in_epochs(int64_t epochs) const override;
  double first_epoch_padding() const;

 private:
  struct Example {
    int64_t index;   // in the file
    int64_t length;  // tokens used (after truncation)
  };
  Batch build(const std::vector<const Row*>& rows) const;
  const std::vector<Row>& epoch(int64_t e) const;  // cached
  std::vector<Row> pack(const std::vector<int64_t>& order) const;

  SftFile file_;
  uint64_t seed_;
  int64_t max_length_;
  bool packing_, completion_only_;
  std::vector<Example> kept_;
  std::vector<int64_t> lengths_;  // kept_[i].length
  std::vector<Row> eval_rows_;
  mutable std::mutex mutex_;
  mutable std::vector<std::vector<Row>> epochs_;
  mutable std::vector<int64_t> epoch_start_;  // first row of each cached epoch
};

} // namespace shadowgrad::data
