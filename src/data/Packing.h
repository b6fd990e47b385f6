#pragma once
// Whole examples into rows of `capacity` tokens. Each run of `buffer` consecutive examples of `order` is packed by
// first-fit-decreasing: longest first, each into the first row that still has room, else a new row. Rows never
// straddle two buffers, so a row depends only on its own buffer. Every example must be <= capacity tokens.
//
//   std::vector<Row> rows = pack_first_fit_decreasing(lengths, order, 128, 1024);
//   // rows[r] lists example ids; with buffer 1 (or packing off) every row is one example
#include <cstdint>
#include <vector>

namespace shadowgrad::data {

using Row = std::vector<int64_t>;  // example ids, in the order they sit in the row

std::vector<Row> pack_first_fit_decreasing(const std::vector<int64_t>& lengths, const std::vector<int64_t>& order,
                                           int64_t capacity, int64_t buffer);

} // namespace shadowgrad::data
