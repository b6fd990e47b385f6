#pragma once
// Language modelling on a token file (see TokenFile.h): example i of step s is the window of max_length + 1
// tokens at offset example_hash(seed, s, i) mod (tokens - max_length), so a step's global batch depends only on
// (data_shuffle_seed, step), never on K or the process count. Windows cross document boundaries, as in nanoGPT
// and llm.c: the EOS token between documents is an ordinary token to predict, and attention is not masked there.
// The file is validated when opened: its layout, at least one window, and every token < vocab_size (one pass
// over the mapped file; after that a window read costs only its own tokens).
#include <string>

#include "data/DataSource.h"
#include "data/TokenFile.h"

namespace shadowgrad::data {

class TokenSource : public DataSource {
public:
  TokenSource(TokenFile file, uint64_t seed, int64_t vocab_size, int64_t max_length);
  Batch examples(int64_t step, int64_t first, int64_t count) const override;
  Batch eval_examples(int64_t first, int64_t count) const override;
  int64_t eval_capacity() const override;
  // An epoch of a token file: its (tokens - 1) / max_length windows (windows are drawn at random offsets).
  int64_t examples_in_epochs(int64_t epochs) const override { return epochs * eval_capacity(); }
  const TokenFile& file() const { return file_; }

private:
  TokenFile file_;
  uint64_t seed_;
  int64_t max_length_;
};

} // namespace shadowgrad::data
