// The token sampler: see sampler.h for the processing order and the logprob convention.
#include "llm/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "core/isa.h"

namespace llmc {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Cumulative mass within this of top_p counts as reaching it, so that a boundary that is exact
// in real arithmetic (0.5 + 0.25 == 0.75) is not missed by float rounding of exp().
constexpr double kTopPSlack = 1e-6;

uint64_t splitmix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// exp() in float, summed in double by modelStatistics (the entropy and model logprob that the
// drift monitor reads): the float exp is several times faster over a 150k vocab and its 1-ulp
// error is far below what those statistics can resolve.
double expWeight(float logit) { return static_cast<double>(std::exp(logit)); }

// exp(x) for x <= 0 from float multiplies and adds alone (2^n p(r), n = round(x / ln 2) by the
// 1.5 x 2^23 rounding, r = x - n ln 2 in two steps, p of degree 7: within a few ulp of exp), so
// the same bits on every CPU and in however many lanes the compiler gives the loop (this file
// is compiled with -ffp-contract=off). Below -87 (exp < 1.7e-38, nothing beside the largest
// weight, 1) it gives 0. cpu/exp_poly.h's exp, the same polynomial, rounds with fused
// multiply-adds to match its AVX2 and AVX-512 forms, which a plain loop on the baseline ISA has
// not; and it is the CPU backend's.
LLMC_ISA_INLINE float expNonPositive(float x) {
  const float clamped = x >= -87.0f ? x : -87.0f;  // -inf too
  const float n = (clamped * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = clamped - n * 0.693359375f;  // n * 0.693359375 is exact
  r = r - n * -2.12194440e-4f;
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const float power = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return x >= -87.0f ? p * power : 0.0f;
}

// ---- The passes over the vocabulary, built for the baseline, AVX2 and AVX-512 (core/isa.h) and
// chosen by cpuIsa(). Each level does the same float operations per element in the same order
// and sums in the same order (element i into partial sum i % 8), so the level changes no bit.
// Compiled for the baseline alone (four lanes), with the argmax searched one id at a time, a
// greedy token took 310 us over a 128,256-id vocabulary.

constexpr size_t kLanes = 8;

// Sixteen lanes in GCC's vector extensions, which every level compiles to its own registers (four
// SSE, two AVX2 or one AVX-512): the compiler's vectorizer left the maximum and the argmax search
// one element at a time.
using F16 = float __attribute__((vector_size(64)));
using I16 = int32_t __attribute__((vector_size(64)));
constexpr size_t kWide = 16;
// The helpers below pass these by value, always inlined: GCC's note that a 64-byte vector
// argument's ABI depends on AVX-512 (clang's too) concerns calls that never happen.
#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

LLMC_ISA_INLINE F16 loadWide(const float* p) {
  F16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <typename V, typename T>
LLMC_ISA_INLINE V splat(T value) {
  V v;
  for (size_t lane = 0; lane < kWide; ++lane) v[lane] = value;
  return v;
}
// a where the mask is set, b elsewhere (masks are all ones or zeros per lane).
LLMC_ISA_INLINE F16 select(I16 mask, F16 a, F16 b) {
  return reinterpret_cast<F16>((reinterpret_cast<I16>(a) & mask) |
                               (reinterpret_cast<I16>(b) & ~mask));
}
LLMC_ISA_INLINE bool anyLane(I16 mask) {
  uint64_t words[8];
  std::memcpy(words, &mask, sizeof words);
  return ((words[0] | words[1]) | (words[2] | words[3]) | (words[4] | words[5]) |
          (words[6] | words[7])) != 0;
}
// Σ v in double, element i into partial sum i % 8, the partial sums added in a fixed order.
LLMC_ISA_INLINE double laneSum(const float* v, size_t n) {
  double partial[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (size_t lane = 0; lane < kLanes; ++lane) partial[lane] += static_cast<double>(v[i + lane]);
  for (; i < n; ++i) partial[i % kLanes] += static_cast<double>(v[i]);
  return ((partial[0] + partial[1]) + (partial[2] + partial[3])) +
         ((partial[4] + partial[5]) + (partial[6] + partial[7]));
}

// Copies the logits; nonzero if any is NaN or +inf (the index is found after, off the hot path).
LLMC_ISA_INLINE int32_t copyCheckedLoop(const float* in, float* out, size_t n) {
  int32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    out[i] = in[i];
    bad |= in[i] < kInf ? 0 : 1;
  }
  return bad;
}

struct Weighed {
  float max_logit = -kInf;
  size_t argmax = 0;  // the maximum's first index; n when every value is NaN
  double total = 0;   // Σ w, where max_logit is finite
};

// The maximum with ties to the lowest index: the exact maximum first (in lanes, a NaN passed
// over), then its first index, sixteen ids a step. Where it is finite, x = (x - max) / t (every
// value <= 0, the maximum 0) and w = exp(x) by expNonPositive, and Σ w in double.
LLMC_ISA_INLINE Weighed weighLoop(float* x, float* w, size_t n, float temperature) {
  Weighed out;
  F16 wide_max = splat<F16>(-kInf);
  size_t at = 0;
  for (; at + kWide <= n; at += kWide) {
    const F16 v = loadWide(x + at);
    wide_max = select(v > wide_max, v, wide_max);
  }
  for (size_t lane = 0; lane < kWide; ++lane)
    out.max_logit = wide_max[lane] > out.max_logit ? wide_max[lane] : out.max_logit;
  for (; at < n; ++at) out.max_logit = x[at] > out.max_logit ? x[at] : out.max_logit;
  const float max_logit = out.max_logit;
  const F16 wide_target = splat<F16>(max_logit);
  at = 0;
  for (; at + kWide <= n; at += kWide)
    if (anyLane(loadWide(x + at) == wide_target)) break;
  while (at < n && x[at] != max_logit) ++at;
  out.argmax = at;
  if (!(max_logit > -kInf && max_logit < kInf)) return out;
  for (size_t i = 0; i < n; ++i) {
    x[i] = (x[i] - max_logit) / temperature;
    w[i] = expNonPositive(x[i]);
  }
  out.total = laneSum(w, n);
  return out;
}

// The order truncation keeps a prefix of: x descending, then id ascending. Every processed
// logit is <= 0, so x descending is |x|'s bits ascending (-0 and +0 alike): the order is the
// 64-bit key (|x| bits, id) ascending.
LLMC_ISA_INLINE uint32_t magnitudeBits(float x) { return std::bit_cast<uint32_t>(x) & 0x7fffffffu; }
uint64_t orderKey(uint32_t magnitude, uint32_t id) {
  return (static_cast<uint64_t>(magnitude) << 32) | id;
}

// The draw's weight of id i: w if truncation kept it (its key at most `last`, w >= min_weight).
LLMC_ISA_INLINE float keptWeight(const float* x, const float* w, size_t i, const Truncation& kept) {
  const uint32_t m = magnitudeBits(x[i]);
  const uint32_t id = static_cast<uint32_t>(i);
  const bool in =
      ((m < kept.last_magnitude) | ((m == kept.last_magnitude) & (id <= kept.last_id))) &
      (w[i] >= kept.min_weight);
  return in ? w[i] : 0.0f;
}

// The draw's blocks: ids [b * kDrawBlock, (b + 1) * kDrawBlock).
constexpr size_t kDrawBlock = 256;

// Σ of the kept weights of each block (element i into partial i % 8, added in order).
LLMC_ISA_INLINE void keptBlockSumsLoop(const float* x, const float* w, size_t n,
                                       const Truncation& kept, double* sums) {
  for (size_t block = 0; block * kDrawBlock < n; ++block) {
    const size_t begin = block * kDrawBlock, end = std::min(n, begin + kDrawBlock);
    float kept_weights[kDrawBlock];
    for (size_t i = begin; i < end; ++i) kept_weights[i - begin] = keptWeight(x, w, i, kept);
    sums[block] = laneSum(kept_weights, end - begin);
  }
}

int32_t copyCheckedBase(const float* in, float* out, size_t n) {
  return copyCheckedLoop(in, out, n);
}
Weighed weighBase(float* x, float* w, size_t n, float t) { return weighLoop(x, w, n, t); }
void keptBlockSumsBase(const float* x, const float* w, size_t n, const Truncation& kept,
                       double* sums) {
  keptBlockSumsLoop(x, w, n, kept, sums);
}
#if defined(__x86_64__) && defined(__GNUC__)
LLMC_TARGET_AVX2 int32_t copyCheckedAvx2(const float* in, float* out, size_t n) {
  return copyCheckedLoop(in, out, n);
}
LLMC_TARGET_AVX2 Weighed weighAvx2(float* x, float* w, size_t n, float t) {
  return weighLoop(x, w, n, t);
}
LLMC_TARGET_AVX2 void keptBlockSumsAvx2(const float* x, const float* w, size_t n,
                                        const Truncation& kept, double* sums) {
  keptBlockSumsLoop(x, w, n, kept, sums);
}
LLMC_TARGET_AVX512_WIDE int32_t copyCheckedAvx512(const float* in, float* out, size_t n) {
  return copyCheckedLoop(in, out, n);
}
LLMC_TARGET_AVX512_WIDE Weighed weighAvx512(float* x, float* w, size_t n, float t) {
  return weighLoop(x, w, n, t);
}
LLMC_TARGET_AVX512_WIDE void keptBlockSumsAvx512(const float* x, const float* w, size_t n,
                                                 const Truncation& kept, double* sums) {
  keptBlockSumsLoop(x, w, n, kept, sums);
}
#endif

// The passes at one ISA level.
struct Passes {
  int32_t (*copy_checked)(const float* in, float* out, size_t n);
  Weighed (*weigh)(float* x, float* w, size_t n, float temperature);
  void (*kept_block_sums)(const float* x, const float* w, size_t n, const Truncation& kept,
                          double* sums);
};

// The passes of the level cpuIsa() chose.
const Passes& passes() {
  static constexpr Passes base = {copyCheckedBase, weighBase, keptBlockSumsBase};
#if defined(__x86_64__) && defined(__GNUC__)
  static constexpr Passes avx2 = {copyCheckedAvx2, weighAvx2, keptBlockSumsAvx2};
  static constexpr Passes avx512 = {copyCheckedAvx512, weighAvx512, keptBlockSumsAvx512};
  if (cpuIsa() >= CpuIsa::kAvx512) return avx512;
  if (cpuIsa() >= CpuIsa::kAvx2) return avx2;
#endif
  return base;
}

// ---- Truncation without sorting the vocabulary. The kept prefix's end is found by a radix
// walk over the keys: counts and weights per bin of |x|'s top 12 bits over every id (bins in
// key order), the bin where the running count reaches k (top-k) or the running mass reaches the
// target (top-p); that bin's ids gathered (in id order) and binned by the next 12 bits, then by
// the last 7; a few hundred ids or fewer are sorted by key instead, and the ids that share all
// 31 bits are in id order already. The mass before an id is that sum of bins, sub-bins and then
// the ids one at a time, in that fixed order: the sorted prefix sum up to rounding. Sorting a
// 128,256-id vocabulary in chunks took 2.4-17 ms a token for top-p 0.95 (peaked to flat
// distributions) and 2 ms for top-k 50.

// The bits of |x| each level bins by: the top 12, the next 12, the last 7.
constexpr int kLevelShift[] = {19, 7, 0};
constexpr uint32_t kLevelBins[] = {4096, 4096, 128};
constexpr int kLevels = 3;
// A bin's ids are sorted by key from this many down instead of binned again.
constexpr size_t kSortDirectly = 512;

size_t levelBin(uint32_t magnitude, int level) {
  return (magnitude >> kLevelShift[level]) & (kLevelBins[level] - 1);
}

struct Item {
  uint64_t key;
  float w;
};

struct Scratch {
  std::vector<float> weights;      // [vocab] exp(x) of this token's processed logits
  std::vector<double> block_sums;  // the draw's, per kDrawBlock ids
  std::vector<int64_t> counts;     // per bin of one level
  std::vector<double> masses;
  std::vector<Item> items[kLevels];  // the ids of the bin each level reached
  std::vector<uint64_t> best;        // bestKeys' heap: top-k's (up to kHeapTopK), top_logprobs'
};
// The calling thread's, for any sampler it runs: nothing in it outlives one sample() call.
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// What a walk is after: the id at which the running count reaches `need` (by_mass false) or
// the running mass reaches `target`; `count` and `mass` are what came before.
struct Walk {
  bool by_mass = false;
  int64_t need = 0;
  double target = 0;
  int64_t count = 0;
  double mass = 0;
};

// The first of `bins` bins where the walk's goal is reached, adding the bins before it to the
// walk; `bins` when they end short of it (a mass's rounding, or fewer ids than wanted).
size_t reachBin(Walk* walk, const Scratch& s, size_t bins) {
  for (size_t b = 0; b < bins; ++b) {
    if (s.counts[b] == 0) continue;
    const bool reached = walk->by_mass ? walk->mass + s.masses[b] >= walk->target
                                       : walk->count + s.counts[b] >= walk->need;
    if (reached) return b;
    walk->count += s.counts[b];
    walk->mass += s.masses[b];
  }
  return bins;
}

// Walks `items` in key order (sorting them first where `sort`) to the key at which the goal is
// reached; the last key when they end short.
uint64_t walkInOrder(Walk* walk, std::vector<Item>* items, bool sort) {
  if (sort)
    std::sort(items->begin(), items->end(),
              [](const Item& a, const Item& b) { return a.key < b.key; });
  for (const Item& item : *items) {
    ++walk->count;
    walk->mass += static_cast<double>(item.w);
    if (walk->by_mass ? walk->mass >= walk->target : walk->count >= walk->need) return item.key;
  }
  return items->back().key;
}

// Levels 1 and 2, over the ids (in id order) of the bin the level before reached.
uint64_t walkLevel(Walk* walk, int level, Scratch& s) {
  std::vector<Item>& items = s.items[level - 1];
  if (items.size() <= kSortDirectly) return walkInOrder(walk, &items, true);
  if (level == kLevels) return walkInOrder(walk, &items, false);  // all of |x| alike
  const size_t bins = kLevelBins[level];
  std::fill(s.counts.begin(), s.counts.begin() + static_cast<std::ptrdiff_t>(bins), 0);
  std::fill(s.masses.begin(), s.masses.begin() + static_cast<std::ptrdiff_t>(bins), 0.0);
  for (const Item& item : items) {
    const size_t b = levelBin(static_cast<uint32_t>(item.key >> 32), level);
    ++s.counts[b];
    s.masses[b] += static_cast<double>(item.w);
  }
  const size_t reached = reachBin(walk, s, bins);
  if (reached == bins) {  // short by rounding: the bin's last key
    uint64_t last = 0;
    for (const Item& item : items) last = std::max(last, item.key);
    return last;
  }
  std::vector<Item>& next = s.items[level];
  next.clear();
  for (const Item& item : items)
    if (levelBin(static_cast<uint32_t>(item.key >> 32), level) == reached) next.push_back(item);
  return walkLevel(walk, level + 1, s);
}

// The last key of the kept prefix of the ids whose key is at most `limit` and whose x is
// neither -inf nor NaN: the first `need` of them, or (by mass, `target` a fraction of their
// total) the shortest prefix whose mass reaches the target. `limit` when that takes them all.
uint64_t prefixEnd(const float* x, const float* w, size_t n, uint64_t limit, Walk walk,
                   Scratch& s) {
  const size_t bins = kLevelBins[0];
  auto kept = [&](size_t i, uint32_t magnitude) {
    return x[i] > -kInf && orderKey(magnitude, static_cast<uint32_t>(i)) <= limit;
  };
  s.counts.assign(bins, 0);
  s.masses.assign(bins, 0.0);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t m = magnitudeBits(x[i]);
    if (!kept(i, m)) continue;
    ++s.counts[levelBin(m, 0)];
    s.masses[levelBin(m, 0)] += static_cast<double>(w[i]);
  }
  if (walk.by_mass) {
    double total = 0;
    for (size_t b = 0; b < bins; ++b) total += s.masses[b];
    walk.target *= total;
  }
  const size_t reached = reachBin(&walk, s, bins);
  if (reached == bins) return limit;
  std::vector<Item>& items = s.items[0];
  items.clear();
  for (size_t i = 0; i < n; ++i) {
    const uint32_t m = magnitudeBits(x[i]);
    if (levelBin(m, 0) == reached && kept(i, m))
      items.push_back({orderKey(m, static_cast<uint32_t>(i)), w[i]});
  }
  return walkLevel(&walk, 1, s);
}

// The keys of the `count` best ids (x descending, then id ascending; -inf and NaN after every
// finite x), best first: one pass that keeps the best so far in a heap, its worst on top, and
// passes over sixteen ids at once when none of their |x| is below the worst's (an equal |x| with
// a later id is worse), as nearly all are once the heap is full. A partial sort of every id took
// 270 us a token over 128,256 ids.
void bestKeys(const float* x, size_t n, size_t count, std::vector<uint64_t>* best) {
  best->clear();
  auto consider = [&](size_t id) {
    const uint64_t key = orderKey(magnitudeBits(x[id]), static_cast<uint32_t>(id));
    if (best->size() < count) {
      best->push_back(key);
      std::push_heap(best->begin(), best->end());
    } else if (key < best->front()) {
      std::pop_heap(best->begin(), best->end());
      best->back() = key;
      std::push_heap(best->begin(), best->end());
    }
  };
  size_t i = 0;
  for (; i + kWide <= n; i += kWide) {
    if (best->size() == count) {
      // Four lanes, which the baseline ISA compares in one instruction (sixteen it compared one
      // at a time); signed, as both sides are below 2^31.
      using I4 = int32_t __attribute__((vector_size(16)));
      const int32_t worst = static_cast<int32_t>(best->front() >> 32);
      const I4 worst4 = {worst, worst, worst, worst};
      I4 below = {};
      for (size_t quarter = 0; quarter < kWide; quarter += 4) {
        I4 bits;
        std::memcpy(&bits, x + i + quarter, sizeof bits);
        below |= (bits & 0x7fffffff) < worst4;
      }
      uint64_t words[2];
      std::memcpy(words, &below, sizeof words);
      if ((words[0] | words[1]) == 0) continue;
    }
    for (size_t lane = 0; lane < kWide; ++lane) consider(i + lane);
  }
  for (; i < n; ++i) consider(i);
  std::sort_heap(best->begin(), best->end());
}

// The largest top-k that bestKeys serves: over 128,256 ids a top-k of 50 took 270 us by the
// radix walk and takes about 35 by the heap.
constexpr int32_t kHeapTopK = 1024;

}  // namespace

Truncation truncation(const SamplingParams& params, std::span<const float> x,
                      std::span<const float> w) {
  Scratch& s = scratch();
  uint64_t limit = ~uint64_t{0};
  // A top-k of up to kHeapTopK takes bestKeys' heap (its k keys, best first, then also serve
  // top-p); larger ones the radix walk.
  const bool heap = params.top_k > 0 && params.top_k <= kHeapTopK;
  if (heap) {
    bestKeys(x.data(), x.size(), static_cast<size_t>(params.top_k), &s.best);
    if (s.best.size() == static_cast<size_t>(params.top_k)) limit = s.best.back();
  } else if (params.top_k > 0) {
    Walk walk;
    walk.need = params.top_k;
    limit = prefixEnd(x.data(), w.data(), x.size(), limit, walk, s);
  }
  // Top-p after the heap's top-k: over its keys, their mass in that order (a masked id, sorted
  // last, weighs 0). Alone, or after a larger top-k: the radix walk. (Top-p alone over a heap of
  // the 1,024 best first, the walk only where their mass fell short, took 330-400 us a token
  // over 16,000 ids against the walk's 60-100: a heap that large keeps taking ids.)
  if (params.top_p < 1 && heap) {
    auto weight = [&](uint64_t key) { return static_cast<double>(w[static_cast<uint32_t>(key)]); };
    double total = 0;
    for (uint64_t key : s.best) total += weight(key);
    const double target = (static_cast<double>(params.top_p) - kTopPSlack) * total;
    double cumulative = 0;
    for (uint64_t key : s.best) {
      cumulative += weight(key);
      limit = key;
      if (cumulative >= target) break;
    }
  } else if (params.top_p < 1) {
    Walk walk;
    walk.by_mass = true;
    walk.target = static_cast<double>(params.top_p) - kTopPSlack;
    limit = prefixEnd(x.data(), w.data(), x.size(), limit, walk, s);
  }
  Truncation kept;
  kept.last_magnitude = static_cast<uint32_t>(limit >> 32);
  kept.last_id = static_cast<uint32_t>(limit);
  kept.min_weight = params.min_p;
  return kept;
}

namespace {

// Entropy (nats) and log normalizer of softmax(logits); -inf logits carry no mass. The caller
// has checked that no logit is NaN or +inf.
struct ModelStatistics {
  double entropy = 0;
  float max_logit = 0;
  double log_normalizer = 0;  // of the logits shifted by max_logit
};
ModelStatistics modelStatistics(const std::vector<float>& logits) {
  float max_logit = -kInf;
  for (float logit : logits) max_logit = std::max(max_logit, logit);
  if (max_logit == -kInf) return {NAN, 0, NAN};  // every token masked: sample() refuses it below
  // H = log Z - sum(w * x) / Z over x = logit - max, w = exp(x), Z = sum(w).
  double normalizer = 0, weighted = 0;
  for (float logit : logits) {
    if (logit == -kInf) continue;
    const float shifted = logit - max_logit;  // -inf when the range passes FLT_MAX: no mass
    const double w = expWeight(shifted);
    if (w == 0) continue;
    normalizer += w;
    weighted += w * shifted;
  }
  const double log_z = std::log(normalizer);
  return {std::max(0.0, log_z - weighted / normalizer), max_logit, log_z};
}

std::string fieldError(const char* field, const std::string& what) {
  return std::string("sampling params: ") + field + " " + what;
}

}  // namespace

Xoshiro256::Xoshiro256(uint64_t seed) {
  uint64_t sm = seed;
  for (uint64_t& word : state_) word = splitmix64(&sm);
}

uint64_t Xoshiro256::next() {
  const uint64_t result = rotl(state_[1] * 5, 7) * 9;
  const uint64_t t = state_[1] << 17;
  state_[2] ^= state_[0];
  state_[3] ^= state_[1];
  state_[1] ^= state_[2];
  state_[0] ^= state_[3];
  state_[2] ^= t;
  state_[3] = rotl(state_[3], 45);
  return result;
}

double Xoshiro256::nextDouble() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

Status validate(const SamplingParams& params, int32_t vocab_size) {
  if (vocab_size <= 0) {
    return invalidArgument("sampling params: vocab size must be positive, got " +
                           std::to_string(vocab_size));
  }
  if (!std::isfinite(params.temperature) || params.temperature < 0) {
    return invalidArgument(fieldError(
        "temperature", "must be finite and >= 0, got " + std::to_string(params.temperature)));
  }
  if (params.top_k < 0) {
    return invalidArgument(
        fieldError("top_k", "must be >= 0 (0 = off), got " + std::to_string(params.top_k)));
  }
  if (!(params.top_p > 0 && params.top_p <= 1)) {
    return invalidArgument(
        fieldError("top_p", "must be in (0, 1], got " + std::to_string(params.top_p)));
  }
  if (!(params.min_p >= 0 && params.min_p <= 1)) {
    return invalidArgument(
        fieldError("min_p", "must be in [0, 1], got " + std::to_string(params.min_p)));
  }
  if (!std::isfinite(params.repetition_penalty) || params.repetition_penalty <= 0) {
    return invalidArgument(
        fieldError("repetition_penalty",
                   "must be finite and > 0, got " + std::to_string(params.repetition_penalty)));
  }
  if (!std::isfinite(params.presence_penalty)) {
    return invalidArgument(fieldError("presence_penalty", "must be finite"));
  }
  if (!std::isfinite(params.frequency_penalty)) {
    return invalidArgument(fieldError("frequency_penalty", "must be finite"));
  }
  for (size_t i = 0; i < params.logit_bias.size(); ++i) {
    const auto& [id, bias] = params.logit_bias[i];
    if (id < 0 || id >= vocab_size) {
      return invalidArgument(fieldError("logit_bias", "entry " + std::to_string(i) + ": token id " +
                                                          std::to_string(id) + " is outside [0, " +
                                                          std::to_string(vocab_size) + ")"));
    }
    if (std::isnan(bias) || bias == kInf) {
      return invalidArgument(fieldError(
          "logit_bias", "entry " + std::to_string(i) + " (token " + std::to_string(id) +
                            "): bias must be finite or -inf, got " + std::to_string(bias)));
    }
  }
  if (params.model_statistics_tokens < -1) {
    return invalidArgument(
        fieldError("model_statistics_tokens",
                   "must be >= -1, got " + std::to_string(params.model_statistics_tokens)));
  }
  if (params.num_logprobs < 0 || params.num_logprobs > vocab_size) {
    return invalidArgument(fieldError("num_logprobs", "must be in [0, " +
                                                          std::to_string(vocab_size) + "], got " +
                                                          std::to_string(params.num_logprobs)));
  }
  return okStatus();
}

Sampler::Sampler(const SamplingParams& params, int32_t vocab_size)
    : params_(params),
      vocab_size_(vocab_size),
      rng_(params.seed),
      output_counts_(static_cast<size_t>(vocab_size), 0),
      seen_(static_cast<size_t>(vocab_size), 0),
      processed_(static_cast<size_t>(vocab_size)) {}

Status undecodableIds(const Tokenizer* tokenizer, int64_t vocab,
                      std::shared_ptr<const std::vector<int32_t>>* out) {
  out->reset();
  if (!tokenizer || vocab <= 0) return okStatus();
  auto ids = std::make_shared<std::vector<int32_t>>();
  LLMC_RETURN_IF_ERROR(tokenizer->unknownIds(static_cast<int32_t>(vocab), ids.get()));
  if (static_cast<int64_t>(ids->size()) == vocab)
    return invalidArgument("the tokenizer decodes none of the model's " + std::to_string(vocab) +
                           " token ids");
  if (!ids->empty()) *out = std::move(ids);
  return okStatus();
}

Status Sampler::create(const SamplingParams& params, int32_t vocab_size,
                       std::span<const int32_t> prompt_tokens, std::unique_ptr<Sampler>* out,
                       std::shared_ptr<const std::vector<int32_t>> excluded) {
  if (out == nullptr) return invalidArgument("Sampler::create: null output pointer");
  LLMC_RETURN_IF_ERROR(validate(params, vocab_size));
  if (excluded)
    for (int32_t id : *excluded)
      if (id < 0 || id >= vocab_size)
        return invalidArgument("Sampler::create: excluded id " + std::to_string(id) +
                               " is outside [0, " + std::to_string(vocab_size) + ")");
  for (size_t i = 0; i < prompt_tokens.size(); ++i) {
    if (prompt_tokens[i] < 0 || prompt_tokens[i] >= vocab_size) {
      return invalidArgument("Sampler::create: prompt token " + std::to_string(i) + " is id " +
                             std::to_string(prompt_tokens[i]) + ", outside [0, " +
                             std::to_string(vocab_size) + ")");
    }
  }
  std::unique_ptr<Sampler> sampler(new Sampler(params, vocab_size));
  if (excluded && !excluded->empty()) sampler->excluded_ = std::move(excluded);
  for (int32_t id : prompt_tokens) {
    if (!sampler->seen_[static_cast<size_t>(id)]) {
      sampler->seen_[static_cast<size_t>(id)] = 1;
      sampler->seen_ids_.push_back(id);
    }
  }
  *out = std::move(sampler);
  return okStatus();
}

void Sampler::applyBiasAndPenalties() {
  for (const auto& [id, bias] : params_.logit_bias) processed_[static_cast<size_t>(id)] += bias;
  if (excluded_)
    for (int32_t id : *excluded_) processed_[static_cast<size_t>(id)] = -kInf;

  const float repetition = params_.repetition_penalty;
  const float presence = params_.presence_penalty;
  const float frequency = params_.frequency_penalty;
  if (repetition == 1 && presence == 0 && frequency == 0) return;
  for (int32_t id : seen_ids_) {
    float& logit = processed_[static_cast<size_t>(id)];
    if (repetition != 1) logit = logit > 0 ? logit / repetition : logit * repetition;
    const int32_t count = output_counts_[static_cast<size_t>(id)];
    if (count > 0) logit -= presence + static_cast<float>(count) * frequency;
  }
}

void Sampler::recordToken(int32_t id) {
  const size_t index = static_cast<size_t>(id);
  ++output_counts_[index];
  if (!seen_[index]) {
    seen_[index] = 1;
    seen_ids_.push_back(id);
  }
}

Status Sampler::sample(std::span<const float> logits, SampledToken* out) {
  if (out == nullptr) return invalidArgument("Sampler::sample: null output pointer");
  if (logits.size() != static_cast<size_t>(vocab_size_)) {
    return invalidArgument("Sampler::sample: got " + std::to_string(logits.size()) +
                           " logits for a vocab of " + std::to_string(vocab_size_));
  }
  const size_t vocab = logits.size();
  const Passes& level = passes();
  if (level.copy_checked(logits.data(), processed_.data(), vocab))
    for (size_t i = 0; i < vocab; ++i)
      if (!(logits[i] < kInf))
        return invalidArgument("Sampler::sample: logit at index " + std::to_string(i) + " is " +
                               (std::isnan(logits[i]) ? "NaN" : "+inf"));
  // The raw distribution's statistics, before anything below changes processed_.
  const int32_t wanted = params_.model_statistics_tokens;
  const bool statistics = wanted == -1 || sampled_ < wanted;
  const ModelStatistics raw = statistics ? modelStatistics(processed_) : ModelStatistics{};

  applyBiasAndPenalties();

  // The maximum with ties to the lowest id (the greedy answer, and the shift for exp(): exp()
  // cannot overflow, and (x - max) / T cannot reach +inf), then temperature and the weights
  // exp(x). Log-softmax is unchanged by the shift.
  const bool greedy = params_.temperature == 0;
  Scratch& s = scratch();
  if (s.weights.size() < vocab) s.weights.resize(vocab);
  const float* x = processed_.data();
  const float* w = s.weights.data();
  const Weighed weighed =
      level.weigh(processed_.data(), s.weights.data(), vocab, greedy ? 1.0f : params_.temperature);
  const size_t argmax = weighed.argmax < vocab ? weighed.argmax : 0;  // nothing but NaN: masked
  if (weighed.max_logit == kInf) {
    return invalidArgument("Sampler::sample: logit at index " + std::to_string(argmax) +
                           " overflowed to +inf after logit bias and penalties");
  }
  if (weighed.max_logit == -kInf) {
    return invalidArgument(
        "Sampler::sample: every token is masked (all logits are -inf after logit bias, "
        "penalties and the ids the tokenizer cannot decode)");
  }
  const double log_normalizer = std::log(weighed.total);
  auto logprobOf = [&](size_t id) {
    return static_cast<float>(static_cast<double>(processed_[id]) - log_normalizer);
  };

  size_t chosen = argmax;
  if (!greedy) {
    // Steps 5-7, then the draw over the kept ids in id order: the blocks' sums first, then
    // one block's ids. The argmax is always kept (weight 1), so the total is >= 1.
    const Truncation kept = truncation(params_, {x, vocab}, {w, vocab});
    const size_t blocks = (vocab + kDrawBlock - 1) / kDrawBlock;
    if (s.block_sums.size() < blocks) s.block_sums.resize(blocks);
    level.kept_block_sums(x, w, vocab, kept, s.block_sums.data());
    double total = 0;
    for (size_t b = 0; b < blocks; ++b) total += s.block_sums[b];
    const double threshold = rng_.nextDouble() * total;
    double cumulative = 0;
    size_t block = 0;
    while (block < blocks && !(threshold < cumulative + s.block_sums[block]))
      cumulative += s.block_sums[block++];
    // Past the end only when rounding makes the threshold the total: the last kept id.
    const size_t begin = block < blocks ? block * kDrawBlock : 0;
    const size_t end = block < blocks ? std::min(vocab, begin + kDrawBlock) : vocab;
    for (size_t i = begin; i < end; ++i) {
      const float weight = keptWeight(x, w, i, kept);
      if (weight == 0) continue;
      chosen = i;
      cumulative += static_cast<double>(weight);
      if (threshold < cumulative && block < blocks) break;
    }
  }

  out->id = static_cast<int32_t>(chosen);
  out->logprob = logprobOf(chosen);
  out->entropy = statistics ? static_cast<float>(raw.entropy) : NAN;
  out->model_logprob =
      statistics ? static_cast<float>(static_cast<double>(logits[chosen] - raw.max_logit) -
                                      raw.log_normalizer)
                 : NAN;
  ++sampled_;
  out->top_logprobs.clear();
  if (params_.num_logprobs > 0) {
    bestKeys(x, vocab, static_cast<size_t>(params_.num_logprobs), &s.best);
    out->top_logprobs.reserve(s.best.size());
    for (uint64_t key : s.best) {
      const uint32_t id = static_cast<uint32_t>(key);
      out->top_logprobs.emplace_back(static_cast<int32_t>(id), logprobOf(id));
    }
  }

  recordToken(out->id);
  return okStatus();
}

}  // namespace llmc
