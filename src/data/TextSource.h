#pragma once
// Byte-level language modelling on a real text file: token = byte value. Each example is a window of
// max_length + 1 bytes at an offset drawn from (seed, step, index). The file is read once and validated:
// it must exist, be readable, hold more than max_length bytes, contain no NUL byte (binary files are
// rejected), and every byte must be < vocab_size.
#include <string>
#include <vector>

#include "data/DataSource.h"

namespace shadowgrad::data {

class TextSource : public DataSource {
 public:
  // `key` names the config key in messages ("dataset_path", "eval_dataset_path").
  TextSource(const std::string& path, uint64_t seed, int64_t vocab_size, int64_t max_length,
             const std::string& key = "dataset_path");
  Batch examples(int64_t step, int64_t first, int64_t count) const override;
  Batch eval_examples(int64_t first, int64_t count) const override;
  int64_t eval_capacity() const override;
  // An epoch of a text file: its (bytes - 1) / max_length windows (windows are drawn at random offsets).
  int64_t examples_in_epochs(int64_t epochs) const override { return epochs * eval_capacity(); }

 private:
  std::vector<uint8_t> bytes_;
  uint64_t seed_;
  int64_t max_length_;
};

} // namespace shadowgrad::data
