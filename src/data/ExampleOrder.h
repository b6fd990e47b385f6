#pragma once
// Which examples a training step reads. By default examples are numbered by the cumulative count of training
// sequences: the step that starts after S sequences reads examples [S, S + B) of one endless stream, whatever its
// global batch B, so a batch that changes mid-run never skips or repeats an example. Checkpoints written before
// batch-size schedules (manifest without data_order) numbered them by (step, index within the step's batch); a run
// resumed from one keeps that order so that it continues on the data it was trained on.
//
//   Batch b = read_examples(source, ExampleOrder::sequences, step, first_sequence, rank * local, local);
#include <cstdint>
#include <string>

#include "data/Batch.h"

namespace shadowgrad::data {

class DataSource;

enum class ExampleOrder {
  sequences,  // example j of the run is key (0, j) of the source: a pure function of (seed, j)
  steps,      // example i of step s is key (s, i): the order before batch-size schedules
};

// Examples [offset, offset + count) of the step `step` that starts after `first_sequence` training sequences.
Batch read_examples(const DataSource& source, ExampleOrder order, int64_t step, int64_t first_sequence, int64_t offset,
                    int64_t count);

const char* order_name(ExampleOrder order);  // "sequences" / "steps", as in manifest.yml

} // namespace shadowgrad::data
