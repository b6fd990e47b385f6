#include "train/PreferenceReference.h"

#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>
#include <vector>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "config/Config.h"
#include "data/LittleEndian.h"
#include "data/PairSource.h"
#include "train/PreferenceLoss.h"
#include "util/Errors.h"
#include "util/File.h"
#include "util/Hash.h"

namespace shadowgrad::train {

namespace {

constexpr char kMagic[8] = {'S', 'G', 'R', 'E', 'F', 'L', 'P', 0};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 48;

// What the reference depends on besides the weights: the pairs and which of their tokens are kept.
uint64_t data_key(const config::Config& cfg, const data::PairSource& train, const data::PairSource* eval) {
  const uint64_t fields[] = {train.fingerprint(), eval ? eval->fingerprint() : 0, uint64_t(cfg.max_target_length),
                             uint64_t(cfg.sft_long_examples)};
  return util::fnv1a64(fields, sizeof(fields));
}

// Every parameter and buffer of the model as it starts, in order.
uint64_t start_key(model::Decoder& model) {
  uint64_t h = util::kFnv1aOffset;
  for (const auto& tensors : {model->named_parameters(), model->named_buffers()})
    for (const auto& item : tensors) {
      const at::Tensor c = item.value().detach().cpu().contiguous();
      h = util::fnv1a64(item.key().data(), item.key().size(), h);
      h = util::fnv1a64(c.data_ptr(), size_t(c.nbytes()), h);
    }
  return h;
}

struct Stored {
  uint64_t data = 0, start = 0;
  std::vector<double> train, eval;
};

// Null when the file is absent; a file that does not parse is reported and treated as absent.
std::optional<Stored> read_stored(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  const std::string bytes = util::read_whole_file(path);
  if (bytes.size() < kHeaderBytes || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0 ||
      data::read_le<uint32_t>(bytes, 8) != kVersion) {
    spdlog::warn("{}: not a reference log-prob file of this version; it is ignored", path);
    return std::nullopt;
  }
  Stored s;
  s.data = data::read_le<uint64_t>(bytes, 16);
  s.start = data::read_le<uint64_t>(bytes, 24);
  const uint64_t n_train = data::read_le<uint64_t>(bytes, 32), n_eval = data::read_le<uint64_t>(bytes, 40);
  if (n_train > (uint64_t(1) << 40) || n_eval > (uint64_t(1) << 40) ||
      bytes.size() != kHeaderBytes + 8 * (n_train + n_eval)) {
    spdlog::warn("{}: its size does not match its counts; it is ignored", path);
    return std::nullopt;
  }
  auto take = [&](uint64_t first, uint64_t n) {
    std::vector<double> v(static_cast<size_t>(n));
    if (n > 0) std::memcpy(v.data(), bytes.data() + kHeaderBytes + 8 * first, size_t(8 * n));
    return v;
  };
  s.train = take(0, n_train);
  s.eval = take(n_train, n_eval);
  return s;
}

void write_stored(const std::string& path, const Stored& s) {
  std::string out(kMagic, sizeof(kMagic));
  data::append_le<uint32_t>(out, kVersion);
  data::append_le<uint32_t>(out, 0);
  data::append_le<uint64_t>(out, s.data);
  data::append_le<uint64_t>(out, s.start);
  data::append_le<uint64_t>(out, s.train.size());
  data::append_le<uint64_t>(out, s.eval.size());
  for (const auto* v : {&s.train, &s.eval})
    if (!v->empty()) out.append(reinterpret_cast<const char*>(v->data()), 8 * v->size());
  util::write_file_atomically(path, out);
}

// The model's summed answer log-probs over every kept pair, in file order: 2 per pair.
std::vector<double> score_all(const data::PairSource& pairs, model::Decoder& model, c10::Device device,
                              const config::Config& cfg, int64_t& done, int64_t total) {
  std::vector<double> out;
  out.reserve(size_t(2 * pairs.pairs_kept()));
  const int64_t batch = std::max<int64_t>(1, cfg.per_device_batch_size);
  auto last_log = std::chrono::steady_clock::now();
  for (int64_t first = 0; first < pairs.pairs_kept(); first += batch) {
    const data::PairBatch b = pairs.pairs_in_file_order(first, batch);
    const at::Tensor logps = answer_scores(model, b, device, cfg.loss_chunk_tokens, cfg.fused_kernels).logps.cpu();
    out.insert(out.end(), logps.data_ptr<double>(), logps.data_ptr<double>() + logps.numel());
    done += b.pairs;
    if (std::chrono::steady_clock::now() - last_log > std::chrono::seconds(10)) {
      spdlog::info("reference log-probs: {} of {} pairs", done, total);
      last_log = std::chrono::steady_clock::now();
    }
  }
  return out;
}

} // namespace

void prepare_reference(const config::Config& cfg, data::PairSource& train, data::PairSource* eval,
                       model::Decoder& model, c10::Device device, const std::string& run_dir, bool resumed,
                       bool writer) {
  const std::string path = run_dir + "/" + kReferenceFile;
  const uint64_t data = data_key(cfg, train, eval);
  const std::optional<Stored> stored = read_stored(path);
  const auto sizes_fit = [&](const Stored& s) {
    return int64_t(s.train.size()) == 2 * train.pairs_kept() &&
           int64_t(s.eval.size()) == (eval ? 2 * eval->pairs_kept() : 0);
  };
  auto use = [&](const Stored& s) {
    train.set_reference(s.train);
    if (eval) eval->set_reference(s.eval);
  };
  if (resumed) {
    if (!stored)
      throw DataError(fmt::format("{} is missing: a resumed preference run needs the reference log-probs of its step 0, "
                                  "which its weights can no longer give; restore the file or start a new run",
                                  path));
    if (stored->data != data || !sizes_fit(*stored))
      throw DataError(fmt::format("{} belongs to other pairs than dataset_path / eval_dataset_path (or another "
                                  "max_target_length or sft_long_examples): the run started on other data; give the "
                                  "files it started with, or start a new run",
                                  path));
    use(*stored);
    spdlog::info("reference log-probs of {} train and {} eval pairs from {}", train.pairs_kept(),
                 eval ? eval->pairs_kept() : 0, path);
    return;
  }
  const uint64_t start = start_key(model);
  if (stored && stored->data == data && stored->start == start && sizes_fit(*stored)) {
    use(*stored);
    spdlog::info("reference log-probs reused from {} (same pairs, same starting weights)", path);
    return;
  }
  if (stored)
    spdlog::info("{} is recomputed: it was made for {}", path,
                 stored->data != data ? "other pairs (or max_target_length / sft_long_examples)" : "other starting weights");
  const auto began = std::chrono::steady_clock::now();
  Stored fresh{data, start, {}, {}};
  {
    at::NoGradGuard no_grad;
    model->eval();  // no LoRA dropout: the reference is deterministic
    struct TrainAgain {
      model::Decoder& m;
      ~TrainAgain() { m->train(); }
    } train_again{model};
    const int64_t total = train.pairs_kept() + (eval ? eval->pairs_kept() : 0);
    int64_t done = 0;
    fresh.train = score_all(train, model, device, cfg, done, total);
    if (eval) fresh.eval = score_all(*eval, model, device, cfg, done, total);
  }
  use(fresh);
  if (writer) write_stored(path, fresh);
  spdlog::info("reference log-probs of {} train and {} eval pairs computed in {:.1f} s{}", train.pairs_kept(),
               eval ? eval->pairs_kept() : 0,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count(),
               writer ? fmt::format(", kept in {}", path) : "");
}

} // namespace shadowgrad::train
