#include "core/symbols.h"

namespace llmc {

bool parseSymbolExpression(const std::string& expression, std::vector<SymbolTerm>* terms) {
  terms->clear();
  size_t start = 0;
  while (true) {
    const size_t plus = expression.find('+', start);
    std::string term =
        expression.substr(start, plus == std::string::npos ? std::string::npos : plus - start);
    const size_t first = term.find_first_not_of(' ');
    if (first == std::string::npos) return false;
    term = term.substr(first, term.find_last_not_of(' ') - first + 1);
    if (term.find_first_not_of("0123456789") == std::string::npos) {
      if (term.size() > 10) return false;
      const int64_t value = std::stoll(term);
      if (value >= (int64_t{1} << 31)) return false;
      terms->push_back({"", value});
    } else {
      terms->push_back({term, 0});
    }
    if (plus == std::string::npos) return true;
    start = plus + 1;
  }
}

bool evaluateSymbolExpression(const std::string& expression,
                              const std::map<std::string, int64_t>& values, int64_t* out) {
  std::vector<SymbolTerm> terms;
  if (!parseSymbolExpression(expression, &terms)) return false;
  int64_t sum = 0;
  for (const SymbolTerm& term : terms) {
    if (term.symbol.empty()) {
      sum += term.constant;
      continue;
    }
    auto it = values.find(term.symbol);
    if (it == values.end()) return false;
    sum += it->second;
  }
  *out = sum;
  return true;
}

}  // namespace llmc
