// Sums of dimension symbols (core/symbols.h), as engines record them (Symbol.expression) and
// sessions check them: every well-formed sum parses to its terms, anything else is refused.
#include "core/symbols.h"

#include <gtest/gtest.h>

namespace llmc {
namespace {

TEST(SymbolExpressionTest, ParsesSymbolsAndConstants) {
  std::vector<SymbolTerm> terms;
  ASSERT_TRUE(parseSymbolExpression("seq + past_seq + 3", &terms));
  ASSERT_EQ(terms.size(), 3u);
  EXPECT_EQ(terms[0].symbol, "seq");
  EXPECT_EQ(terms[1].symbol, "past_seq");
  EXPECT_EQ(terms[2].symbol, "");
  EXPECT_EQ(terms[2].constant, 3);
  ASSERT_TRUE(parseSymbolExpression("4", &terms));
  ASSERT_EQ(terms.size(), 1u);
  EXPECT_EQ(terms[0].constant, 4);
  // A name with spaces inside stays one term (ONNX dim_params are free text).
  ASSERT_TRUE(parseSymbolExpression("past len + 1", &terms));
  EXPECT_EQ(terms[0].symbol, "past len");
}

TEST(SymbolExpressionTest, RefusesEmptyTermsAndHugeNumbers) {
  std::vector<SymbolTerm> terms;
  for (const char* bad :
       {"", " ", "+", "a +", "+ a", "a + + b", "2147483648", "99999999999999999999"})
    EXPECT_FALSE(parseSymbolExpression(bad, &terms)) << "'" << bad << "'";
  EXPECT_TRUE(parseSymbolExpression("2147483647", &terms));
}

TEST(SymbolExpressionTest, EvaluatesOnlyWhenEverySymbolIsBound) {
  const std::map<std::string, int64_t> values = {{"seq", 3}, {"past_seq", 5}};
  int64_t out = -1;
  ASSERT_TRUE(evaluateSymbolExpression("seq + past_seq", values, &out));
  EXPECT_EQ(out, 8);
  ASSERT_TRUE(evaluateSymbolExpression("past_seq + 1", values, &out));
  EXPECT_EQ(out, 6);
  EXPECT_FALSE(evaluateSymbolExpression("seq + batch", values, &out));
  EXPECT_FALSE(evaluateSymbolExpression("seq +", values, &out));
}

}  // namespace
}  // namespace llmc
