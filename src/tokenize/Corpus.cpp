#include "tokenize/Corpus.h"

#include <cmath>
#include <sstream>

#include "tokenize/Tokenizer.h"

namespace shadowgrad::tokenize {

namespace {

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t\r\n") - a + 1);
}

} // namespace

std::vector<std::string> split_documents(const std::string& text) {
  std::vector<std::string> docs;
  std::string current;
  std::istringstream in(text);
  auto flush = [&] {
    std::string doc = trim(current);
    if (!doc.empty()) docs.push_back(std::move(doc));
    current.clear();
  };
  for (std::string line; std::getline(in, line);) {
    if (trim(line).empty())
      flush();
    else
      current += line + "\n";
  }
  flush();
  return docs;
}

bool is_validation(size_t index, double fraction) {
  return std::floor(double(index + 1) * fraction) > std::floor(double(index) * fraction);
}

EncodedSplit encode_corpus(const std::vector<std::string>& documents, const Tokenizer& tokenizer, double fraction) {
  EncodedSplit out;
  const int eos = tokenizer.eos_id();
  for (size_t i = 0; i < documents.size(); ++i) {
    const bool val = is_validation(i, fraction);
    auto& dest = val ? out.val : out.train;
    const auto ids = tokenizer.encode(documents[i]);
    dest.insert(dest.end(), ids.begin(), ids.end());
    if (eos >= 0) dest.push_back(uint32_t(eos));
    ++(val ? out.val_documents : out.train_documents);
  }
  return out;
}

} // namespace shadowgrad::tokenize
