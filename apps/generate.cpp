// generate SOURCE --prompt-ids "ID ID ..." | --serve [--step N] [--adapter DIR] [--max-new N] [--stop ID ...]
//          [--temperature T] [--top-k K] [--top-p P] [--seed S] [--max-length N] [--dtype float32|bfloat16]
//          [--threads N]
// Continues a prompt of token ids with a model, through the decoder's KV cache (docs/generate.md). SOURCE is a run
// directory (its config.yml and latest checkpoint, or step N; a LoRA run's base is read from its
// load_parameters_path) or a Hugging Face model directory. Greedy unless --temperature > 0. Token ids in and out, so
// that no tokenizer shares the process with LibTorch (SentencePiece cannot; see CMakeLists.txt): scripts/generate.sh
// tokenizes, applies the chat template and detokenizes, talking to --serve in JSON lines (src/generate/Serve.h).
// --prompt-ids prints the generated ids, space-separated, on one line.
// Exit codes: 0 ok, 1 failure, 2 bad input (a bad flag, a prompt word that is not a token id of the vocabulary, an
// empty prompt or one longer than the context, a --stop id outside the vocabulary, no model, run or checkpoint).
#include <charconv>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "ThreadEnvironment.h"
#include "generate/Generator.h"
#include "generate/ModelSource.h"
#include "generate/Serve.h"
#include "train/Runtime.h"
#include "util/Errors.h"
#include "util/Printable.h"

using namespace shadowgrad;

namespace {

constexpr int kExitFailure = 1;
constexpr int kExitBadInput = 2;

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

// --stop ids in [0, vocab); -1 stands for none.
std::vector<int64_t> stop_ids(const std::vector<int64_t>& given, int64_t vocab) {
  std::vector<int64_t> ids;
  for (int64_t id : given) {
    if (id == -1) continue;
    if (id < 0 || id >= vocab)
      throw InputError("--stop " + std::to_string(id) + " is outside the vocabulary [0, " + std::to_string(vocab) +
                       ") (-1: none)");
    ids.push_back(id);
  }
  return ids;
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"Continue a prompt of token ids with a run's or a Hugging Face directory's model (KV cache; greedy or "
               "sampled).",
               "generate"};
  generate::ModelSource source;
  generate::GenerateOptions options;
  std::string prompt, dtype;
  std::vector<int64_t> stop;
  int64_t threads = 0;
  bool serve = false;
  app.add_option("SOURCE", source.path, "a run directory (config.yml, checkpoints) or a Hugging Face model directory")
      ->required();
  auto* ids_option = app.add_option("--prompt-ids", prompt, "the prompt's token ids, space-separated");
  auto* serve_option = app.add_flag("--serve", serve, "JSON-line requests on stdin, answers on stdout "
                                                      "(src/generate/Serve.h; scripts/generate.sh uses it)");
  ids_option->excludes(serve_option);
  app.add_option("--step", source.step, "a run's checkpoint step; -1: the latest");
  app.add_option("--adapter", source.adapter, "a peft adapter directory on top of a Hugging Face model directory");
  app.add_option("--max-length", source.max_length,
                 "the context (prompt and continuation) in tokens; 0: a run's max_target_length, a model "
                 "directory's max_position_embeddings up to 2048")->check(CLI::NonNegativeNumber);
  app.add_option("--dtype", dtype, "compute dtype: float32 (default) or bfloat16")
      ->check(CLI::IsMember({"float32", "bfloat16"}));
  app.add_option("--max-new", options.max_new, "most tokens to generate")->check(CLI::Range(1, 1 << 20));
  app.add_option("--stop", stop, "stop after generating this token id (e.g. EOS); repeatable; -1: none");
  app.add_option("--temperature", options.sampling.temperature, "0: greedy (default); else sample at this temperature");
  app.add_option("--top-k", options.sampling.top_k, "sample among the k most likely tokens; 0: all");
  app.add_option("--top-p", options.sampling.top_p, "sample among the fewest most likely tokens holding this "
                                                    "probability; 1: all");
  app.add_option("--seed", options.sampling.seed, "the sampler's seed: the same seed, the same tokens");
  app.add_option("--threads", threads, "intra-op threads; 0: every core")->check(CLI::NonNegativeNumber);
  try {
    app.parse(argc, argv);
    if (!serve && ids_option->count() == 0) throw CLI::RequiredError("--prompt-ids or --serve");
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : kExitBadInput;
  }
  if (!dtype.empty()) source.overrides.push_back("dtype=" + dtype);
  // The library's warnings (a corrupt latest checkpoint, an adapter's base by another name) on stderr: with --serve,
  // stdout is the protocol's alone.
  spdlog::set_default_logger(spdlog::stderr_color_mt("generate"));
  try {
    options.sampling.validate();
    apps::reexec_with_thread_environment(argv);  // before any matmul
    train::configure_threads(threads);
    auto loaded = generate::load_model(source);  // the weights alone: a trainer may be writing this run
    const int64_t vocab = loaded.cfg.vocab_size;
    options.stop_ids = stop_ids(stop, vocab);
    const auto ids = serve ? std::vector<int64_t>{} : parse_token_ids(prompt, vocab);
    generate::Generator generator(loaded.model);
    if (serve) {
      std::cout << nlohmann::json{{"ready", true},
                                  {"model", loaded.description},
                                  {"vocab_size", vocab},
                                  {"max_length", generator.capacity()},
                                  {"step", loaded.step}}
                       .dump()
                << "\n"
                << std::flush;
      generate::serve(generator, std::cin, std::cout);
      return 0;
    }
    const auto g = generator.run(ids, options);
    for (size_t i = 0; i < g.tokens.size(); ++i) std::cout << (i ? " " : "") << g.tokens[i];
    std::cout << "\n";
  } catch (const std::exception& e) {
    const bool bad_input = dynamic_cast<const InputError*>(&e) != nullptr;
    const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
    const std::string what = c10_error ? c10_error->what_without_backtrace() : e.what();
    if (serve) std::cout << nlohmann::json{{"error", what}, {"code", bad_input ? 2 : 1}}.dump() << "\n" << std::flush;
    std::cerr << "generate: error: " << what << "\n";
    return bad_input ? kExitBadInput : kExitFailure;
  }
  return 0;
}
