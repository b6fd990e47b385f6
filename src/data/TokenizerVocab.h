#pragma once
// The trainer's tokenizer_path check, without SentencePiece in the trainer's process: SentencePiece bundles its own
// protobuf-lite, and loading it next to LibTorch's libprotobuf crashes in static initialisation (segfault in
// ReflectionOps::FindInitializationErrors, seen here with Debian's 0.1.97 and libprotobuf32). A .model file is a
// serialized ModelProto whose field 1 is `repeated SentencePiece pieces`, so counting those entries in the protobuf
// wire format gives the vocabulary, the same number as SentencePieceProcessor::GetPieceSize() (tested).
//
//   int64_t n = sentencepiece_vocab_size("data/kjv/tokenizer.model");   // throws DataError naming tokenizer_path
//   check_vocabulary("data/kjv/tokenizer.model", cfg.vocab_size);       // throws if n > vocab_size
#include <cstdint>
#include <string>

namespace shadowgrad::data {

int64_t sentencepiece_vocab_size(const std::string& path, const std::string& key = "tokenizer_path");

// The model loads and vocab_size >= its vocabulary. (Each token id < vocab_size is checked when a token file is
// opened: see TokenSource.h.)
void check_vocabulary(const std::string& tokenizer_path, int64_t vocab_size);

} // namespace shadowgrad::data
