#pragma once
// What make_source and make_eval_source need, separate from the full config.
//
//   auto options = DataOptions::from_config(cfg);   // dataset_type, dataset_path, vocab_size, ...
//   auto source = make_source(options);
#include <cstdint>
#include <string>

#include "config/ConfigEnums.h"

namespace shadowgrad::config {
struct Config;
}

namespace shadowgrad::data {

struct DataOptions {
  using Type = config::DatasetType;
  Type type = Type::synthetic;
  std::string path;       // dataset_path: text or token file
  std::string eval_path;  // eval_dataset_path: held-out file in the same format
  config::TokenFileFormat format = config::TokenFileFormat::llmc;
  std::string tokenizer_path;  // when set, vocab_size must hold its pieces
  uint64_t seed = 0;           // data_shuffle_seed: example j of the run depends only on it and j (ExampleOrder.h)
  int64_t vocab_size = 256;
  int64_t max_length = 128;  // max_target_length: tokens per example
  double synthetic_min_length_fraction = 0.5;
  int64_t eval_interval = -1;  // <= 0: no eval source
  // dataset_type=sft (SftSource.h)
  bool packing = true;
  bool sft_train_on_completion_only = true;
  config::SftLongExamples sft_long_examples = config::SftLongExamples::truncate;

  static DataOptions from_config(const config::Config& cfg);
};

} // namespace shadowgrad::data
