// Pruning rules (core/prune.h): each score on a case small enough to check by hand, the
// patterns' invariants over random weights at every sparsity, SparseGPT's update against the
// optimal-brain-surgeon formula, and LlmPruneWeight against the function it wraps.
#include "core/prune.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "kernel_test_util.h"

namespace llmc::testing {
namespace {

PrunePattern sparsity(double s) {
  PrunePattern p;
  p.sparsity = s;
  return p;
}

PrunePattern nm(int n, int m) {
  PrunePattern p;
  EXPECT_TRUE(parsePrunePattern(std::to_string(n) + ":" + std::to_string(m), &p).ok());
  return p;
}

// Weight [K, N] as rows [N, K].
std::vector<std::vector<float>> rowsOf(const Tensor& w, bool transposed) {
  const int64_t k = transposed ? w.dim(1) : w.dim(0), n = transposed ? w.dim(0) : w.dim(1);
  std::vector<std::vector<float>> rows(static_cast<size_t>(n),
                                       std::vector<float>(static_cast<size_t>(k)));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < k; ++j)
      rows[r][j] = transposed ? w.data<float>()[r * k + j] : w.data<float>()[j * n + r];
  return rows;
}

// ||X W||, X [R, K] and W [K, N].
double outputError(const Tensor& x, const Tensor& a, const Tensor& b) {
  const int64_t rows = x.dim(0), k = x.dim(1), n = a.dim(1);
  double error = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < n; ++c) {
      double e = 0;
      for (int64_t j = 0; j < k; ++j)
        e += static_cast<double>(x.data<float>()[r * k + j]) *
             (a.data<float>()[j * n + c] - b.data<float>()[j * n + c]);
      error += e * e;
    }
  return std::sqrt(error);
}

Tensor gramOf(const Tensor& x) {
  const int64_t rows = x.dim(0), k = x.dim(1);
  Tensor g = Tensor::allocate(DType::kFloat32, {k, k});
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = 0; j < k; ++j) {
      double sum = 0;
      for (int64_t r = 0; r < rows; ++r)
        sum += static_cast<double>(x.data<float>()[r * k + i]) * x.data<float>()[r * k + j];
      g.data<float>()[i * k + j] = static_cast<float>(sum);
    }
  return g;
}

// Correlated inputs with channels of different scales, as activations are.
Tensor activations(int64_t rows, int64_t k, uint32_t seed) {
  Tensor base = randomFloat({rows, k}, seed);
  Tensor x = Tensor::allocate(DType::kFloat32, {rows, k});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < k; ++j) {
      const float* b = base.data<float>() + r * k;
      x.data<float>()[r * k + j] =
          (b[j] + 0.6f * b[(j + 1) % k]) * (1.0f + static_cast<float>(j % 5));
    }
  return x;
}

TEST(PrunePatternTest, ParsesFractionsAndNM) {
  PrunePattern p;
  ASSERT_TRUE(parsePrunePattern("0.5", &p).ok());
  EXPECT_FALSE(p.nm());
  EXPECT_EQ(p.sparsity, 0.5);
  EXPECT_EQ(p.text(), "50%");
  ASSERT_TRUE(parsePrunePattern("2:4", &p).ok());
  EXPECT_EQ(p.n, 2);
  EXPECT_EQ(p.m, 4);
  EXPECT_EQ(p.sparsity, 0.5);
  ASSERT_TRUE(parsePrunePattern("4:8", &p).ok());
  EXPECT_EQ(p.text(), "4:8");
  for (const char* bad :
       {"", "1", "1.5", "-0.1", "nan", "0.5x", "4:4", "0:4", "5:4", "2:", ":4", "2:4:8", "1:65"})
    EXPECT_FALSE(parsePrunePattern(bad, &p).ok()) << bad;
  EXPECT_FALSE(checkPrunePattern(nm(2, 4), 6).ok());
  EXPECT_TRUE(checkPrunePattern(nm(2, 4), 8).ok());
  PruneMethod method;
  EXPECT_TRUE(parsePruneMethod("wanda", &method));
  EXPECT_EQ(method, PruneMethod::kWanda);
  EXPECT_FALSE(parsePruneMethod("random", &method));
}

// Row [4, 1, 2, 3]: magnitude removes 1 and 2; with input norms [0.1, 10, 1, 1] Wanda's scores
// are [0.4, 10, 2, 3] and it removes 4 (its input is nearly silent) and 2.
TEST(PruneWeightTest, MagnitudeAndWandaByHand) {
  const Tensor w = makeFloat({1, 4}, {4, 1, 2, 3});  // [N = 1, K = 4], transposed
  Tensor out;
  ASSERT_TRUE(pruneWeight(w, true, sparsity(0.5), nullptr, &out).ok());
  EXPECT_EQ(values<float>(out), (std::vector<float>{4, 0, 0, 3}));
  const float norms[] = {0.1f, 10, 1, 1};
  ASSERT_TRUE(pruneWeight(w, true, sparsity(0.5), norms, &out).ok());
  EXPECT_EQ(values<float>(out), (std::vector<float>{0, 1, 0, 3}));
  // The same weight as [K, N]: the same rows.
  const Tensor wt = makeFloat({4, 1}, {4, 1, 2, 3});
  ASSERT_TRUE(pruneWeight(wt, false, sparsity(0.5), norms, &out).ok());
  EXPECT_EQ(values<float>(out), (std::vector<float>{0, 1, 0, 3}));
  // Signs do not matter, ties go to the lower index: [-2, 2, -2, 1] at 50% removes 1 and the first
  // -2.
  ASSERT_TRUE(
      pruneWeight(makeFloat({1, 4}, {-2, 2, -2, 1}), true, sparsity(0.5), nullptr, &out).ok());
  EXPECT_EQ(values<float>(out), (std::vector<float>{0, 2, -2, 0}));
  // 2:4 over [1, -5, 3, 2 | 0.5, -0.25, 4, -4]: the two largest of each group stay.
  ASSERT_TRUE(pruneWeight(makeFloat({1, 8}, {1, -5, 3, 2, 0.5, -0.25, 4, -4}), true, nm(2, 4),
                          nullptr, &out)
                  .ok());
  EXPECT_EQ(values<float>(out), (std::vector<float>{0, -5, 3, 0, 0, 0, 4, -4}));
  EXPECT_FALSE(
      pruneWeight(makeFloat({1, 6}, {1, 2, 3, 4, 5, 6}), true, nm(2, 4), nullptr, &out).ok());
}

// Over random weights, both layouts and every pattern: each row loses exactly its share, what
// stays is bit-identical, and no removed weight scores above a kept one (in its group for N:M).
TEST(PruneWeightTest, EveryPatternKeepsTheHighestScoresOfEachRow) {
  const int64_t k = 64, n = 7;
  std::vector<float> norms(static_cast<size_t>(k));
  for (int64_t j = 0; j < k; ++j) norms[j] = 0.1f + static_cast<float>((j * 37) % 11);
  std::vector<PrunePattern> patterns;
  for (double s : {0.0, 0.1, 0.25, 0.5, 0.7, 0.9, 0.99}) patterns.push_back(sparsity(s));
  for (auto [a, b] : {std::pair{2, 4}, {4, 8}, {1, 4}, {3, 4}, {1, 2}})
    patterns.push_back(nm(a, b));
  for (bool transposed : {false, true})
    for (bool wanda : {false, true})
      for (const PrunePattern& pattern : patterns) {
        const Tensor w = randomFloat(transposed ? Shape{n, k} : Shape{k, n}, 7 + transposed);
        Tensor out;
        ASSERT_TRUE(pruneWeight(w, transposed, pattern, wanda ? norms.data() : nullptr, &out).ok());
        const auto before = rowsOf(w, transposed), after = rowsOf(out, transposed);
        const int64_t group = pattern.nm() ? pattern.m : k;
        const int64_t removed =
            pattern.nm() ? pattern.m - pattern.n : std::llround(pattern.sparsity * k);
        for (int64_t r = 0; r < n; ++r)
          for (int64_t g = 0; g < k; g += group) {
            float lowest_kept = INFINITY, highest_removed = 0;
            int64_t zeros = 0;
            for (int64_t j = g; j < g + group; ++j) {
              const float score = std::fabs(before[r][j]) * (wanda ? norms[j] : 1.0f);
              if (after[r][j] == 0.0f) {
                ++zeros, highest_removed = std::max(highest_removed, score);
              } else {
                EXPECT_EQ(after[r][j], before[r][j]);
                lowest_kept = std::min(lowest_kept, score);
              }
            }
            EXPECT_EQ(zeros, removed) << pattern.text() << " row " << r << " group " << g;
            EXPECT_LE(highest_removed, lowest_kept) << pattern.text();
          }
      }
}

// K = 2, H = XᵀX = [[2, 1], [1, 2]]: H^-1 = [[2, -1], [-1, 2]] / 3. Row [1, 2]: the scores
// w^2 / [H^-1]_jj (the first column's, then the second's given the first) are 1.5 and 8, so the
// first goes, and OBS moves it onto the second: 2 - 1 * (-1/3) / (2/3) = 2.5, the w1 that
// minimizes (w - w')ᵀ H (w - w') with w0' = 0. Row [3, 1]: scores 13.5 and 2, the last column
// goes and has nothing after it to update.
TEST(SparseGptTest, ObsUpdateByHand) {
  const Tensor gram = makeFloat({2, 2}, {2, 1, 1, 2});
  SparseGptOptions options;
  options.damping = 0;
  Tensor out;
  ASSERT_TRUE(
      sparseGptPrune(makeFloat({2, 2}, {1, 3, 2, 1}), false, sparsity(0.5), gram, options, &out)
          .ok());
  const std::vector<float> got = values<float>(out);  // [K, N]: column 0 is row [1, 2]
  EXPECT_EQ(got[0], 0.0f);
  EXPECT_NEAR(got[2], 2.5f, 1e-6);
  EXPECT_EQ(got[1], 3.0f);
  EXPECT_EQ(got[3], 0.0f);
}

// Uncorrelated inputs of equal energy (XᵀX = c I): nothing to compensate, so SparseGPT is
// magnitude pruning, exactly.
TEST(SparseGptTest, WithIdentityHessianIsMagnitudePruning) {
  const int64_t k = 32;
  Tensor gram = Tensor::allocate(DType::kFloat32, {k, k});
  for (int64_t i = 0; i < k * k; ++i) gram.data<float>()[i] = i % (k + 1) == 0 ? 3.0f : 0.0f;
  const Tensor w = randomFloat({k, 6}, 11);
  for (const PrunePattern& pattern : {sparsity(0.5), sparsity(0.3), nm(2, 4), nm(4, 8)}) {
    Tensor sparse_gpt, magnitude;
    ASSERT_TRUE(sparseGptPrune(w, false, pattern, gram, SparseGptOptions{}, &sparse_gpt).ok());
    ASSERT_TRUE(pruneWeight(w, false, pattern, nullptr, &magnitude).ok());
    EXPECT_EQ(values<float>(sparse_gpt), values<float>(magnitude)) << pattern.text();
  }
}

// On correlated calibration rows: SparseGPT's update lowers the output error below that of its
// own mask without the update, and below Wanda's and magnitude's; its patterns hold (every N:M
// group with exactly M - N zeros, each row with its share; blocks smaller than K included).
TEST(SparseGptTest, UpdateLowersTheOutputErrorAndKeepsThePattern) {
  const int64_t k = 48, n = 10, rows = 120;  // relativeOutputError reads up to 128
  const Tensor x = activations(rows, k, 21), w = randomFloat({k, n}, 22), gram = gramOf(x);
  std::vector<float> norms(static_cast<size_t>(k));
  for (int64_t j = 0; j < k; ++j) {
    double sum = 0;
    for (int64_t r = 0; r < rows; ++r)
      sum += static_cast<double>(x.data<float>()[r * k + j]) * x.data<float>()[r * k + j];
    norms[j] = static_cast<float>(std::sqrt(sum));
  }
  for (int64_t block : {int64_t{128}, int64_t{16}})
    for (const PrunePattern& pattern : {sparsity(0.5), sparsity(0.75), nm(2, 4), nm(4, 8)}) {
      SparseGptOptions options;
      options.block = block;
      Tensor sparse_gpt, wanda, magnitude;
      ASSERT_TRUE(sparseGptPrune(w, false, pattern, gram, options, &sparse_gpt).ok());
      ASSERT_TRUE(pruneWeight(w, false, pattern, norms.data(), &wanda).ok());
      ASSERT_TRUE(pruneWeight(w, false, pattern, nullptr, &magnitude).ok());
      Tensor mask_only = w.clone();
      for (int64_t i = 0; i < w.numElements(); ++i)
        if (sparse_gpt.data<float>()[i] == 0.0f) mask_only.data<float>()[i] = 0.0f;
      const double e_sparse_gpt = outputError(x, w, sparse_gpt),
                   e_mask = outputError(x, w, mask_only);
      const double e_wanda = outputError(x, w, wanda), e_magnitude = outputError(x, w, magnitude);
      EXPECT_LT(e_sparse_gpt, e_mask) << pattern.text();
      EXPECT_LT(e_sparse_gpt, e_wanda) << pattern.text();
      EXPECT_LT(e_wanda, e_magnitude) << pattern.text();
      const auto after = rowsOf(sparse_gpt, false);
      const int64_t group = pattern.nm() ? pattern.m : k;
      const int64_t removed =
          pattern.nm() ? pattern.m - pattern.n : std::llround(pattern.sparsity * k);
      for (int64_t r = 0; r < n; ++r)
        for (int64_t g = 0; g < k; g += group)
          EXPECT_EQ(std::count(after[r].begin() + g, after[r].begin() + g + group, 0.0f), removed)
              << pattern.text() << " block " << block;
      // relativeOutputError is the same measure, relative to ||X W||.
      const Tensor zero = Tensor::allocate(DType::kFloat32, {k, n});
      EXPECT_NEAR(relativeOutputError(x, w, sparse_gpt, false),
                  e_sparse_gpt / outputError(x, w, zero), 1e-5);
    }
}

// A channel no calibration row reached (H_jj = 0) has its weights removed first, and a
// Hessian of the wrong size or with non-finite values is refused, not used.
TEST(SparseGptTest, DeadChannelsAndBadHessians) {
  const int64_t k = 8;
  Tensor x = activations(40, k, 31);
  for (int64_t r = 0; r < 40; ++r) x.data<float>()[r * k + 3] = 0.0f;
  const Tensor w = randomFloat({k, 3}, 32);
  Tensor out;
  ASSERT_TRUE(sparseGptPrune(w, false, sparsity(0.25), gramOf(x), SparseGptOptions{}, &out).ok());
  for (int64_t c = 0; c < 3; ++c) EXPECT_EQ(out.data<float>()[3 * 3 + c], 0.0f);
  EXPECT_FALSE(
      sparseGptPrune(w, false, sparsity(0.5), makeFloat({2, 2}, {1, 0, 0, 1}), {}, &out).ok());
  Tensor bad = gramOf(x);
  bad.data<float>()[k + 2] = NAN;
  bad.data<float>()[2 * k + 1] = NAN;
  EXPECT_FALSE(sparseGptPrune(w, false, sparsity(0.5), bad, {}, &out).ok());
}

// Down weight rows (F = 4, N = 2) with norms 5, 1, 2, 2 and input energies 1, 100, 4, 4:
// scores 5, 10, 4, 4. Keeping two: channels 0 and 1 (magnitude alone would keep 0 and 2);
// keeping three: the tie between 2 and 3 goes to the lower index.
TEST(MlpChannelsTest, ActivationWeightedScoresByHand) {
  const Tensor down = makeFloat({4, 2}, {3, 4, 1, 0, 0, 2, 2, 0});
  const float mean_sq[] = {1, 100, 4, 4};
  EXPECT_EQ(keptMlpChannels(down, false, mean_sq, 2), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(keptMlpChannels(down, false, mean_sq, 3), (std::vector<int64_t>{0, 1, 2}));
  // The same weight as [N, F].
  const Tensor transposed = makeFloat({2, 4}, {3, 1, 0, 2, 4, 0, 2, 0});
  EXPECT_EQ(keptMlpChannels(transposed, true, mean_sq, 2), (std::vector<int64_t>{0, 1}));
  const float flat[] = {1, 1, 1, 1};
  EXPECT_EQ(keptMlpChannels(down, false, flat, 2), (std::vector<int64_t>{0, 2}));
  // The scores the report prints.
  std::vector<double> scores;
  keptMlpChannels(down, false, mean_sq, 2, &scores);
  EXPECT_EQ(scores, (std::vector<double>{5, 10, 4, 4}));
}

// Attention heads: two heads of head_dim 2 (one KV head each), the output projection's input
// rows (3, 4), (0, 1), (1, 0), (2, 0) with norms 5, 1, 1, 2. With input energies 1, 1, 25, 1 the
// channels score 5, 1, 5, 2: head 0 sums 6, head 1 7, so removing one keeps head 1; on weight
// norms alone (flat energies) head 0 (6 against 3) stays.
TEST(AttentionHeadsTest, SummedChannelScoresByHand) {
  const Tensor o_proj = makeFloat({4, 2}, {3, 4, 0, 1, 1, 0, 2, 0});
  const float mean_sq[] = {1, 1, 25, 1}, flat[] = {1, 1, 1, 1};
  KeptHeads kept = keptAttentionHeads(o_proj, false, mean_sq, 2, 2, 1, 0);
  EXPECT_EQ(kept.heads, (std::vector<int64_t>{1}));
  EXPECT_EQ(kept.kv_heads, (std::vector<int64_t>{1}));
  EXPECT_EQ(keptAttentionHeads(o_proj, false, flat, 2, 2, 1, 0).heads, (std::vector<int64_t>{0}));
  // The same weight as [N, heads * head_dim].
  const Tensor transposed = makeFloat({2, 4}, {3, 0, 1, 2, 4, 1, 0, 0});
  EXPECT_EQ(keptAttentionHeads(transposed, true, mean_sq, 2, 2, 1, 0).heads,
            (std::vector<int64_t>{1}));
  EXPECT_EQ(keptAttentionHeads(o_proj, false, mean_sq, 2, 2, 0, 0).heads,
            (std::vector<int64_t>{0, 1}));
}

// Grouped-query: four heads of head_dim 1 in two KV groups (heads 0-1, 2-3), scoring 2, 3, 2, 2:
// the groups 5 and 4. One group removed: group 0 and its heads stay. One head removed from each
// group: head 1 of the first, and of the tie in the second the lower index, head 2.
TEST(AttentionHeadsTest, GroupsAndHeadsPerGroup) {
  const Tensor o_proj = makeFloat({4, 1}, {1, 3, 2, 2});
  const float mean_sq[] = {4, 1, 1, 1};
  KeptHeads groups = keptAttentionHeads(o_proj, false, mean_sq, 4, 2, 1, 0);
  EXPECT_EQ(groups.heads, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(groups.kv_heads, (std::vector<int64_t>{0}));
  KeptHeads per_group = keptAttentionHeads(o_proj, false, mean_sq, 4, 2, 0, 1);
  EXPECT_EQ(per_group.heads, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(per_group.kv_heads, (std::vector<int64_t>{0, 1}));
  KeptHeads both = keptAttentionHeads(o_proj, false, mean_sq, 4, 2, 1, 1);
  EXPECT_EQ(both.heads, (std::vector<int64_t>{1}));
  EXPECT_EQ(both.kv_heads, (std::vector<int64_t>{0}));
  EXPECT_EQ(both.head_scores, (std::vector<double>{2, 3, 2, 2}));
  EXPECT_EQ(both.group_scores, (std::vector<double>{5, 4}));
}

// Block influence by hand: rows unchanged (cosine 1), turned by 90 degrees (0), reversed (-1)
// and scaled (1): 1 - mean(1, 0, -1, 1) = 0.75. A zero row does not count; nothing to count
// or shapes that differ give NaN.
TEST(LayerInfluenceTest, OneMinusMeanCosineByHand) {
  const Tensor before = makeFloat({5, 2}, {1, 0, 1, 0, 1, 0, 3, 4, 0, 0});
  const Tensor after = makeFloat({5, 2}, {2, 0, 0, 5, -1, 0, 6, 8, 1, 1});
  EXPECT_DOUBLE_EQ(blockInfluence(before, after), 0.25 * (0 + 1 + 2 + 0));
  EXPECT_DOUBLE_EQ(blockInfluence(before, before), 0);
  EXPECT_TRUE(std::isnan(blockInfluence(makeFloat({1, 2}, {0, 0}), makeFloat({1, 2}, {1, 0}))));
  EXPECT_TRUE(std::isnan(blockInfluence(before, makeFloat({1, 2}, {1, 0}))));
}

// Overall sparsity by hand: two products of 4 weights, normalized scores {0.5, 0.5, 1.5, 1.5}
// and {0.1, 0.1, 0.1, 3.7}. For a threshold in (0.1, 0.5] the first has none below (clamped up
// to 0.4), the second 3 of 4 (clamped down to 0.6): 0.5 overall. Equal distributions each get
// the target; sizes weigh the total.
TEST(OverallSparsityTest, SharesByHand) {
  std::vector<double> shares =
      overallShares({{1.5f, 0.5f, 1.5f, 0.5f}, {0.1f, 3.7f, 0.1f, 0.1f}}, {4, 4}, 0.5);
  ASSERT_EQ(shares.size(), 2u);
  EXPECT_DOUBLE_EQ(shares[0], 0.4);
  EXPECT_DOUBLE_EQ(shares[1], 0.6);
  shares = overallShares({{0.5f, 1.5f}, {0.5f, 1.5f}}, {10, 30}, 0.5);
  EXPECT_DOUBLE_EQ(shares[0], 0.5);
  EXPECT_DOUBLE_EQ(shares[1], 0.5);
  // Unclamped (spread 0.5) no threshold gives exactly 0.5 (0.375 just below 0.5, 0.625 from
  // it): the smallest that reaches the target wins, the shares' own fractions, 0.5 and 0.75.
  shares = overallShares({{1.5f, 0.5f, 1.5f, 0.5f}, {0.1f, 3.7f, 0.1f, 0.1f}}, {4, 4}, 0.5, 0.5);
  EXPECT_DOUBLE_EQ(shares[0], 0.5);
  EXPECT_DOUBLE_EQ(shares[1], 0.75);
}

TEST(PruneWeightKernelTest, MatchesPruneWeightAndRefusesBadInputs) {
  const Tensor w = randomFloat({16, 5}, 41);
  const Tensor norms = makeFloat({16}, std::vector<float>(16, 2.0f));
  Tensor expected;
  ASSERT_TRUE(pruneWeight(w, false, nm(2, 4), norms.data<float>(), &expected).ok());
  EXPECT_EQ(
      values<float>(runKernel(
          "LlmPruneWeight", {w, norms},
          params({{"method", stringParam("wanda")}, {"n", intParam(2)}, {"m", intParam(4)}}))),
      values<float>(expected));
  ASSERT_TRUE(pruneWeight(w, true, sparsity(0.6), nullptr, &expected).ok());
  EXPECT_EQ(values<float>(runKernel("LlmPruneWeight", {w},
                                    params({{"method", stringParam("magnitude")},
                                            {"sparsity", floatParam(0.6)},
                                            {"trans_b", intParam(1)}}))),
            values<float>(expected));
  TestKernelContext ctx;
  ctx.inputs = {w};
  ctx.kernel_params = params({{"method", stringParam("wanda")}, {"sparsity", floatParam(0.5)}});
  EXPECT_NE(ctx.run("LlmPruneWeight").message().find("channel norms"), std::string::npos);
  ctx.inputs = {w, makeFloat({3}, {1, 2, 3})};
  EXPECT_NE(ctx.run("LlmPruneWeight").message().find("K = 16"), std::string::npos);
  ctx.kernel_params = params({{"method", stringParam("sparsegpt")}, {"sparsity", floatParam(0.5)}});
  EXPECT_FALSE(ctx.run("LlmPruneWeight").ok());
  ctx.inputs = {w};
  ctx.kernel_params = params({{"method", stringParam("magnitude")}, {"sparsity", floatParam(1.0)}});
  EXPECT_FALSE(ctx.run("LlmPruneWeight").ok());
  ctx.kernel_params =
      params({{"method", stringParam("magnitude")}, {"n", intParam(3)}, {"m", intParam(6)}});
  EXPECT_NE(ctx.run("LlmPruneWeight").message().find("multiple of 6"), std::string::npos);
}

}  // namespace
}  // namespace llmc::testing
