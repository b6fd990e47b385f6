#pragma once
// Where training sequences come from. A source is a pure function of (seed, step, example index):
// the global batch of a step never depends on how it is later split into microbatches or processes,
// which is what makes GA-vs-no-GA and 1-vs-N-process runs comparable step by step.
//
//   auto source = shadowgrad::data::make_source(DataOptions::from_config(cfg));
//   Batch b = source->examples(step, first, count);   // examples [first, first+count) of step's global batch
#include <cstdint>
#include <memory>
#include <vector>

#include "data/Batch.h"
#include "data/DataOptions.h"

namespace shadowgrad::data {

class DataSource {
 public:
  virtual ~DataSource() = default;
  // Examples [first, first + count) of the global batch of `step` (0-based), each max_length tokens.
  virtual Batch examples(int64_t step, int64_t first, int64_t count) const = 0;
  // Examples [first, first + count) of the fixed evaluation set: the same at every evaluation. Files give
  // consecutive windows (example j is tokens [j*T, j*T + T], so each token is a target once); synthetic data
  // gives examples of a step training never reaches (step -1).
  virtual Batch eval_examples(int64_t first, int64_t count) const = 0;
  // How many eval examples there are: (tokens - 1) / T for a file; -1 for endless synthetic data.
  virtual int64_t eval_capacity() const = 0;
  // True when eval_examples past eval_capacity() are empty rows (no target): the evaluator then covers every row,
  // the last batch part empty, instead of the whole batches only (SFT: every held-out example once).
  virtual bool eval_pads_past_end() const { return false; }
  // Training examples (SFT rows, pairs, windows) in the run's first `epochs` passes over the data; -1 for endless
  // synthetic data. What num_epochs counts.
  virtual int64_t examples_in_epochs(int64_t epochs) const { return -1; }
};

// Builds the source the options ask for. Throws DataError for a missing, empty, binary, malformed or too-short
// file, a token >= vocab_size, or a tokenizer_path that does not load or has more pieces than vocab_size.
std::unique_ptr<DataSource> make_source(const DataOptions& options);
// The held-out source for eval_loss: eval_dataset_path in dataset_type's format, or the synthetic generator;
// nullptr when eval_interval <= 0. Throws DataError as make_source does, and when the eval file is the training
// file.
std::unique_ptr<DataSource> make_eval_source(const DataOptions& options);

// A 64-bit hash of (seed, step, index): the per-example random stream both sources draw from.
uint64_t example_hash(uint64_t seed, int64_t step, int64_t index);
// Fisher-Yates driven by example_hash: the permutation depends only on (seed, stream, v.size()).
void shuffle_by_seed(std::vector<int64_t>& v, uint64_t seed, int64_t stream);

} // namespace shadowgrad::data
