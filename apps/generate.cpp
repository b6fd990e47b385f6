// generate RUN_DIR --prompt-ids "ID ID ..." [--max-new N] [--stop ID] [--step N]: greedy continuation of a prompt by a
// trained run's model (its config.yml and latest checkpoint, or step N). Token ids in and out, so that no tokenizer
// shares the process with LibTorch (SentencePiece cannot; see CMakeLists.txt): scripts tokenize and detokenize.
// Prints the generated ids, space-separated, on one line. Exit codes: 0 ok, 1 failure, 2 bad input.
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

using namespace shadowgrad;

int main(int argc, char** argv) {
  CLI::App app{"Greedy continuation of token ids by a trained run's model (its latest checkpoint)."};
  std::string run_dir, prompt;
  int64_t max_new = 64, stop = -1, step = -1;
  app.add_option("RUN_DIR", run_dir, "a run directory (config.yml and step-N checkpoints)")->required();
  app.add_option("--prompt-ids", prompt, "the prompt's token ids, space-separated")->required();
  app.add_option("--max-new", max_new, "most tokens to generate")->check(CLI::Range(1, 1 << 20));
  app.add_option("--stop", stop, "stop after generating this token id (e.g. EOS); -1: none");
  app.add_option("--step", step, "the checkpoint step to load; -1: the latest");
  CLI11_PARSE(app, argc, argv);
  try {
    auto cfg = config::load_config(run_dir + "/config.yml", {});
    model::Decoder model(model::DecoderOptions::from_config(cfg));
    checkpoint::load_weights(run_dir, step, *model);  // the weights alone: a trainer may be writing this run
    std::vector<int64_t> ids;
    std::istringstream in(prompt);
    for (int64_t id; in >> id;) {
      if (id < 0 || id >= cfg.vocab_size) throw InputError("prompt id " + std::to_string(id) + " is not in the vocabulary");
      ids.push_back(id);
    }
    if (ids.empty()) throw InputError("--prompt-ids is empty");
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
