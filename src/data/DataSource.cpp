#include "data/DataSource.h"

#include <filesystem>

#include <fmt/format.h>

#include "config/Config.h"
#include "data/SyntheticSource.h"
#include "data/TextSource.h"
#include "data/TokenSource.h"
#include "data/TokenizerVocab.h"
#include "util/Errors.h"

namespace shadowgrad::data {

namespace {

std::unique_ptr<DataSource> file_source(const config::Config& c, const std::string& path, const std::string& key) {
  const auto seed = static_cast<uint64_t>(c.data_shuffle_seed);
  if (c.dataset_type == config::DatasetType::tokens)
    return std::make_unique<TokenSource>(TokenFile::open(path, c.token_file_format, key), seed, c.vocab_size,
                                         c.max_target_length);
  return std::make_unique<TextSource>(path, seed, c.vocab_size, c.max_target_length, key);
}

} // namespace

std::unique_ptr<DataSource> make_source(const config::Config& c) {
  if (!c.tokenizer_path.empty()) check_vocabulary(c.tokenizer_path, c.vocab_size);
  if (c.dataset_type == config::DatasetType::synthetic)
    return std::make_unique<SyntheticSource>(static_cast<uint64_t>(c.data_shuffle_seed), c.vocab_size,
                                             c.max_target_length, c.synthetic_min_length_fraction);
  return file_source(c, c.dataset_path, "dataset_path");
}

std::unique_ptr<DataSource> make_eval_source(const config::Config& c) {
  if (c.eval_interval <= 0) return nullptr;
  if (c.dataset_type == config::DatasetType::synthetic) return make_source(c); // eval_examples() draws from step -1
  // Held out means held out: evaluating on the training file would report training loss under another name.
  std::error_code ec;
  if (std::filesystem::equivalent(c.eval_dataset_path, c.dataset_path, ec))
    throw DataError(fmt::format("eval_dataset_path '{}' is the training file (dataset_path); give a held-out file",
                                c.eval_dataset_path));
  return file_source(c, c.eval_dataset_path, "eval_dataset_path");
}

} // namespace shadowgrad::data
