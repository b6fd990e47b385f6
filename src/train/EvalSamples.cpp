#include "train/EvalSamples.h"

#include <algorithm>
#include <chrono>
#include <fstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "config/Config.h"
#include "generate/Generator.h"
#include "util/Errors.h"

namespace shadowgrad::train {

using nlohmann::json;

namespace {

constexpr const char* kHowToMake = "scripts/prepare_prompts.sh writes it from {\"prompt\": TEXT} or {\"messages\": "
                                   "[...]} lines with the model's tokenizer (docs/generate.md)";

std::vector<int64_t> read_ids(const json& item, const char* field, const std::string& where, int64_t vocab) {
  std::vector<int64_t> ids;
  if (!item.contains(field)) return ids;
  if (!item[field].is_array()) throw DataError(fmt::format("{}: \"{}\" must be a list of token ids", where, field));
  for (const json& v : item[field]) {
    if (!v.is_number_integer())
      throw DataError(fmt::format("{}: \"{}\" holds {}, not a token id", where, field, v.dump()));
    const int64_t id = v.get<int64_t>();
    if (id < 0 || id >= vocab)
      throw DataError(fmt::format("{}: token id {} in \"{}\" is outside the vocabulary [0, {}) (a tokenizer of "
                                  "another model?)",
                                  where, id, field, vocab));
    ids.push_back(id);
  }
  return ids;
}

} // namespace

EvalSamples::EvalSamples(const config::Config& cfg)
    : model_dir_(cfg.load_parameters_path), max_new_(cfg.eval_prompts_max_new) {
  const std::string& path = cfg.eval_prompts_path;
  if (path.empty()) return;
  std::ifstream in(path);
  if (!in) throw DataError(fmt::format("eval_prompts_path={}: cannot open", path));
  std::string line;
  int64_t longest = 0;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("eval_prompts_path={}:{}", path, number);
    json item;
    try {
      item = json::parse(line);
    } catch (const json::exception& e) {
      throw DataError(fmt::format("{}: not JSON ({})", where, e.what()));
    }
    if (!item.is_object()) throw DataError(fmt::format("{}: expected a JSON object", where));
    Prompt p;
    p.ids = read_ids(item, "prompt_ids", where, cfg.vocab_size);
    if (p.ids.empty()) throw DataError(fmt::format("{}: no \"prompt_ids\" (a non-empty list of token ids); {}", where, kHowToMake));
    if (int64_t(p.ids.size()) >= cfg.max_target_length)
      throw DataError(fmt::format("{}: the prompt has {} tokens; max_target_length={} leaves no room for a completion",
                                  where, p.ids.size(), cfg.max_target_length));
    p.stop_ids = read_ids(item, "stop_ids", where, cfg.vocab_size);
    for (const char* field : {"prompt", "messages"})
      if (item.contains(field)) p.shown[field] = item[field];
    longest = std::max<int64_t>(longest, p.ids.size());
    prompts_.push_back(std::move(p));
  }
  if (prompts_.empty()) throw DataError(fmt::format("eval_prompts_path={}: no prompts in it", path));
  capacity_ = std::min(cfg.max_target_length, longest + max_new_);
}

void EvalSamples::open(std::string out, const std::string& tokenizer_fallback_dir) {
  if (prompts_.empty()) return;
  out_ = std::move(out);
  for (const std::string& dir : {model_dir_, tokenizer_fallback_dir}) {
    try {
      decoder_ = hub::TokenizerDecoder::from_directory(dir);
    } catch (const DataError& e) {
      spdlog::warn("eval_prompts_path: samples.jsonl gets token ids only: {}", e.what());
      break;
    }
    if (decoder_) break;
  }
  if (!decoder_) spdlog::info("eval_prompts_path: no tokenizer.json beside the model; samples.jsonl gets token ids only");
}

double EvalSamples::write(int64_t step, model::Decoder& model) const {
  if (out_.empty() || prompts_.empty()) return 0;
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  struct TrainAgain {  // the generator puts the model in eval mode (no LoRA dropout)
    model::Decoder& m;
    ~TrainAgain() { m->train(); }
  } train_again{model};
  generate::Generator generator(model, capacity_);  // a new cache: the weights changed since the last evaluation
  std::ofstream file(out_, std::ios::app);
  if (!file) throw std::runtime_error(fmt::format("{}: cannot open for appending", out_));
  for (const Prompt& p : prompts_) {
    const auto start = clock::now();
    generate::GenerateOptions options;
    options.max_new = max_new_;
    options.stop_ids = p.stop_ids;
    const generate::Generation g = generator.run(p.ids, options);
    json line = {{"step", step}};
    line.update(p.shown);
    if (decoder_) line["completion"] = decoder_->decode(g.tokens);
    line["ids"] = g.tokens;
    line["finish"] = generate::finish_name(g.finish);
    line["seconds"] = std::chrono::duration<double>(clock::now() - start).count();
    file << line.dump(-1, ' ', false, json::error_handler_t::replace) << '\n';
  }
  file.flush();
  if (!file) throw std::runtime_error(fmt::format("{}: write failed", out_));
  return std::chrono::duration<double>(clock::now() - t0).count();
}

} // namespace shadowgrad::train
