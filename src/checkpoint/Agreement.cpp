#include "checkpoint/Agreement.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace shadowgrad::checkpoint {

std::vector<int64_t> from_rank0(const Topology& topology, const std::vector<int64_t>& mine) {
  if (topology.world_size == 1) return mine;
  const int64_t n = topology.exchange({topology.rank == 0 ? int64_t(mine.size()) : 0}).at(0);
  std::vector<int64_t> padded = topology.rank == 0 ? mine : std::vector<int64_t>(n, 0);
  padded.resize(std::max<int64_t>(n, 1));                      // an all-gather of nothing is not one
  const std::vector<int64_t> all = topology.exchange(padded);  // rank 0's come first
  return std::vector<int64_t>(all.begin(), all.begin() + n);
}

std::vector<std::string> gather_texts(const Topology& topology, const std::string& mine) {
  if (topology.world_size == 1) return {mine};
  const std::vector<int64_t> lengths = topology.exchange({int64_t(mine.size())});
  const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  const size_t words = std::max<size_t>(1, size_t(longest + 7) / 8);  // the text, 8 bytes to an int64
  std::vector<int64_t> packed(words, 0);
  std::memcpy(packed.data(), mine.data(), mine.size());
  const std::vector<int64_t> all = topology.exchange(packed);
  std::vector<std::string> out;
  for (int r = 0; r < topology.world_size; ++r)
    out.emplace_back(reinterpret_cast<const char*>(all.data() + r * words), size_t(lengths.at(r)));
  return out;
}

Agreed agree(const Topology& topology, const Outcome& mine) {
  if (topology.world_size == 1) return {mine.verdict, 0, mine.message};
  const std::vector<int64_t> verdicts = topology.exchange({int64_t(mine.verdict)});
  Agreed out;
  for (int r = 0; r < topology.world_size; ++r)
    if (verdicts.at(r) > int64_t(out.verdict)) out = {Verdict(verdicts[r]), r, ""};
  if (out.verdict == Verdict::kLoadable) return out;
  out.message = gather_texts(topology, mine.message).at(out.rank);
  return out;
}

} // namespace shadowgrad::checkpoint
