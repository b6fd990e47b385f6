#include "data/DataSource.h"

#include "config/Config.h"
#include "data/SyntheticSource.h"
#include "data/TextSource.h"

namespace shadowgrad::data {

std::unique_ptr<DataSource> make_source(const config::Config& c) {
  const auto seed = static_cast<uint64_t>(c.data_shuffle_seed);
  if (c.dataset_type == "text")
    return std::make_unique<TextSource>(c.dataset_path, seed, c.vocab_size, c.max_target_length);
  return std::make_unique<SyntheticSource>(seed, c.vocab_size, c.max_target_length, c.synthetic_min_length_fraction);
}

} // namespace shadowgrad::data
