#include "data/DataSource.h"

#include <filesystem>

#include <fmt/format.h>

#include "data/PairSource.h"
#include "data/SftSource.h"
#include "data/SyntheticSource.h"
#include "data/TextSource.h"
#include "data/TokenSource.h"
#include "data/TokenizerVocab.h"
#include "util/Errors.h"

namespace shadowgrad::data {

namespace {

std::unique_ptr<DataSource> file_source(const DataOptions& o, const std::string& path, const std::string& key) {
  if (o.type == DataOptions::Type::sft) return std::make_unique<SftSource>(SftFile::open(path, key), o, key);
  if (o.type == DataOptions::Type::preference)
    return std::make_unique<PairSource>(PairFile::open(path, key), o, key);
  if (o.type == DataOptions::Type::tokens)
    return std::make_unique<TokenSource>(TokenFile::open(path, o.format, key), o.seed, o.vocab_size, o.max_length);
  return std::make_unique<TextSource>(path, o.seed, o.vocab_size, o.max_length, key);
}

} // namespace

std::unique_ptr<DataSource> make_source(const DataOptions& o) {
  if (!o.tokenizer_path.empty()) check_vocabulary(o.tokenizer_path, o.vocab_size);
  if (o.type == DataOptions::Type::synthetic)
    return std::make_unique<SyntheticSource>(o.seed, o.vocab_size, o.max_length, o.synthetic_min_length_fraction);
  return file_source(o, o.path, "dataset_path");
}

std::unique_ptr<DataSource> make_eval_source(const DataOptions& o) {
  if (o.eval_interval <= 0) return nullptr;
  if (o.type == DataOptions::Type::synthetic) return make_source(o); // eval_examples() draws from step -1
  // Held out means held out: evaluating on the training file would report training loss under another name.
  std::error_code ec;
  if (std::filesystem::equivalent(o.eval_path, o.path, ec))
    throw DataError(fmt::format("eval_dataset_path '{}' is the training file (dataset_path); give a held-out file",
                                o.eval_path));
  return file_source(o, o.eval_path, "eval_dataset_path");
}

} // namespace shadowgrad::data
