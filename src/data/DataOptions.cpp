#include "data/DataOptions.h"

#include "config/Config.h"

namespace shadowgrad::data {

DataOptions DataOptions::from_config(const config::Config& c) {
  DataOptions o;
  o.type = c.dataset_type;
  o.path = c.dataset_path;
  o.eval_path = c.eval_dataset_path;
  o.format = c.token_file_format;
  o.tokenizer_path = c.tokenizer_path;
  o.seed = static_cast<uint64_t>(c.data_shuffle_seed);
  o.vocab_size = c.vocab_size;
  o.max_length = c.max_target_length;
  o.synthetic_min_length_fraction = c.synthetic_min_length_fraction;
  o.packing = c.packing;
  o.sft_train_on_completion_only = c.sft_train_on_completion_only;
  o.sft_long_examples = c.sft_long_examples;
  // Evaluation by sequences needs the eval source too (make_eval_source builds none for eval_interval <= 0).
  o.eval_interval = c.eval_interval > 0 || c.eval_interval_sequences <= 0 ? c.eval_interval : 1;
  return o;
}

} // namespace shadowgrad::data
