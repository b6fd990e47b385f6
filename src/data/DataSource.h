#pragma once
// Where training sequences come from. A source is a pure function of (seed, step, example index):
// the global batch of a step never depends on how it is later split into microbatches or processes,
// which is what makes GA-vs-no-GA and 1-vs-N-process runs comparable step by step.
//
//   auto source = shadowgrad::data::make_source(cfg);
//   Batch b = source->examples(step, first, count);   // examples [first, first+count) of step's global batch
#include <cstdint>
#include <memory>

#include "data/Batch.h"

namespace shadowgrad::config {
struct Config;
}

namespace shadowgrad::data {

class DataSource {
 public:
  virtual ~DataSource() = default;
  // Examples [first, first + count) of the global batch of `step` (0-based), each max_length tokens.
  virtual Batch examples(int64_t step, int64_t first, int64_t count) const = 0;
};

// Builds the source the config asks for. Throws DataError for a missing, empty, binary or too-short
// file, or a token >= vocab_size.
std::unique_ptr<DataSource> make_source(const config::Config& cfg);

// A 64-bit hash of (seed, step, index): the per-example random stream both sources draw from.
uint64_t example_hash(uint64_t seed, int64_t step, int64_t index);

} // namespace shadowgrad::data
