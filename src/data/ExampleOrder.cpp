#include "data/ExampleOrder.h"

#include "data/DataSource.h"

namespace shadowgrad::data {

Batch read_examples(const DataSource& source, ExampleOrder order, int64_t step, int64_t first_sequence, int64_t offset,
                    int64_t count) {
  // Key (0, j): the first step of either order reads the same examples; the synthetic eval set is key -1.
  if (order == ExampleOrder::sequences) return source.examples(0, first_sequence + offset, count);
  return source.examples(step, offset, count);
}

const char* order_name(ExampleOrder order) { return order == ExampleOrder::sequences ? "sequences" : "steps"; }

} // namespace shadowgrad::data
