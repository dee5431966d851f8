#include "core/prune.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <vector>

namespace llmc {

namespace {

// Row r of the weight as [N, K] (output channel r along K), read from either layout.
struct RowView {
  const float* data;
  int64_t n, k;
  bool transposed;
  float at(int64_t r, int64_t j) const { return transposed ? data[r * k + j] : data[j * n + r]; }
};

Status checkWeight(const Tensor& w, bool transposed, int64_t* n, int64_t* k) {
  if (w.rank() != 2 || w.dtype() != DType::kFloat32)
    return invalidArgument("pruning needs a 2-D float32 weight, got " +
                           std::string(dtypeName(w.dtype())) + shapeToString(w.shape()));
  *k = transposed ? w.dim(1) : w.dim(0);
  *n = transposed ? w.dim(0) : w.dim(1);
  return okStatus();
}

// The weights of row `row` (length `k`) that `pattern` removes, lowest score first.
void maskRow(const float* scores, int64_t k, const PrunePattern& pattern, uint8_t* keep,
             std::vector<int64_t>* order) {
  std::fill(keep, keep + k, uint8_t{1});
  auto drop_lowest = [&](int64_t begin, int64_t end, int64_t count) {
    order->resize(static_cast<size_t>(end - begin));
    std::iota(order->begin(), order->end(), begin);
    std::stable_sort(order->begin(), order->end(),
                     [&](int64_t a, int64_t b) { return scores[a] < scores[b]; });
    for (int64_t i = 0; i < count; ++i) keep[(*order)[static_cast<size_t>(i)]] = 0;
  };
  if (pattern.nm()) {
    for (int64_t g = 0; g + pattern.m <= k; g += pattern.m)
      drop_lowest(g, g + pattern.m, pattern.m - pattern.n);
  } else {
    drop_lowest(0, k, k - pattern.keptPerRow(k));
  }
}

}  // namespace

int64_t PrunePattern::keptPerRow(int64_t k) const {
  return nm() ? k / m * n : k - std::llround(sparsity * static_cast<double>(k));
}

const char* pruneMethodName(PruneMethod method) {
  switch (method) {
    case PruneMethod::kMagnitude: return "magnitude";
    case PruneMethod::kWanda: return "wanda";
    case PruneMethod::kSparseGpt: return "sparsegpt";
  }
  return "?";
}

bool parsePruneMethod(const std::string& name, PruneMethod* method) {
  for (PruneMethod m : {PruneMethod::kMagnitude, PruneMethod::kWanda, PruneMethod::kSparseGpt})
    if (name == pruneMethodName(m)) {
      *method = m;
      return true;
    }
  return false;
}

std::string PrunePattern::text() const {
  if (nm()) return std::to_string(n) + ":" + std::to_string(m);
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%g%%", 100 * sparsity);
  return buffer;
}

Status parsePrunePattern(const std::string& text, PrunePattern* pattern) {
  PrunePattern p;
  const size_t colon = text.find(':');
  auto whole = [](const std::string& s, int* value) {
    if (s.empty() || s.size() > 3 || s.find_first_not_of("0123456789") != std::string::npos)
      return false;
    *value = std::stoi(s);
    return true;
  };
  if (colon != std::string::npos) {
    if (!whole(text.substr(0, colon), &p.n) || !whole(text.substr(colon + 1), &p.m) || p.n < 1 ||
        p.n >= p.m || p.m > 64)
      return invalidArgument(
          "an N:M pattern keeps N of every M weights, 1 <= N < M <= 64 (2:4, 4:8), got '" + text +
          "'");
    p.sparsity = 1.0 - static_cast<double>(p.n) / p.m;
  } else {
    char* end = nullptr;
    p.sparsity = std::strtod(text.c_str(), &end);
    if (text.empty() || end != text.c_str() + text.size() || !(p.sparsity >= 0 && p.sparsity < 1))
      return invalidArgument(
          "a sparsity is a fraction in [0, 1) (0.5 zeroes half of each row), got '" + text + "'");
  }
  *pattern = p;
  return okStatus();
}

Status checkPrunePattern(const PrunePattern& pattern, int64_t k) {
  if (pattern.nm() && k % pattern.m != 0)
    return invalidArgument(pattern.text() + " needs K to be a multiple of " +
                           std::to_string(pattern.m) + ", K is " + std::to_string(k));
  return okStatus();
}

void pruneMask(const float* scores, int64_t rows, int64_t k, const PrunePattern& pattern,
               uint8_t* keep) {
  std::vector<int64_t> order;
  for (int64_t r = 0; r < rows; ++r) maskRow(scores + r * k, k, pattern, keep + r * k, &order);
}

Status pruneWeight(const Tensor& w, bool transposed, const PrunePattern& pattern,
                   const float* channel_norms, Tensor* out) {
  int64_t n = 0, k = 0;
  LLMC_RETURN_IF_ERROR(checkWeight(w, transposed, &n, &k));
  LLMC_RETURN_IF_ERROR(checkPrunePattern(pattern, k));
  const RowView view{w.data<float>(), n, k, transposed};
  Tensor result = w.clone();
  std::vector<float> scores(static_cast<size_t>(k));
  std::vector<uint8_t> keep(static_cast<size_t>(k));
  std::vector<int64_t> order;
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t j = 0; j < k; ++j)
      scores[j] = std::fabs(view.at(r, j)) * (channel_norms ? channel_norms[j] : 1.0f);
    maskRow(scores.data(), k, pattern, keep.data(), &order);
    for (int64_t j = 0; j < k; ++j)
      if (!keep[j]) result.data<float>()[transposed ? r * k + j : j * n + r] = 0.0f;
  }
  *out = std::move(result);
  return okStatus();
}

namespace {

// Lower Cholesky factor of the symmetric positive definite `a` (row-major [k, k]), in place
// below and on the diagonal; false when a pivot is not positive.
bool choleskyLower(std::vector<double>& a, int64_t k) {
  for (int64_t j = 0; j < k; ++j) {
    double* row_j = a.data() + j * k;
    double diag = row_j[j];
    for (int64_t p = 0; p < j; ++p) diag -= row_j[p] * row_j[p];
    if (!(diag > 0) || !std::isfinite(diag)) return false;
    row_j[j] = std::sqrt(diag);
    for (int64_t i = j + 1; i < k; ++i) {
      double* row_i = a.data() + i * k;
      double sum = row_i[j];
      for (int64_t p = 0; p < j; ++p) sum -= row_i[p] * row_j[p];
      row_i[j] = sum / row_j[j];
    }
  }
  return true;
}

// The inverse of the lower triangular `l` (row-major [k, k], only its lower part read), lower.
std::vector<double> invertLower(const std::vector<double>& l, int64_t k) {
  std::vector<double> x(static_cast<size_t>(k * k), 0.0);
  for (int64_t i = 0; i < k; ++i) {
    double* row = x.data() + i * k;
    row[i] = 1.0;
    for (int64_t p = 0; p < i; ++p) {
      const double f = l[i * k + p];
      const double* prev = x.data() + p * k;
      for (int64_t c = 0; c <= p; ++c) row[c] -= f * prev[c];
    }
    const double inv = 1.0 / l[i * k + i];
    for (int64_t c = 0; c <= i; ++c) row[c] *= inv;
  }
  return x;
}

}  // namespace

Status sparseGptPrune(const Tensor& w, bool transposed, const PrunePattern& pattern,
                      const Tensor& gram, const SparseGptOptions& options, Tensor* out) {
  int64_t n = 0, k = 0;
  LLMC_RETURN_IF_ERROR(checkWeight(w, transposed, &n, &k));
  LLMC_RETURN_IF_ERROR(checkPrunePattern(pattern, k));
  if (gram.dtype() != DType::kFloat32 || gram.rank() != 2 || gram.dim(0) != k || gram.dim(1) != k)
    return invalidArgument("SparseGPT needs XᵀX as float32 [K, K] = [" + std::to_string(k) + ", " +
                           std::to_string(k) + "], got " + shapeToString(gram.shape()));
  const int64_t block = pattern.nm() ? std::max<int64_t>(options.block / pattern.m, 1) * pattern.m
                                     : std::max<int64_t>(options.block, 1);
  // W as rows [N, K] in double.
  const RowView view{w.data<float>(), n, k, transposed};
  std::vector<double> rows(static_cast<size_t>(n * k));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < k; ++j) rows[r * k + j] = view.at(r, j);
  // H in the reversed order (M = P H P): the upper factor U of H^-1 = UᵀU is P L^-1 P, with
  // L the lower Cholesky factor of M, so one factorization and one triangular inverse suffice.
  std::vector<double> h(static_cast<size_t>(k * k));
  double mean_diag = 0;
  for (int64_t j = 0; j < k; ++j)
    mean_diag += gram.data<float>()[j * k + j] / static_cast<double>(k);
  std::vector<uint8_t> dead(static_cast<size_t>(k), 0);
  for (int64_t j = 0; j < k; ++j)
    if (!(gram.data<float>()[j * k + j] > 0)) dead[j] = 1;
  std::vector<double> lower;
  bool factored = false;
  // The damping asked for, then ten and a hundred times more (0: then 1% and 10% of mean(diag)).
  for (int attempt = 0; attempt < 3 && !factored; ++attempt) {
    const double damping =
        (attempt == 0 ? options.damping : std::max(options.damping, 1e-3)) * (attempt == 0   ? 1
                                                                              : attempt == 1 ? 10
                                                                                             : 100);
    const double damp = damping * (mean_diag > 0 ? mean_diag : 1.0);
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < k; ++j) {
        const int64_t si = k - 1 - i, sj = k - 1 - j;
        double v = dead[si] || dead[sj] ? 0.0 : gram.data<float>()[si * k + sj];
        if (i == j) v = (dead[si] ? 1.0 : v) + damp;
        h[i * k + j] = v;
      }
    lower = h;
    factored = choleskyLower(lower, k);
  }
  if (!factored)
    return failedPrecondition(
        "SparseGPT: XᵀX stays singular after damping (are the calibration rows finite?)");
  const std::vector<double> inverse = invertLower(lower, k);
  auto u = [&](int64_t i, int64_t j) {
    return inverse[(k - 1 - i) * k + (k - 1 - j)];
  };  // U = P L^-1 P
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < k; ++j)
      if (dead[j]) rows[r * k + j] = 0;

  const int64_t total_removed = k - pattern.keptPerRow(k);
  std::vector<int64_t> removed_so_far(static_cast<size_t>(n), 0);
  std::vector<uint8_t> keep(static_cast<size_t>(n * k), 1);
  std::vector<float> scores(static_cast<size_t>(std::max(pattern.m, 1)));  // one N:M group
  std::vector<int64_t> order;
  std::vector<double> errors(static_cast<size_t>(n * block));
  for (int64_t b0 = 0; b0 < k; b0 += block) {
    const int64_t b1 = std::min(k, b0 + block);
    if (!pattern.nm()) {
      // Each row's remaining removals go to its lowest scores over every column not yet
      // processed (on the weights as updated so far); those in this block are removed now, the
      // rest are chosen again at the next block, so each row loses exactly its share.
      std::vector<std::pair<double, int64_t>> candidates;
      for (int64_t r = 0; r < n; ++r) {
        const int64_t remaining = total_removed - removed_so_far[r];
        if (remaining <= 0) continue;
        candidates.clear();
        for (int64_t j = b0; j < k; ++j) {
          const double d = u(j, j), v = rows[r * k + j];
          candidates.emplace_back(v * v / (d * d), j);
        }
        std::nth_element(candidates.begin(), candidates.begin() + (remaining - 1),
                         candidates.end());
        for (int64_t i = 0; i < remaining; ++i)
          if (candidates[i].second < b1)
            keep[r * k + candidates[i].second] = 0, ++removed_so_far[r];
      }
    }
    for (int64_t j = b0; j < b1; ++j) {
      if (pattern.nm() && (j - b0) % pattern.m == 0) {
        for (int64_t r = 0; r < n; ++r) {
          for (int64_t c = 0; c < pattern.m; ++c) {
            const double d = u(j + c, j + c), v = rows[r * k + j + c];
            scores[c] = static_cast<float>(v * v / (d * d));
          }
          maskRow(scores.data(), pattern.m, pattern, keep.data() + r * k + j, &order);
        }
      }
      const double d = u(j, j);
      for (int64_t r = 0; r < n; ++r) {
        double* row = rows.data() + r * k;
        const double q = keep[r * k + j] ? row[j] : 0.0;
        const double err = (row[j] - q) / d;
        row[j] = q;
        errors[r * block + (j - b0)] = err;
        if (err != 0)
          for (int64_t c = j + 1; c < b1; ++c) row[c] -= err * u(j, c);
      }
    }
    // The block's errors onto the columns after it: W[:, b1:] -= E U[b0:b1, b1:].
    if (b1 < k)
      for (int64_t r = 0; r < n; ++r) {
        double* row = rows.data() + r * k;
        for (int64_t j = b0; j < b1; ++j) {
          const double err = errors[r * block + (j - b0)];
          if (err == 0) continue;
          const double* u_row =
              inverse.data() + (k - 1 - j) * k;  // U[j, c] = inverse[k-1-j][k-1-c]
          for (int64_t c = b1; c < k; ++c) row[c] -= err * u_row[k - 1 - c];
        }
      }
  }
  Tensor result = Tensor::allocate(DType::kFloat32, w.shape());
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < k; ++j) {
      const float v = keep[r * k + j] && !dead[j] ? static_cast<float>(rows[r * k + j]) : 0.0f;
      result.data<float>()[transposed ? r * k + j : j * n + r] = v;
    }
  *out = std::move(result);
  return okStatus();
}

namespace {

// ||x_f||2 * ||W[f, :]||2 for each input channel f of a product's weight ([F, N], or [N, F]
// when `transposed`), mean_sq[f] the mean of x_f^2 over the calibration rows.
std::vector<double> channelScores(const Tensor& w, bool transposed, const float* mean_sq) {
  const int64_t f = transposed ? w.dim(1) : w.dim(0), n = transposed ? w.dim(0) : w.dim(1);
  std::vector<double> scores(static_cast<size_t>(f));
  for (int64_t c = 0; c < f; ++c) {
    double row = 0;
    for (int64_t j = 0; j < n; ++j) {
      const double v = transposed ? w.data<float>()[j * f + c] : w.data<float>()[c * n + j];
      row += v * v;
    }
    scores[c] = std::sqrt(static_cast<double>(mean_sq[c]) * row);
  }
  return scores;
}

// The `kept` of `candidates` with the highest scores (ties: the earlier candidate stays),
// ascending.
std::vector<int64_t> highest(const std::vector<double>& scores, std::vector<int64_t> candidates,
                             int64_t kept) {
  std::stable_sort(candidates.begin(), candidates.end(),
                   [&](int64_t a, int64_t b) { return scores[a] > scores[b]; });
  candidates.resize(static_cast<size_t>(std::clamp<int64_t>(kept, 0, candidates.size())));
  std::sort(candidates.begin(), candidates.end());
  return candidates;
}

}  // namespace

std::vector<double> overallShares(std::vector<std::vector<float>> samples,
                                  const std::vector<int64_t>& sizes, double target, double spread) {
  double total = 0, hi = 1;
  for (size_t i = 0; i < samples.size(); ++i) {
    std::sort(samples[i].begin(), samples[i].end());
    total += static_cast<double>(sizes[i]);
    if (!samples[i].empty()) hi = std::max(hi, 2.0 * samples[i].back());
  }
  auto shareAt = [&](size_t i, double t) {
    const std::vector<float>& v = samples[i];
    const double below =
        v.empty() ? target
                  : static_cast<double>(std::lower_bound(v.begin(), v.end(), t) - v.begin()) /
                        static_cast<double>(v.size());
    return std::clamp(below, std::max(0.0, target - spread), std::min(0.99, target + spread));
  };
  auto totalAt = [&](double t) {
    double zeros = 0;
    for (size_t i = 0; i < samples.size(); ++i)
      zeros += shareAt(i, t) * static_cast<double>(sizes[i]);
    return total > 0 ? zeros / total : target;
  };
  double lo = 0;
  for (int i = 0; i < 64; ++i) {
    const double mid = 0.5 * (lo + hi);
    (totalAt(mid) < target ? lo : hi) = mid;
  }
  std::vector<double> shares(samples.size());
  for (size_t i = 0; i < samples.size(); ++i) shares[i] = shareAt(i, hi);
  return shares;
}

std::vector<int64_t> keptMlpChannels(const Tensor& down, bool transposed, const float* mean_sq,
                                     int64_t kept, std::vector<double>* scores_out) {
  std::vector<double> scores = channelScores(down, transposed, mean_sq);
  std::vector<int64_t> all(scores.size());
  for (size_t c = 0; c < all.size(); ++c) all[c] = static_cast<int64_t>(c);
  std::vector<int64_t> chosen = highest(scores, std::move(all), kept);
  if (scores_out) *scores_out = std::move(scores);
  return chosen;
}

KeptHeads keptAttentionHeads(const Tensor& o_proj, bool transposed, const float* mean_sq,
                             int64_t heads, int64_t kv_heads, int64_t groups_removed,
                             int64_t heads_removed_per_group) {
  const std::vector<double> channels = channelScores(o_proj, transposed, mean_sq);
  const int64_t head_dim = static_cast<int64_t>(channels.size()) / heads;
  const int64_t group = heads / kv_heads;
  std::vector<double> head_scores(static_cast<size_t>(heads)), group_scores(kv_heads);
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t d = 0; d < head_dim; ++d) head_scores[h] += channels[h * head_dim + d];
    group_scores[h / group] += head_scores[h];
  }
  std::vector<int64_t> groups(static_cast<size_t>(kv_heads));
  for (int64_t g = 0; g < kv_heads; ++g) groups[g] = g;
  KeptHeads kept;
  kept.kv_heads = highest(group_scores, std::move(groups), kv_heads - groups_removed);
  for (int64_t g : kept.kv_heads) {
    std::vector<int64_t> members(static_cast<size_t>(group));
    for (int64_t i = 0; i < group; ++i) members[i] = g * group + i;
    for (int64_t h : highest(head_scores, std::move(members), group - heads_removed_per_group))
      kept.heads.push_back(h);
  }
  kept.head_scores = std::move(head_scores);
  kept.group_scores = std::move(group_scores);
  return kept;
}

double blockInfluence(const Tensor& before, const Tensor& after) {
  if (before.rank() != 2 || before.shape() != after.shape() || before.dtype() != DType::kFloat32 ||
      after.dtype() != DType::kFloat32)
    return std::nan("");
  const int64_t rows = before.dim(0), k = before.dim(1);
  double sum = 0;
  int64_t counted = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* a = before.data<float>() + r * k;
    const float* b = after.data<float>() + r * k;
    double ab = 0, aa = 0, bb = 0;
    for (int64_t j = 0; j < k; ++j)
      ab += static_cast<double>(a[j]) * b[j], aa += static_cast<double>(a[j]) * a[j],
          bb += static_cast<double>(b[j]) * b[j];
    if (aa == 0 || bb == 0) continue;
    sum += ab / std::sqrt(aa * bb);
    ++counted;
  }
  return counted ? 1 - sum / static_cast<double>(counted) : std::nan("");
}

double relativeOutputError(const Tensor& x, const Tensor& w, const Tensor& pruned,
                           bool transposed) {
  // At most 128 rows: an estimate for a report, linear in the rows.
  const int64_t rows = std::min<int64_t>(x.dim(0), 128), k = x.dim(1);
  const int64_t n = transposed ? w.dim(0) : w.dim(1);
  const RowView a{w.data<float>(), n, k, transposed}, b{pruned.data<float>(), n, k, transposed};
  // Everything in double once, and each dot product as kLanes interleaved partial sums: one
  // chain of dependent adds over float-to-double conversions was 30% of a SparseGPT compile of
  // the demo model (perf), which its report line alone asks for.
  constexpr int64_t kLanes = 4;
  std::vector<double> wt(static_cast<size_t>(n * k)), dt(static_cast<size_t>(n * k)),
      xr(static_cast<size_t>(k));
  for (int64_t c = 0; c < n; ++c)
    for (int64_t j = 0; j < k; ++j)
      wt[c * k + j] = a.at(c, j), dt[c * k + j] = double{a.at(c, j)} - b.at(c, j);
  double reference = 0, error = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < k; ++j) xr[j] = x.data<float>()[r * k + j];
    for (int64_t c = 0; c < n; ++c) {
      const double* wc = wt.data() + c * k;
      const double* dc = dt.data() + c * k;
      double y[kLanes] = {}, e[kLanes] = {};
      int64_t j = 0;
      for (; j + kLanes <= k; j += kLanes)
        for (int64_t lane = 0; lane < kLanes; ++lane)
          y[lane] += xr[j + lane] * wc[j + lane], e[lane] += xr[j + lane] * dc[j + lane];
      for (; j < k; ++j) y[j % kLanes] += xr[j] * wc[j], e[j % kLanes] += xr[j] * dc[j];
      const double yc = (y[0] + y[1]) + (y[2] + y[3]), ec = (e[0] + e[1]) + (e[2] + e[3]);
      reference += yc * yc, error += ec * ec;
    }
  }
  return reference > 0 ? std::sqrt(error / reference) : 0.0;
}

double zeroFraction(const Tensor& t) {
  if (t.numElements() == 0) return 0;
  int64_t zeros = 0;
  for (int64_t i = 0; i < t.numElements(); ++i) zeros += t.data<float>()[i] == 0.0f;
  return static_cast<double>(zeros) / static_cast<double>(t.numElements());
}

}  // namespace llmc
