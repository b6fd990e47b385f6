#pragma once
// eval_prompts_path: at each evaluation, the greedy completion of each of a fixed set of prompts, appended to the run
// directory's samples.jsonl with the step, so a run shows what the model says as it learns and not only its loss.
// The prompts come as token ids (scripts/prepare_prompts.sh encodes text or chat messages with the model's own
// tokenizer and template: tokenizers and LibTorch do not share this process); the completions go out as ids and, when
// load_parameters_path (or the run's hf/) has a tokenizer.json, as text too.
//
//   EvalSamples samples(cfg);                     // checks every line (in the Evaluator, before the run directory)
//   samples.open(run.file("samples.jsonl"), run.file("hf"));  // rank 0: where to write, and the tokenizer
//   if (evaluated) metrics.push_back({"samples_s", samples.write(step, model)});   // 0 where not opened
//
// One line per prompt and evaluation: {"step", "prompt" or "messages" (as given), "completion", "ids", "finish",
// "seconds"}. The KV cache is made for each evaluation, as the weights changed since the last one.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hub/TokenizerDecoder.h"
#include "model/Decoder.h"

namespace shadowgrad::config {
struct Config;
}

namespace shadowgrad::train {

class EvalSamples {
 public:
  // Reads and checks cfg.eval_prompts_path (DataError naming FILE:LINE).
  explicit EvalSamples(const config::Config& cfg);
  // Where write() appends; the tokenizer.json for the text is load_parameters_path's, else tokenizer_fallback_dir's.
  void open(std::string out, const std::string& tokenizer_fallback_dir);

  bool enabled() const { return !prompts_.empty(); }
  size_t size() const { return prompts_.size(); }
  // Generates and appends one line per prompt; returns the seconds it took. The model is left in train mode.
  double write(int64_t step, model::Decoder& model) const;

 private:
  struct Prompt {
    std::vector<int64_t> ids, stop_ids;
    nlohmann::json shown;  // {"prompt": ...} or {"messages": ...}, echoed into each line
  };
  std::vector<Prompt> prompts_;
  std::string out_, model_dir_;
  int64_t max_new_ = 0, capacity_ = 0;
  std::optional<hub::TokenizerDecoder> decoder_;
};

} // namespace shadowgrad::train
