#pragma once
// Preference pairs (dataset_type=preference) from a pair file (PairFile.h). A pair is two sequences, prompt + chosen
// answer and prompt + rejected answer; only the answer tokens are targets. Batches count pairs, and a pair's two
// sequences always sit in the same batch. Unpacked, pair j of a batch is rows 2j (chosen) and 2j+1 (rejected),
// right-padded to max_length; packed, the batch's sequences are packed whole into rows of max_length by
// first-fit-decreasing (block-causal, positions restart per sequence), as SFT examples are (SftSource.h).
// A sequence longer than max_length is cut from its end (sft_long_examples=truncate, TRL's keep_start) or its pair
// dropped (drop); a pair whose prompt leaves no room for an answer token is dropped either way. Both are counted.
//
// Order: epoch e shuffles the kept pairs with (data_shuffle_seed, e); pair j of the run is pair j of the
// concatenated epochs, a pure function of (seed, j), so a step's pairs never depend on K or the process count.
// Eval and the reference pass read the kept pairs in file order.
//
//   PairSource s(PairFile::open(path, "dataset_path"), options, "dataset_path");
//   PairBatch b = s.pairs(first, count);            // pairs [first, first + count) of the run
//   s.set_reference(logps);                          // 2 per kept pair: the reference's summed answer log-probs
#include <mutex>
#include <string>
#include <vector>

#include "data/DataSource.h"
#include "data/PairFile.h"

namespace shadowgrad::data {

struct PairBatch {
  Batch rows;            // what the model reads; rows.targets hold the answer tokens only
  at::Tensor answer;     // [N, T] int64: the answer each target belongs to (2i chosen, 2i+1 rejected of pair i); -1
  at::Tensor reference;  // [2 x pairs] double: the reference's summed answer log-probs; undefined before set_reference
  int64_t pairs = 0;
  std::vector<int64_t> kept;  // the kept-pair index (file order among the kept pairs) of each of its pairs
};

class PairSource : public DataSource {
 public:
  PairSource(PairFile file, const DataOptions& options, const std::string& key);

  // Pairs [first, first + count) of the run's endless shuffled stream.
  PairBatch pairs(int64_t first, int64_t count) const;
  // Kept pairs [first, first + count) in file order, clipped to the end (eval, the reference pass).
  PairBatch pairs_in_file_order(int64_t first, int64_t count) const;
  int64_t pairs_kept() const { return int64_t(kept_.size()); }
  int64_t examples_in_epochs(int64_t epochs) const override { return epochs * pairs_kept(); }
  // Pairs (or their rows) as a plain Batch, for code that only counts tokens.
  Batch examples(int64_t step, int64_t first, int64_t count) const override;
  Batch eval_examples(int64_t first, int64_t count) const override;
  int64_t eval_capacity() const override { return pairs_kept(); }
  bool eval_pads_past_end() const override { return true; }

  // The reference's summed log-probs: [2k] chosen and [2k+1] rejected answer of kept pair k.
  void set_reference(std::vector<double> logps);
  bool has_reference() const { return !reference_.empty(); }
  uint64_t fingerprint() const { return file_.fingerprint(); }
  const std::string& label() const { return file_.label(); }

 private:
  struct Kept {
    int64_t index;                 // in the file
    int64_t prompt, chosen, rejected;  // tokens used, after truncation
  };
  PairBatch build(const std::vector<int64_t>& kept) const;
  const std::vector<int64_t>& epoch(int64_t e) const;  // kept-pair order of epoch e, cached

  PairFile file_;
  uint64_t seed_;
  int64_t max_length_;
  bool packing_;
  std::vector<Kept> kept_;
  std::vector<double> reference_;
  mutable std::mutex mutex_;
  mutable std::vector<std::vector<int64_t>> epochs_;
};

} // namespace shadowgrad::data
