#include "data/Packing.h"

#include <algorithm>
#include <stdexcept>

namespace shadowgrad::data {

std::vector<Row> pack_first_fit_decreasing(const std::vector<int64_t>& lengths, const std::vector<int64_t>& order,
                                           int64_t capacity, int64_t buffer) {
  std::vector<Row> rows;
  for (size_t begin = 0; begin < order.size(); begin += size_t(buffer)) {
    std::vector<int64_t> chunk(order.begin() + int64_t(begin),
                               order.begin() + int64_t(std::min(order.size(), begin + size_t(buffer))));
    // Longest first; ties keep their order in `order`, so the packing is a function of the order alone.
    std::stable_sort(chunk.begin(), chunk.end(), [&](int64_t a, int64_t b) { return lengths[a] > lengths[b]; });
    std::vector<int64_t> room;  // free tokens of this buffer's rows
    const size_t first_row = rows.size();
    for (int64_t e : chunk) {
      if (lengths[e] > capacity) throw std::logic_error("pack_first_fit_decreasing: an example longer than a row");
      size_t r = 0;
      while (r < room.size() && room[r] < lengths[e]) ++r;
      if (r == room.size()) {
        room.push_back(capacity);
        rows.emplace_back();
      }
      room[r] -= lengths[e];
      rows[first_row + r].push_back(e);
    }
  }
  return rows;
}

} // namespace shadowgrad::data
