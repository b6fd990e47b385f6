// generate RUN_DIR --prompt-ids "ID ID ..." [--max-new N] [--stop ID] [--step N]: greedy continuation of a prompt by a
// trained run's model (its config.yml and latest checkpoint, or step N). Token ids in and out, so that no tokenizer
// shares the process with LibTorch (SentencePiece cannot; see CMakeLists.txt): scripts tokenize and detokenize.
// Prints the generated ids, space-separated, on one line. Exit codes: 0 ok, 1 failure, 2 bad input (a bad flag, a prompt
// word that is not a token id of the vocabulary, a --stop id outside it, no run or checkpoint).
#include <charconv>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <CLI/CLI.hpp>

#include "checkpoint/WeightsLoader.h"
#include "config/Config.h"
#include "config/ConfigLoader.h"
#include "model/Decoder.h"
#include "util/Errors.h"
#include "util/Printable.h"

using namespace shadowgrad;

namespace {

// Every whitespace-separated word of `text` as a token id in [0, vocab): a word that is not a whole decimal integer,
// or one outside the vocabulary, is refused naming the word and its place.
std::vector<int64_t> parse_token_ids(const std::string& text, int64_t vocab) {
  std::vector<int64_t> ids;
  std::istringstream in(text);
  for (std::string word; in >> word;) {
    int64_t id = 0;
    const auto [end, error] = std::from_chars(word.data(), word.data() + word.size(), id);
    if (error != std::errc() || end != word.data() + word.size())
      throw InputError("--prompt-ids: word " + std::to_string(ids.size() + 1) + " '" + util::printable(word) +
                       "' is not a token id");
    if (id < 0 || id >= vocab)
      throw InputError("--prompt-ids: word " + std::to_string(ids.size() + 1) + " is " + word +
                       ", outside the vocabulary [0, " + std::to_string(vocab) + ")");
    ids.push_back(id);
  }
  if (ids.empty()) throw InputError("--prompt-ids is empty");
  return ids;
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"Greedy continuation of token ids by a trained run's model (its latest checkpoint)."};
  std::string run_dir, prompt;
  int64_t max_new = 64, stop = -1, step = -1;
  app.add_option("RUN_DIR", run_dir, "a run directory (config.yml and step-N checkpoints)")->required();
  app.add_option("--prompt-ids", prompt, "the prompt's token ids, space-separated")->required();
  app.add_option("--max-new", max_new, "most tokens to generate")->check(CLI::Range(1, 1 << 20));
  app.add_option("--stop", stop, "stop after generating this token id (e.g. EOS); -1: none");
  app.add_option("--step", step, "the checkpoint step to load; -1: the latest");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  try {
    auto cfg = config::load_config(run_dir + "/config.yml", {});
    std::vector<int64_t> ids = parse_token_ids(prompt, cfg.vocab_size);
    if (stop < -1 || stop >= cfg.vocab_size)
      throw InputError("--stop " + std::to_string(stop) + " is outside the vocabulary [0, " +
                       std::to_string(cfg.vocab_size) + ") (-1: none)");
    model::Decoder model(model::DecoderOptions::from_config(cfg));
    checkpoint::load_weights(run_dir, step, *model);  // the weights alone: a trainer may be writing this run
    at::NoGradGuard no_grad;
    const size_t first_new = ids.size();
    for (int64_t n = 0; n < max_new; ++n) {
      const int64_t keep = std::min<int64_t>(int64_t(ids.size()), cfg.max_target_length);
      auto x = at::tensor(std::vector<int64_t>(ids.end() - keep, ids.end()), at::kLong).view({1, keep});
      const int64_t next = model->forward(x).select(1, keep - 1).argmax(-1).item<int64_t>();
      ids.push_back(next);
      if (next == stop) break;
    }
    for (size_t i = first_new; i < ids.size(); ++i) std::cout << (i > first_new ? " " : "") << ids[i];
    std::cout << "\n";
  } catch (const InputError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
