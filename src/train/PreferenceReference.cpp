#include "train/PreferenceReference.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <optional>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "config/Config.h"
#include "data/PairSource.h"
#include "distributed/DataParallel.h"
#include "train/PreferenceLoss.h"
#include "train/ReferenceFile.h"
#include "train/Signals.h"
#include "util/BlockHash.h"
#include "util/Errors.h"
#include "util/Hash.h"

namespace shadowgrad::train {

namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kSaveEvery = std::chrono::seconds(60);
constexpr auto kLogEvery = std::chrono::seconds(10);

uint64_t key_of(std::initializer_list<uint64_t> fields) {
  const std::vector<uint64_t> v(fields);
  return util::fnv1a64(v.data(), v.size() * sizeof(uint64_t));
}

double elapsed_s(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

} // namespace

uint64_t starting_weights_key(model::Decoder& model) {
  uint64_t h = util::kFnv1aOffset;
  for (const auto& tensors : {model->named_parameters(), model->named_buffers()})
    for (const auto& item : tensors) {
      const at::Tensor c = item.value().detach().cpu().contiguous();
      h = util::fnv1a64(item.key().data(), item.key().size(), h);
      h = util::block_hash_chain(c.data_ptr(), size_t(c.nbytes()), h);
    }
  return h;
}


// One pair set: the train pairs as the first epoch's microbatches of the run's stream (as the steps read them), the
// eval pairs in file order as the evaluator's batches.
struct ReferencePass::Set {
  data::PairSource& pairs;
  std::string name;  // "train", "eval"
  std::string file;  // kReferenceFile, kEvalReferenceFile
  bool stream;       // train: the run's shuffled stream; eval: file order
  bool grad;         // scored with grad mode on (the step's forward) or off (the evaluator's)
  int64_t chunk;     // pairs per microbatch
  uint64_t data = 0, how = 0;

  int64_t n() const { return pairs.pairs_kept(); }
  int64_t chunks() const { return (n() + chunk - 1) / chunk; }
  data::PairBatch batch(int64_t j) const {
    return stream ? pairs.pairs(j * chunk, chunk) : pairs.pairs_in_file_order(j * chunk, chunk);
  }
  StoredReference fresh(uint64_t start) const {
    StoredReference s{data, start, how, chunk, std::vector<uint8_t>(size_t(chunks()), 0),
                      std::vector<double>(size_t(2 * n()), 0.0)};
    return s;
  }
  bool fits(const StoredReference& s) const { return int64_t(s.logps.size()) == 2 * n(); }
};

namespace {

// What the pass runs on, and the run's stop signals.
struct PassContext {
  model::Decoder& model;
  c10::Device device;
  distributed::DataParallel* dp;
  const StopSignals& signals;
  const config::Config& cfg;
};

// Every process gets rank 0's values (the others contribute zeros to one sum).
std::vector<double> from_rank0(distributed::DataParallel* dp, std::vector<double> v) {
  if (!dp) return v;
  if (dp->rank() != 0) std::fill(v.begin(), v.end(), 0.0);
  return dp->global_sums(v);
}

// Scores the microbatches of `set` that `st` does not hold yet, dealt round-robin over the processes (microbatch
// todo[i] on process i mod WORLD_SIZE), and gathers them into `st` on every process: every minute and at the end
// (`path` written by the writer), and at a stop, which then throws InterruptedError.
void score(const ReferencePass::Set& set, StoredReference& st, PassContext& c, const std::string& path, bool writer) {
  const int world = c.dp ? c.dp->world_size() : 1, rank = c.dp ? c.dp->rank() : 0;
  std::vector<int64_t> todo;
  for (int64_t j = 0; j < set.chunks(); ++j)
    if (!st.done[size_t(j)]) todo.push_back(j);
  const int64_t before = st.done_count(), total = set.chunks();
  int64_t mine_total = 0;
  for (size_t i = size_t(rank); i < todo.size(); i += size_t(world)) ++mine_total;
  spdlog::info("reference pass over the {} {} pairs: {} microbatches of {} pairs ({}){}{}", set.n(), set.name, total,
               set.chunk, set.stream ? "the first epoch's, as the steps read them" : "the evaluator's batches",
               before > 0 ? fmt::format(", {} already scored in {}", before, path) : "",
               world > 1 ? fmt::format("; this process scores {} of the {} left", mine_total, todo.size()) : "");
  // This process's values since the last gather: [2n logps, n pair flags, chunk flags]; zeros elsewhere.
  const int64_t n = set.n();
  std::vector<double> mine(size_t(3 * n + total), 0.0);
  auto gather = [&] {
    const std::vector<double> all = c.dp ? c.dp->global_sums(mine) : mine;
    for (int64_t k = 0; k < n; ++k)
      if (all[size_t(2 * n + k)] > 0) {
        st.logps[size_t(2 * k)] = all[size_t(2 * k)];
        st.logps[size_t(2 * k + 1)] = all[size_t(2 * k + 1)];
      }
    for (int64_t j = 0; j < total; ++j)
      if (all[size_t(3 * n + j)] > 0) st.done[size_t(j)] = 1;
    std::fill(mine.begin(), mine.end(), 0.0);
    if (writer) write_reference_file(path, st);
  };
  const auto began = Clock::now();
  auto last_log = began, last_save = began;
  int64_t scored = 0, pairs_scored = 0;
  const size_t rounds = (todo.size() + size_t(world) - 1) / size_t(world);
  for (size_t r = 0; r < rounds; ++r) {
    if (const size_t i = r * size_t(world) + size_t(rank); i < todo.size()) {
      const int64_t j = todo[i];
      const data::PairBatch b = set.batch(j);
      at::Tensor logps;
      {
        at::AutoGradMode grad(set.grad);  // the step's forward builds a graph: the same kernels, the same bits
        logps = answer_scores(c.model, b, c.device, c.cfg.loss_chunk_tokens, c.cfg.fused_kernels)
                    .logps.detach()
                    .cpu()
                    .contiguous();
      }
      const double* v = logps.data_ptr<double>();
      for (int64_t p = 0; p < b.pairs; ++p) {
        if (set.stream && j * set.chunk + p >= n) break;  // the next epoch's pairs, scored with the last microbatch
        const int64_t k = b.kept[size_t(p)];
        mine[size_t(2 * k)] = v[2 * p];
        mine[size_t(2 * k + 1)] = v[2 * p + 1];
        mine[size_t(2 * n + k)] = 1.0;
        ++pairs_scored;
      }
      mine[size_t(3 * n + j)] = 1.0;
      ++scored;
      hold_for_test(fmt::format("reference-{}", scored));  // tests only (SHADOWGRAD_TEST_HOLD, train/Signals.h)
    } else if (c.dp && c.dp->shard_parameters()) {  // ZeRO-3: no microbatch left here, the others still gather
      at::AutoGradMode grad(set.grad);
      c.model->pass_units();
    }
    // Every process agrees on whether to stop (one's signal stops all) and on rank 0's clock for a save.
    const int own = c.signals.requested();
    std::vector<double> flags = {own ? 1.0 : 0.0, rank == 0 && Clock::now() - last_save > kSaveEvery ? 1.0 : 0.0};
    if (c.dp) flags = c.dp->global_sums(flags);
    const bool stop = flags[0] > 0, last = r + 1 == rounds;
    if (stop || last || flags[1] > 0) {
      gather();
      last_save = Clock::now();
    }
    if (stop) {
      const int signal = own ? own : SIGTERM;
      throw InterruptedError(
          fmt::format("stopped by {} during the reference pass, {} of {} {} microbatches scored{}; rerun the same "
                      "command to continue it",
                      own ? signal_name(own) : "another process's signal", st.done_count(), total, set.name,
                      writer ? fmt::format(" and kept in {}", path) : ""),
          signal);
    }
    if (Clock::now() - last_log > kLogEvery) {
      spdlog::info("reference log-probs: {} of {} {} microbatches on this process ({:.1f} pairs/s)", scored,
                   mine_total, set.name, double(pairs_scored) / elapsed_s(began));
      last_log = Clock::now();
    }
  }
  if (todo.empty()) return;
  const double s = elapsed_s(began);
  // The pairs/s of the whole pass: every process's pairs over the slowest's time.
  const double all_pairs = c.dp ? c.dp->global_sum(double(pairs_scored)) : double(pairs_scored);
  spdlog::info("reference log-probs of the {} {} pairs computed in {:.1f} s ({:.2f} pairs/s over {} process{}){}",
               set.n(), set.name, s, s > 0 ? all_pairs / s : 0.0, world, world > 1 ? "es" : "",
               writer ? fmt::format(", kept in {}", path) : "");
}

} // namespace

ReferencePass::ReferencePass(const config::Config& cfg, data::PairSource& train, data::PairSource* eval,
                             int64_t eval_batch, model::Decoder& model, c10::Device device,
                             distributed::DataParallel* dp, const StopSignals& signals)
    : cfg_(cfg), model_(model), device_(device), dp_(dp), signals_(signals) {
  // What a set's values depend on besides the weights: its pairs and which of their tokens are kept...
  auto data_key = [&](const data::PairSource& s) {
    return key_of({s.fingerprint(), uint64_t(cfg.max_target_length), uint64_t(cfg.sft_long_examples)});
  };
  // ...and, for their bits, how the pass groups and computes them (reused only when all of it is the same).
  auto how_key = [&](bool stream, int64_t chunk) {
    return key_of({uint64_t(stream), uint64_t(chunk), stream ? uint64_t(cfg.data_shuffle_seed) : 0,
                   uint64_t(cfg.packing), uint64_t(cfg.dtype), uint64_t(cfg.loss_chunk_tokens),
                   uint64_t(cfg.fused_kernels), uint64_t(cfg.remat_policy), uint64_t(cfg.hoist_weight_cast)});
  };
  const int64_t microbatch = std::max<int64_t>(1, cfg.per_device_batch_size);
  train_ = std::make_unique<Set>(Set{train, "train", kReferenceFile, true, true, microbatch});
  train_->data = data_key(train);
  train_->how = how_key(true, microbatch);
  if (eval) {
    const int64_t batch = std::max<int64_t>(1, eval_batch);
    eval_ = std::make_unique<Set>(Set{*eval, "eval", kEvalReferenceFile, false, false, batch});
    eval_->data = data_key(*eval);
    eval_->how = how_key(false, batch);
  }
}

ReferencePass::~ReferencePass() = default;

uint64_t ReferencePass::start_key() {
  if (!start_known_) {
    const auto began = Clock::now();
    start_ = starting_weights_key(model_);
    start_known_ = true;
    spdlog::info("starting weights fingerprinted in {:.2f} s", elapsed_s(began));
  }
  return start_;
}

namespace {

// The model in eval mode (no dropout) for the pass, train mode again after it, and the step's weight casts dropped.
struct PassMode {
  model::Decoder& model;
  explicit PassMode(model::Decoder& m) : model(m) { model->eval(); }
  ~PassMode() {
    model->train();
    model->clear_weight_cache();
  }
};

} // namespace

bool ReferencePass::eval_needs_start(const std::string& run_dir) {
  if (!eval_) return false;
  double needs = 0, recorded = 0;
  if (!dp_ || dp_->rank() == 0) {
    StoredReference train, eval;
    const bool have_train = read_reference_file(run_dir + "/" + train_->file, train) == ReferenceFileState::ok;
    const bool eval_ok = read_reference_file(run_dir + "/" + eval_->file, eval) == ReferenceFileState::ok &&
                         eval.data == eval_->data && eval_->fits(eval) && eval.complete();
    needs = eval_ok ? 0 : 1;
    // The start the eval values must come from: the train reference's (no train reference: prepare() refuses).
    if (!eval_ok && have_train) {
      start_ = train.start;
      recorded = 1;
    }
  }
  const std::vector<double> agreed = from_rank0(dp_, {needs, recorded});
  return agreed[0] > 0 && agreed[1] > 0;
}

void ReferencePass::score_eval_from_start() {
  const uint64_t recorded = start_;
  start_known_ = false;
  double same = 0;
  if (!dp_ || dp_->rank() == 0) same = start_key() == recorded ? 1 : 0;
  if (from_rank0(dp_, {same})[0] == 0)
    throw DataError(fmt::format(
        "{} has no reference yet in this run (eval_dataset_path was added or changed after the run started), and "
        "its reference must come from the weights the run started from; load_parameters_path and "
        "lora_restore_path (or the seeded initialisation) no longer give them: their fingerprint differs from the one "
        "recorded in {}. Resume without eval_dataset_path (eval_interval=-1), or start a new run",
        eval_->pairs.label(), kReferenceFile));
  spdlog::info("{}: eval pairs added since the start; their reference comes from the starting weights (the "
               "fingerprint recorded in {} matches)",
               eval_->pairs.label(), kReferenceFile);
  StoredReference st = eval_->fresh(recorded);
  PassContext c{model_, device_, dp_, signals_, cfg_};
  PassMode mode(model_);
  at::NoGradGuard no_grad;
  score(*eval_, st, c, "", false);  // before the run directory is locked: prepare() writes it
  eval_from_start_ = std::move(st.logps);
}

void ReferencePass::prepare(const std::string& run_dir, bool resumed, bool writer) {
  const bool reader = !dp_ || dp_->rank() == 0;
  PassContext c{model_, device_, dp_, signals_, cfg_};
  for (Set* set : {train_.get(), eval_.get()}) {
    if (!set) continue;
    const std::string path = run_dir + "/" + set->file;
    // Rank 0 reads the file and decides; the others get its decision and values. -1: refused (rank 0 throws).
    enum Action { refused = -1, compute = 0, use = 1, resume_pass = 2 };
    StoredReference st = set->fresh(0);
    int action = compute;
    std::string refusal;
    if (reader) {
      StoredReference stored;
      const ReferenceFileState found = read_reference_file(path, stored);
      const bool same_pairs = found == ReferenceFileState::ok && stored.data == set->data && set->fits(stored);
      if (resumed && set == eval_.get() && !eval_from_start_.empty()) {
        st = set->fresh(start_);
        st.logps = eval_from_start_;
        std::fill(st.done.begin(), st.done.end(), uint8_t(1));
        if (writer) write_reference_file(path, st);
        action = use;
      } else if (resumed) {
        if (found == ReferenceFileState::earlier_version)
          refusal = earlier_version_message(path);
        else if (found != ReferenceFileState::ok)
          refusal = fmt::format("{} is missing: a resumed preference run needs the reference log-probs of its step "
                                "0, which its weights can no longer give; restore the file or start a new run",
                                path);
        else if (!same_pairs || !stored.complete())
          refusal = fmt::format("{} belongs to other pairs than {} (or another max_target_length or "
                                "sft_long_examples): the run started on other data; give the file it started with, or "
                                "start a new run",
                                path, set == train_.get() ? "dataset_path" : "eval_dataset_path");
        else {
          st = std::move(stored);
          action = use;
          spdlog::info("reference log-probs of the {} {} pairs from {}", set->n(), set->name, path);
        }
      } else {
        const uint64_t start = start_key();
        st = set->fresh(start);
        if (same_pairs && stored.start == start && stored.how == set->how) {
          action = stored.complete() ? use : resume_pass;
          st = std::move(stored);
          if (action == use) spdlog::info("reference log-probs reused from {} (same pairs, same starting weights)", path);
        } else if (const bool older = found == ReferenceFileState::earlier_version;
                   found == ReferenceFileState::ok || older) {
          spdlog::info("{} is recomputed: it was made for {}", path,
                       older                   ? "an earlier version of the trainer"
                       : !same_pairs           ? "other pairs (or max_target_length / sft_long_examples)"
                       : stored.start != start ? "other starting weights"
                                               : "other microbatches (per_device_batch_size, packing, dtype, ...)");
        }
      }
      if (!refusal.empty()) action = refused;
    }
    // Share the decision and the values held so far: [action, done..., logps...].
    std::vector<double> shared = {double(action)};
    shared.insert(shared.end(), st.done.begin(), st.done.end());
    shared.insert(shared.end(), st.logps.begin(), st.logps.end());
    shared = from_rank0(dp_, std::move(shared));
    action = int(shared[0]);
    if (action == refused) {
      if (reader) throw DataError(refusal);
      throw DataError(fmt::format("rank 0 refused {} (its log says why)", path));
    }
    if (!reader) {
      for (size_t j = 0; j < st.done.size(); ++j) st.done[j] = shared[1 + j] > 0 ? 1 : 0;
      std::copy(shared.begin() + long(1 + st.done.size()), shared.end(), st.logps.begin());
    }
    if (action != use) {
      PassMode mode(model_);
      score(*set, st, c, path, writer);
    }
    set->pairs.set_reference(st.logps);
  }
}

} // namespace shadowgrad::train
