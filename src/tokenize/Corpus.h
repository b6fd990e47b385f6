#pragma once
// A text corpus as documents, split into training and validation by document (never inside one), and encoded
// into one token stream per split with EOS after every document.
//
//   auto docs = split_documents(text);                       // blank-line separated paragraphs
//   EncodedSplit s = encode_corpus(docs, tokenizer, 0.05);    // every 20th document goes to validation
#include <cstdint>
#include <string>
#include <vector>

namespace shadowgrad::tokenize {

class Tokenizer;

// Paragraphs separated by one or more blank lines, with surrounding whitespace removed; empty ones dropped.
std::vector<std::string> split_documents(const std::string& text);

// Document i is held out when floor((i+1) f) > floor(i f): round(n f) of n documents, spread evenly through
// the corpus (not its last pages), and a pure function of i.
bool is_validation(size_t index, double fraction);

struct EncodedSplit {
  std::vector<uint32_t> train, val;
  size_t train_documents = 0, val_documents = 0;
};

// Encodes every document, appends the tokenizer's EOS id (when it has one) after each, and routes it by
// is_validation().
EncodedSplit encode_corpus(const std::vector<std::string>& documents, const Tokenizer& tokenizer, double fraction);

} // namespace shadowgrad::tokenize
