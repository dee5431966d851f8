// Dimension symbols that the compiler found equal to a sum of others (SymbolInfo::expression:
// "seq + past_seq", "n + 1"): parsing the sum, and its value for bound symbols.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace llmc {

// One term of a sum: a symbol's name, or (when `symbol` is empty) a constant.
struct SymbolTerm {
  std::string symbol;
  int64_t constant = 0;
};

// Splits "a + b + 3" into its terms; false when a term is empty or a number is outside
// [0, 2^31).
bool parseSymbolExpression(const std::string& expression, std::vector<SymbolTerm>* terms);

// The sum's value when every symbol in it is in `values`; false otherwise (or when it does not
// parse).
bool evaluateSymbolExpression(const std::string& expression,
                              const std::map<std::string, int64_t>& values, int64_t* out);

}  // namespace llmc
