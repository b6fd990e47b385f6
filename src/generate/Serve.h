#pragma once
// build/generate --serve: requests of token ids as JSON lines on `in`, answers as JSON lines on `out`, so that a
// process holding the tokenizer (scripts/lib/generate.py) talks to the one holding LibTorch. One line each way:
//
//   in:  {"ids": [1, 2, 3], "max_new": 64, "stop": [2], "temperature": 0, "top_k": 0, "top_p": 1, "seed": 0,
//         "stream": false, "reuse_cache": true}  (every key but "ids" optional; these are the defaults, stop: [])
//   out: {"token": 17}                         (one per token, with "stream": true)
//        {"ids": [17, ...], "finish": "stop", "prompt_tokens": 3, "reused_tokens": 0, "first_token_s": 0.02,
//         "decode_s": 0.4}                     (finish: stop, length or context)
//        {"error": "...", "code": 2}           (a bad request: 2, as the tools' exit code; a failure: 1)
//
// Consecutive requests share the Generator's cache: a chat resends the whole conversation and only the new part is
// computed. Returns at the end of `in`.
#include <iosfwd>

#include <nlohmann/json.hpp>

#include "generate/Generator.h"

namespace shadowgrad::generate {

// A request's options; InputError naming a key of the wrong type or value.
GenerateOptions request_options(const nlohmann::json& request);

void serve(Generator& generator, std::istream& in, std::ostream& out);

} // namespace shadowgrad::generate
