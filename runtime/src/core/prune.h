// Weight pruning (docs/pruning.md): the masks and updates the compiler's pruning pass computes,
// here in the runtime's core so that `llmc refit` repeats the recipe of a magnitude- or
// Wanda-pruned weight (kernel LlmPruneWeight) and the unit tests reach them without MLIR.
//
// Every rule works on the weight as output rows: row c of [N, K] holds output channel c along
// K, whatever layout the float weight has ([K, N], or [N, K] when `transposed`). Each output row
// loses the same number of weights (row-balanced sparsity, which the sparse storage and
// kernels rely on): round(sparsity * K) of them, or in every group of M along K all but N.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "llmc/status.h"
#include "llmc/tensor.h"

namespace llmc {

enum class PruneMethod : uint8_t {
  kMagnitude = 0,  // score |w|
  kWanda = 1,      // score |w| * ||x_j||2 (the input channel's norm over the calibration rows)
  kSparseGpt = 2,  // OBS: score w^2 / [H^-1]_jj^2, the kept weights updated (sparseGptPrune)
};
const char* pruneMethodName(PruneMethod method);
bool parsePruneMethod(const std::string& name, PruneMethod* method);

struct PrunePattern {
  double sparsity = 0;  // the fraction of each row zeroed (N:M: 1 - n / m)
  int n = 0, m = 0;     // N:M: n kept of every m consecutive weights along K (0: unstructured)
  bool nm() const { return m > 0; }
  std::string text() const;  // "50%" or "2:4"
  // The weights each row of K keeps (K a multiple of m for N:M).
  int64_t keptPerRow(int64_t k) const;
};
// "0.5" (a fraction in [0, 1)) or "N:M" (1 <= N < M <= 64).
Status parsePrunePattern(const std::string& text, PrunePattern* pattern);
// Whether the pattern fits a weight with this K (N:M: M divides K), with the reason.
Status checkPrunePattern(const PrunePattern& pattern, int64_t k);

// keep[r * k + j] = 0 for the weights `pattern` removes from row r: the lowest scores, ties
// going to the lower index (the order a stable sort gives); 1 for the rest.
void pruneMask(const float* scores, int64_t rows, int64_t k, const PrunePattern& pattern,
               uint8_t* keep);

// Magnitude (channel_norms null) or Wanda (channel_norms: K values) pruning of a 2-D float32
// weight: `out` is `w` with the removed weights set to 0.0f and the rest bit-identical.
Status pruneWeight(const Tensor& w, bool transposed, const PrunePattern& pattern,
                   const float* channel_norms, Tensor* out);

struct SparseGptOptions {
  double damping = 0.01;  // added to H's diagonal, as a fraction of its mean
  int64_t block = 128;    // columns per lazy update (and per mask choice, unstructured)
};
// SparseGPT (Frantar & Alistarh, 2023) on one weight, with `gram` = XᵀX (float32 [K, K]) of
// its input over the calibration rows: column by column, each weight removed has its error
// spread over the row's later columns through the Cholesky factor of H^-1 (H = XᵀX + damping);
// the mask is chosen per row by w^2 / [H^-1]_jj^2 on the weights as updated so far: at each
// block (unstructured: the row's remaining removals among all the columns not yet processed,
// those in the block removed now, so each row loses exactly round(sparsity * K)) or group of M.
// Channels never active (H_jj = 0) have their weights zeroed first, as the paper does.
// kFailedPrecondition when H stays singular after damping.
Status sparseGptPrune(const Tensor& w, bool transposed, const PrunePattern& pattern,
                      const Tensor& gram, const SparseGptOptions& options, Tensor* out);

// An overall sparsity `target` spread over products (`--prune METHOD:S,overall`): product i
// has sizes[i] weights and a sample of its scores each divided by the product's mean score.
// One threshold t over the normalized scores gives each product the share of its sample below
// t, kept within target +- spread (and under 0.99); t is the smallest threshold (by bisection)
// at which the shares, weighted by size, add up to the target (on small samples, where no
// threshold hits it exactly, the first to reach it). Returns the shares.
std::vector<double> overallShares(std::vector<std::vector<float>> samples,
                                  const std::vector<int64_t>& sizes, double target,
                                  double spread = 0.1);

// Structured pruning of an MLP's F channels: channel f scores ||x_f||2 * ||W_down[f, :]||2,
// with mean_sq[f] the mean of x_f^2 over the calibration rows and `down` the down projection's
// weight ([F, N], or [N, F] when `transposed`). Returns the `kept` channels of highest score
// in ascending order (ties: the lower index stays); every channel's score in `scores` when given.
std::vector<int64_t> keptMlpChannels(const Tensor& down, bool transposed, const float* mean_sq,
                                     int64_t kept, std::vector<double>* scores = nullptr);

// Structured pruning of attention heads. `o_proj` is the output projection's weight
// ([heads * head_dim, N], or [N, heads * head_dim] when `transposed`), mean_sq its input's
// per-channel mean of x^2; query heads come in `kv_heads` groups of heads / kv_heads
// consecutive heads, each group sharing one key/value head. A head scores the sum of its
// channels' ||x_f||2 * ||W_o[f, :]||2 (the MLP channels' score) and a group the sum of its
// heads'. The `groups_removed` lowest-scoring groups go (with their query heads), then the
// `heads_removed_per_group` lowest-scoring heads of every group kept, so each group keeps the
// same count (ties: the lower index stays). Both lists ascending; the scores of every head and
// group come with them (for the report).
struct KeptHeads {
  std::vector<int64_t> heads;     // query heads kept
  std::vector<int64_t> kv_heads;  // key/value heads (groups) kept
  std::vector<double> head_scores, group_scores;
};
KeptHeads keptAttentionHeads(const Tensor& o_proj, bool transposed, const float* mean_sq,
                             int64_t heads, int64_t kv_heads, int64_t groups_removed,
                             int64_t heads_removed_per_group);

// ShortGPT's block influence of a decoder layer: 1 - the mean over rows of the cosine between
// `before` (the residual stream entering the layer, float32 [rows, hidden]) and `after` (the
// stream leaving it), row r of both the same token. 0: the layer changes no direction. Rows
// where either vector is zero are skipped; NaN when none is left or the shapes differ.
double blockInfluence(const Tensor& before, const Tensor& after);

// ||x (w - pruned)||_F / ||x w||_F over the first 128 rows of x (float32 [R, K]): the relative
// output error a pruning costs on calibration rows (0 when x w is 0).
double relativeOutputError(const Tensor& x, const Tensor& w, const Tensor& pruned, bool transposed);

// The fraction of exact zeros in a float32 tensor.
double zeroFraction(const Tensor& t);

}  // namespace llmc
