// This CPU's float32 FMA peak per core (a loop of independent fused multiply-adds, AVX2 and
// AVX-512) and packedGemm's throughput at each ISA level on prefill-sized products, one thread:
// the "share of peak" figures of docs/performance.md; then prefill's integer products (int8
// weights with int16 activations, and w8a8) at each integer level, in G multiply-adds/s; then
// decode's int8 product (one row of activations) over a dense weight and over the same weight
// pruned and stored sparse (core/sparse.h), and over a dense int4 weight, from cache and from
// memory: ns per 64 weights and the weight bytes read per second (docs/pruning.md, Speed). First
// of all, the rate at which one thread and all of the session's default threads read memory: the
// roofline that decode's bytes per token are set against (docs/performance.md); and next to it
// the rate at which decode's attention reads a long paged cache in each stored format.
//
//   build/bench/llmc_kernel_bench [--rounds N]
//
// Prints the CPU and its flags first; each figure is the median of N rounds [min, max].
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/cpu_features.h"
#include "core/quant.h"
#include "core/sparse.h"
#include "core/thread_pool.h"
#include "cpu/attend.h"
#include "cpu/gemm.h"
#include "cpu/quant_dot.h"
#include "llm/kv_cache.h"

namespace {

using Clock = std::chrono::steady_clock;

// Twelve independent accumulators: more than FMA latency x units, so the loop is throughput
// bound. Returns GFLOP/s (2 per lane per FMA).
__attribute__((target("avx2,fma"))) double peakAvx2(long iterations) {
  // Distinct starting values: equal chains would be merged into one by the compiler.
  __m256 c0 = _mm256_set1_ps(1), c1 = _mm256_set1_ps(2), c2 = _mm256_set1_ps(3),
         c3 = _mm256_set1_ps(4), c4 = _mm256_set1_ps(5), c5 = _mm256_set1_ps(6),
         c6 = _mm256_set1_ps(7), c7 = _mm256_set1_ps(8), c8 = _mm256_set1_ps(9),
         c9 = _mm256_set1_ps(10), c10 = _mm256_set1_ps(11), c11 = _mm256_set1_ps(12);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  const auto start = Clock::now();
  for (long i = 0; i < iterations; ++i) {
    c0 = _mm256_fmadd_ps(c0, a, b), c1 = _mm256_fmadd_ps(c1, a, b), c2 = _mm256_fmadd_ps(c2, a, b);
    c3 = _mm256_fmadd_ps(c3, a, b), c4 = _mm256_fmadd_ps(c4, a, b), c5 = _mm256_fmadd_ps(c5, a, b);
    c6 = _mm256_fmadd_ps(c6, a, b), c7 = _mm256_fmadd_ps(c7, a, b), c8 = _mm256_fmadd_ps(c8, a, b);
    c9 = _mm256_fmadd_ps(c9, a, b), c10 = _mm256_fmadd_ps(c10, a, b),
    c11 = _mm256_fmadd_ps(c11, a, b);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  float sink[8];
  _mm256_storeu_ps(
      sink,
      _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(c0, c1), _mm256_add_ps(c2, c3)),
                    _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(c4, c5), _mm256_add_ps(c6, c7)),
                                  _mm256_add_ps(_mm256_add_ps(c8, c9), _mm256_add_ps(c10, c11)))));
  if (sink[0] == 42.0f) std::puts("");
  return static_cast<double>(iterations) * 12 * 16 / seconds / 1e9;
}

__attribute__((target("avx512f"))) double peakAvx512(long iterations) {
  __m512 c0 = _mm512_set1_ps(1), c1 = _mm512_set1_ps(2), c2 = _mm512_set1_ps(3),
         c3 = _mm512_set1_ps(4), c4 = _mm512_set1_ps(5), c5 = _mm512_set1_ps(6),
         c6 = _mm512_set1_ps(7), c7 = _mm512_set1_ps(8), c8 = _mm512_set1_ps(9),
         c9 = _mm512_set1_ps(10), c10 = _mm512_set1_ps(11), c11 = _mm512_set1_ps(12);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  const auto start = Clock::now();
  for (long i = 0; i < iterations; ++i) {
    c0 = _mm512_fmadd_ps(c0, a, b), c1 = _mm512_fmadd_ps(c1, a, b), c2 = _mm512_fmadd_ps(c2, a, b);
    c3 = _mm512_fmadd_ps(c3, a, b), c4 = _mm512_fmadd_ps(c4, a, b), c5 = _mm512_fmadd_ps(c5, a, b);
    c6 = _mm512_fmadd_ps(c6, a, b), c7 = _mm512_fmadd_ps(c7, a, b), c8 = _mm512_fmadd_ps(c8, a, b);
    c9 = _mm512_fmadd_ps(c9, a, b), c10 = _mm512_fmadd_ps(c10, a, b),
    c11 = _mm512_fmadd_ps(c11, a, b);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const __m512 all =
      _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c0, c1), _mm512_add_ps(c2, c3)),
                                  _mm512_add_ps(_mm512_add_ps(c4, c5), _mm512_add_ps(c6, c7))),
                    _mm512_add_ps(_mm512_add_ps(c8, c9), _mm512_add_ps(c10, c11)));
  float sink[16];
  _mm512_storeu_ps(sink, all);
  if (sink[0] == 42.0f) std::puts("");
  return static_cast<double>(iterations) * 12 * 32 / seconds / 1e9;
}

struct Stat {
  double median, low, high;
};
Stat summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

// One buffer's 64-bit words summed with the widest loads the CPU has: the compiler's own 16-byte
// vectorization of the same sum read 9.1-10.3 GB/s on one core of the Sapphire Rapids guest of
// 2026-12-06, these 64-byte loads 15.2-15.5.
__attribute__((target("avx2"))) uint64_t sumWordsAvx2(const uint64_t* words, size_t count) {
  __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
  for (size_t i = 0; i < count; i += 16) {
    s0 = _mm256_add_epi64(s0, _mm256_load_si256(reinterpret_cast<const __m256i*>(words + i)));
    s1 = _mm256_add_epi64(s1, _mm256_load_si256(reinterpret_cast<const __m256i*>(words + i + 4)));
    s2 = _mm256_add_epi64(s2, _mm256_load_si256(reinterpret_cast<const __m256i*>(words + i + 8)));
    s3 = _mm256_add_epi64(s3, _mm256_load_si256(reinterpret_cast<const __m256i*>(words + i + 12)));
  }
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                     _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3)));
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}
__attribute__((target("avx512f"))) uint64_t sumWordsAvx512(const uint64_t* words, size_t count) {
  __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
  for (size_t i = 0; i < count; i += 32) {
    s0 = _mm512_add_epi64(s0, _mm512_load_si512(words + i));
    s1 = _mm512_add_epi64(s1, _mm512_load_si512(words + i + 8));
    s2 = _mm512_add_epi64(s2, _mm512_load_si512(words + i + 16));
    s3 = _mm512_add_epi64(s3, _mm512_load_si512(words + i + 24));
  }
  alignas(64) uint64_t lanes[8];
  _mm512_store_si512(lanes, _mm512_add_epi64(_mm512_add_epi64(s0, s1), _mm512_add_epi64(s2, s3)));
  uint64_t total = 0;
  for (const uint64_t lane : lanes) total += lane;
  return total;
}

// GB/s read by `threads` threads, each summing its own buffer of ones (1 GiB over all of them,
// at least 64 MiB each: far past any cache; Tensor storage is 64-byte aligned); the clock covers
// starting the threads to joining them.
double memoryReadRate(int threads, bool avx512, std::vector<llmc::Tensor>* buffers) {
  const int64_t count = std::max<int64_t>(int64_t{1} << 23, (int64_t{1} << 27) / threads / 32 * 32);
  if (buffers->size() != static_cast<size_t>(threads) || (*buffers)[0].numElements() != count) {
    buffers->clear();
    for (int t = 0; t < threads; ++t) {
      buffers->push_back(llmc::Tensor::allocate(llmc::DType::kInt64, {count}));
      std::fill_n(buffers->back().data<int64_t>(), count, int64_t{1});
    }
  }
  std::vector<uint64_t> sums(static_cast<size_t>(threads));
  const auto start = Clock::now();
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&, t] {
      const auto* words =
          reinterpret_cast<const uint64_t*>((*buffers)[static_cast<size_t>(t)].data<int64_t>());
      sums[static_cast<size_t>(t)] = avx512 ? sumWordsAvx512(words, static_cast<size_t>(count))
                                            : sumWordsAvx2(words, static_cast<size_t>(count));
    });
  for (std::thread& worker : workers) worker.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  for (const uint64_t sum : sums)
    if (sum != static_cast<uint64_t>(count)) std::abort();  // every word read once
  return static_cast<double>(threads) * static_cast<double>(count) * sizeof(uint64_t) / seconds /
         1e9;
}

// Decode's attention over a paged cache as the 110M Llama's step reads it (12 layers, 12 KV
// heads of 64, blocks of 16 positions, one query per head over `positions` of them): every layer's
// heads split across `pool`'s threads, one attendChunk call per head, or (`together`) one
// attendHeads call per thread's share of the heads, as the runtime's decode step makes them.
// Returns GB/s of the cache's stored bytes (K, V and the 8-bit formats' scales) read per second.
double decodeAttentionRate(llmc::ThreadPool* pool, const llmc::KvCache& cache,
                           std::span<const int32_t> table, int64_t positions,
                           const std::vector<float>& queries, std::vector<float>* out,
                           bool together) {
  using namespace llmc;
  const KvCacheSpec& spec = cache.spec();
  const int64_t heads = spec.num_kv_heads, dim = spec.head_dim, block = spec.block_size;
  const int64_t element = static_cast<int64_t>(dtypeSize(spec.dtype));
  const int64_t blocks = (positions + block - 1) / block;
  const int64_t per_task = together ? (heads + pool->threads() - 1) / pool->threads() : 1;
  const auto start = Clock::now();
  for (int32_t layer = 0; layer < spec.num_layers; ++layer)
    parallelFor(pool, (heads + per_task - 1) / per_task, [&](int64_t task) {
      const int64_t h0 = task * per_task, h1 = std::min(heads, h0 + per_task);
      std::vector<const void*> pointers(static_cast<size_t>(2 * (h1 - h0) * blocks));
      std::vector<KvRows> rows;
      std::vector<const float*> q;
      std::vector<float*> o;
      for (int64_t h = h0; h < h1; ++h) {
        const void** keys = &pointers[static_cast<size_t>(2 * (h - h0) * blocks)];
        const void** values = keys + blocks;
        for (int64_t b = 0; b < blocks; ++b) {
          const int32_t id = table[static_cast<size_t>(b)];
          keys[b] = static_cast<const char*>(cache.keyData(id, layer)) + h * block * dim * element;
          values[b] =
              static_cast<const char*>(cache.valueData(id, layer)) + h * block * dim * element;
        }
        rows.push_back(KvRows{keys, values, block, dim});
        if (spec.dtype != DType::kFloat32) {
          rows.back().dtype = spec.dtype;
          rows.back().scale_offset = spec.kvScaleOffset() + h * block * (4 - dim * element);
        }
        q.push_back(queries.data() + (layer * heads + h) * dim);
        o.push_back(out->data() + (layer * heads + h) * dim);
      }
      thread_local std::vector<float> scores;
      if (together)
        attendHeads(q.data(), positions, h1 - h0, dim, 0.125f, rows.data(), o.data(), scores);
      else
        attendChunk(q.data(), &positions, 1, dim, 0.125f, rows[0], o.data(), scores);
    });
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const double bytes =
      static_cast<double>(spec.num_layers) * 2 * static_cast<double>(positions) *
      static_cast<double>(heads) *
      static_cast<double>(dim * element + (isQuantizedKvDType(spec.dtype) ? 4 : 0));
  return bytes / seconds / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 7;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
      rounds = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: llmc_kernel_bench [--rounds N]\n");
      return 2;
    }
  }
  using namespace llmc;
  std::printf("cpu: %s\n", cpuSummary().c_str());
  const CpuIsa supported = cpuIsaSupported();
  std::vector<CpuIsa> levels;
  if (supported >= CpuIsa::kAvx2) levels.push_back(CpuIsa::kAvx2);
  if (supported >= CpuIsa::kAvx512) levels.push_back(CpuIsa::kAvx512);
  if (levels.empty()) {
    std::printf("no AVX2: only the scalar kernels run here\n");
    return 0;
  }
  {
    const bool avx512 = supported >= CpuIsa::kAvx512;
    std::printf("\n| threads | memory read (GB/s) |\n|---|---|\n");
    std::vector<Tensor> buffers;
    std::vector<int> counts = {1};
    if (defaultThreadCount() > 1) counts.push_back(defaultThreadCount());
    for (const int threads : counts) {
      std::vector<double> runs;
      memoryReadRate(threads, avx512, &buffers);  // a first pass unmeasured
      for (int r = 0; r < rounds; ++r) runs.push_back(memoryReadRate(threads, avx512, &buffers));
      const Stat s = summarize(runs);
      std::printf("| %d | %.1f [%.1f, %.1f] |\n", threads, s.median, s.low, s.high);
    }
  }
  {
    // The cache filled with random values: floats of magnitude [0.5, 1) (no subnormal, which
    // some cores take a slow path for) and int8 codes of every value, scales 0.01.
    std::printf(
        "\n| KV cache | positions | threads | walk | decode attention, cache read (GB/s) |\n"
        "|---|---|---|---|---|\n");
    constexpr int64_t kPositions = 2048;
    for (const DType dtype : {DType::kFloat32, DType::kFloat16, DType::kInt8}) {
      KvCacheSpec spec;
      spec.num_layers = 12;
      spec.num_kv_heads = 12;
      spec.head_dim = 64;
      spec.dtype = dtype;
      spec.num_blocks = kPositions / spec.block_size;
      std::unique_ptr<KvCache> cache;
      int64_t cached = 0;
      std::span<const int32_t> table;
      const std::vector<int32_t> tokens(kPositions, 1);
      if (!KvCache::create(spec, &cache).ok() || !cache->addSequence(0, tokens, &cached).ok() ||
          !cache->blockTable(0, &table).ok())
        std::abort();
      // Per 64-bit word: the sign and mantissa bits random, the exponent that of [0.5, 1).
      const uint64_t keep = dtype == DType::kFloat32   ? 0x807fffff807fffff
                            : dtype == DType::kFloat16 ? 0x83ff83ff83ff83ff
                                                       : ~uint64_t{0};
      const uint64_t set = dtype == DType::kFloat32   ? 0x3f0000003f000000
                           : dtype == DType::kFloat16 ? 0x3800380038003800
                                                      : 0;
      std::mt19937_64 words(3);
      auto* storage = static_cast<uint64_t*>(cache->storage());
      for (int64_t i = 0; i < cache->storageBytes() / 8; ++i) storage[i] = (words() & keep) | set;
      if (isQuantizedKvDType(dtype))
        for (int32_t b = 0; b < spec.num_blocks; ++b)
          for (int32_t layer = 0; layer < spec.num_layers; ++layer)
            for (void* codes : {cache->keyData(b, layer), cache->valueData(b, layer)}) {
              auto* scales =
                  reinterpret_cast<float*>(static_cast<uint8_t*>(codes) + spec.kvScaleOffset());
              std::fill_n(scales, spec.num_kv_heads * spec.block_size, 0.01f);
            }
      std::vector<float> queries(static_cast<size_t>(spec.num_layers * spec.num_kv_heads * 64)),
          out(queries.size());
      std::mt19937 rng(3);
      std::normal_distribution<float> normal;
      for (float& x : queries) x = normal(rng);
      std::vector<int> counts = {1};
      if (defaultThreadCount() > 1) counts.push_back(defaultThreadCount());
      for (const int threads : counts) {
        ThreadPool pool(threads);
        // The two walks alternated round by round: this VM's rate drifts within a run.
        const bool heads_walk = attendHeadsSupported(spec.head_dim, dtype);
        std::vector<double> runs[2];
        for (int r = -1; r < rounds; ++r)  // round -1 unmeasured
          for (int together = 0; together < (heads_walk ? 2 : 1); ++together) {
            const double rate =
                decodeAttentionRate(&pool, *cache, table, kPositions, queries, &out, together);
            if (r >= 0) runs[together].push_back(rate);
          }
        for (int together = 0; together < (heads_walk ? 2 : 1); ++together) {
          const Stat s = summarize(runs[together]);
          std::printf("| %s | %lld | %d | %s | %.1f [%.1f, %.1f] |\n", kvDTypeName(dtype),
                      static_cast<long long>(kPositions), threads,
                      together ? "heads together (attendHeads)" : "a head at a time (attendChunk)",
                      s.median, s.low, s.high);
        }
      }
    }
  }
  std::printf("\n| level | FMA peak, one core (GFLOP/s) |\n|---|---|\n");
  std::vector<double> peak(4, 0);
  for (CpuIsa level : levels) {
    std::vector<double> runs;
    for (int r = 0; r < rounds; ++r)
      runs.push_back(level == CpuIsa::kAvx2 ? peakAvx2(50000000) : peakAvx512(25000000));
    const Stat s = summarize(runs);
    peak[static_cast<size_t>(level)] = s.median;
    std::printf("| %s | %.1f [%.1f, %.1f] |\n", cpuIsaName(level), s.median, s.low, s.high);
  }
  std::printf(
      "\n| level | rows x K x N | packedGemm (GFLOP/s) | share of peak |\n|---|---|---|---|\n");
  struct Shape {
    int64_t rows, k, n;
  };
  for (const Shape& shape : {Shape{512, 768, 768}, Shape{512, 768, 2048}, Shape{512, 2048, 768},
                             Shape{2048, 768, 768}}) {
    std::vector<float> a(static_cast<size_t>(shape.rows * shape.k)),
        b(static_cast<size_t>(shape.k * shape.n)), c(static_cast<size_t>(shape.rows * shape.n));
    std::mt19937 rng(1);
    std::normal_distribution<float> normal;
    for (float& x : a) x = normal(rng);
    for (float& x : b) x = normal(rng);
    for (CpuIsa level : levels) {
      setCpuIsaCapForTesting(level);
      std::vector<double> runs;
      for (int r = 0; r < rounds; ++r) {
        const auto start = Clock::now();
        packedGemm(a.data(), shape.rows, shape.k, b.data(), shape.n, shape.n, c.data(), shape.n);
        const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
        runs.push_back(2.0 * static_cast<double>(shape.rows * shape.k * shape.n) / seconds / 1e9);
      }
      const Stat s = summarize(runs);
      std::printf("| %s | %lld x %lld x %lld | %.1f [%.1f, %.1f] | %.0f%% |\n", cpuIsaName(level),
                  static_cast<long long>(shape.rows), static_cast<long long>(shape.k),
                  static_cast<long long>(shape.n), s.median, s.low, s.high,
                  100 * s.median / peak[static_cast<size_t>(level)]);
    }
  }
  // Integer products, rows x K 768 x N 768 (one projection of the 110M Llama at a 512-token
  // prefill, a 64-token one, and eight sequences' decode step): the AVX-512 tiles
  // (quantDotRowBlock, dotInt8Rows) against the AVX-512 panels and the AMX tiles.
  for (const int64_t rows : {512, 64, 16, 12, 8, 4, 2}) {
    const int64_t k = 768, n = 768;
    std::mt19937 rng(2);
    std::uniform_int_distribution<int> code(-127, 127);
    std::normal_distribution<float> normal;
    std::vector<int8_t> wq(static_cast<size_t>(n * k));
    for (int8_t& v : wq) v = static_cast<int8_t>(code(rng));
    std::vector<float> w_scales(static_cast<size_t>(n), 0.01f), x(static_cast<size_t>(rows * k));
    for (float& v : x) v = normal(rng);
    QuantWeight w;
    w.traits = &quantTraits(QuantFormat::kInt8);
    w.n = n;
    w.k = k;
    w.group = k;
    w.data = wq.data();
    w.scales = w_scales.data();
    std::vector<QuantizedActivations> a(static_cast<size_t>(rows));
    AmxActivations amx_a;
    resizeAmxActivations(rows, k, &amx_a);
    // (The AMX tiles read rows in sixteens: a8's padding rows stay zero.)
    std::vector<int8_t> a8(static_cast<size_t>((rows + 15) / 16 * 16 * k), 0);
    std::vector<uint8_t> biased(static_cast<size_t>(rows * k));
    std::vector<int16_t> codes(biased.size());
    std::vector<float> block_scales(static_cast<size_t>(rows * (k / kQuantBlock)));
    for (int64_t r = 0; r < rows; ++r) {
      const QuantizedActivations& row = a[static_cast<size_t>(r)];
      quantizeActivations(x.data() + r * k, k, k, 16, &a[static_cast<size_t>(r)]);
      setAmxActivationRow(row, r, &amx_a);
      std::copy(row.q16.begin(), row.q16.end(), codes.begin() + r * k);
      std::copy(row.scales.begin(), row.scales.end(), block_scales.begin() + r * (k / kQuantBlock));
      quantizeRowPerToken(x.data() + r * k, k, a8.data() + r * k);
    }
    for (size_t i = 0; i < biased.size(); ++i) biased[i] = static_cast<uint8_t>(a8[i] ^ 0x80);
    // The same weight at 4 bits in groups of 32 (Q4_0's block), the rows' int8 codes per block.
    const QuantTraits& int4_traits = quantTraits(QuantFormat::kInt4);
    Tensor wf = Tensor::allocate(DType::kFloat32, {n, k}), w4_data, w4_scales, w4_zeros;
    for (int64_t i = 0; i < n * k; ++i) wf.data<float>()[i] = wq[static_cast<size_t>(i)] * 0.01f;
    QuantWeight w4;
    if (!quantizeWeight(wf, true, int4_traits, kQuantBlock, &w4_data, &w4_scales, &w4_zeros).ok() ||
        !makeQuantWeight(int4_traits, k, kQuantBlock, w4_data, w4_scales, nullptr, &w4).ok())
      return 1;
    // The panels' packs made once, as an engine's product keeps them (the w8a8 panels repack
    // per call).
    const std::shared_ptr<const Int4PanelPack> w4_pack = packInt4Panels(w4, nullptr);
    const std::shared_ptr<const Int16PanelPack> w_pack = packInt16Panels(w, nullptr);
    std::vector<QuantizedActivations> a4(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r)
      quantizeActivations(x.data() + r * k, k, kQuantBlock, activationBits(int4_traits),
                          &a4[static_cast<size_t>(r)]);
    std::vector<float> out(static_cast<size_t>(rows * n));
    std::vector<int32_t> sums(static_cast<size_t>(rows * n));
    std::printf("\n| level | product, %lld x %lld x %lld | G multiply-adds/s |\n|---|---|---|\n",
                static_cast<long long>(rows), static_cast<long long>(k), static_cast<long long>(n));
    auto measure = [&](const char* level, const char* what, auto&& run) {
      std::vector<double> runs;
      for (int r = 0; r < rounds; ++r) {
        const auto start = Clock::now();
        run();
        const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
        runs.push_back(static_cast<double>(rows * k * n) / seconds / 1e9);
      }
      const Stat s = summarize(runs);
      std::printf("| %s | %s | %.1f [%.1f, %.1f] |\n", level, what, s.median, s.low, s.high);
    };
    // The AVX2 level: the panels and the row-by-row tiles they replace (int8 weights from
    // kAvx2Int16PanelMinRows rows, 4-bit from kInt4PanelMinRows).
    if (supported >= CpuIsa::kAvx2) {
      setCpuIsaCapForTesting(CpuIsa::kAvx2);
      for (bool vnni : {false, true}) {
        if (vnni && !cpuFeatures().avxvnni) continue;
        setAvxVnniForTesting(vnni);
        const char* variant = vnni ? "avx2 with avx_vnni" : "avx2";
        measure(variant, "int8 weights, int16 activations, panels", [&] {
          for (int64_t c = 0; c < n; c += 64)
            quantDotPanelAvx2(w, c, c + 64, codes.data(), block_scales.data(), rows, out.data() + c,
                              n, w_pack.get());
        });
        measure(variant, "int4 weights, int8 activations, panels", [&] {
          for (int64_t c = 0; c < n; c += 64)
            quantDotInt4PanelAvx2(w4, c, c + 64, a4.data(), rows, out.data() + c, n, w4_pack.get());
        });
      }
      setAvxVnniForTesting(true);
      measure("avx2", "int8 weights, int16 activations", [&] {
        for (int64_t c = 0; c < n; c += 16)
          quantDotRowBlock(w, c, c + 16, a.data(), rows, out.data() + c, n, 4);
      });
      measure("avx2", "int4 weights, int8 activations", [&] {
        for (int64_t c = 0; c < n; c += 16)
          quantDotRowBlock(w4, c, c + 16, a4.data(), rows, out.data() + c, n, 4);
      });
      // w8a8: the AVX-VNNI panels against the row-by-row tiles (AVX2's only w8a8 kernel without
      // it).
      if (cpuAvxVnni())
        measure("avx2 with avx_vnni", "w8a8, panels", [&] {
          for (int64_t c = 0; c < n; c += 64)
            dotInt8PanelAvxVnni(biased.data(), rows, wq.data(), k, c, c + 64, sums.data() + c, n);
        });
      measure("avx2", "w8a8", [&] {
        for (int64_t c = 0; c < n; c += 16)
          for (int64_t r = 0; r < rows; ++r)
            dotInt8Rows(a8.data() + r * k, wq.data() + c * k, k, 16, sums.data() + r * n + c, 4);
      });
    }
    // The panels over all the rows, per 64 channels (a task of LlmQuantMatMul's).
    for (CpuIsa level : {CpuIsa::kAvx512, CpuIsa::kAvx512Vnni}) {
      if (supported < level) continue;
      setCpuIsaCapForTesting(level);
      measure(cpuIsaName(level), "int8 weights, int16 activations, panels", [&] {
        for (int64_t c = 0; c < n; c += 64)
          quantDotPanelAvx512(w, c, c + 64, codes.data(), block_scales.data(), rows, out.data() + c,
                              n, w_pack.get());
      });
      measure(cpuIsaName(level), "int4 weights, int8 activations, panels", [&] {
        for (int64_t c = 0; c < n; c += 64)
          quantDotInt4PanelAvx512(w4, c, c + 64, a4.data(), rows, out.data() + c, n, w4_pack.get());
      });
      if (level == CpuIsa::kAvx512Vnni)
        measure(cpuIsaName(level), "w8a8, panels", [&] {
          for (int64_t c = 0; c < n; c += 64)
            dotInt8PanelVnni(biased.data(), rows, wq.data(), k, c, c + 64, sums.data() + c, n);
        });
    }
    if (supported >= CpuIsa::kAvx512Vnni) {
      setCpuIsaCapForTesting(CpuIsa::kAvx512Vnni);
      measure("avx512_vnni", "int8 weights, int16 activations", [&] {
        for (int64_t c = 0; c < n; c += 16)
          quantDotRowBlock(w, c, c + 16, a.data(), rows, out.data() + c, n, 4);
      });
      measure("avx512_vnni", "w8a8", [&] {
        for (int64_t c = 0; c < n; c += 16)
          for (int64_t r = 0; r < rows; ++r)
            dotInt8Rows(a8.data() + r * k, wq.data() + c * k, k, 16, sums.data() + r * n + c, 4);
      });
    }
    if (supported >= CpuIsa::kAmx) {
      setCpuIsaCapForTesting(CpuIsa::kAmx);
      measure("amx", "int8 weights, int16 activations",
              [&] { quantDotTileAmx(w, 0, n, amx_a, out.data(), n); });
      measure("amx", "w8a8",
              [&] { dotInt8TileAmx(a8.data(), rows, wq.data(), k, 0, n, sums.data(), n); });
      // As LlmQuantMatMul runs them: 64 channels a call, from the pack an executor keeps.
      const auto pack = packInt8PanelsVnni(wq.data(), n, k, nullptr);
      measure("amx", "int8 weights, int16 activations, kept pack", [&] {
        for (int64_t c = 0; c < n; c += 64)
          quantDotTileAmx(w, c, c + 64, amx_a, out.data() + c, n, pack.get());
      });
      measure("amx", "w8a8, kept pack", [&] {
        for (int64_t c = 0; c < n; c += 64)
          dotInt8TileAmx(a8.data(), rows, wq.data(), k, c, c + 64, sums.data() + c, n, pack.get());
      });
    }
  }
  setCpuIsaCapForTesting(kCpuIsaTop);

  // Decode: one row against N x 768 int8 weights, dense and sparse at 50% and 70% (each row
  // keeping exactly its share, as pruning leaves it), N 768 (0.6 MB: from cache) and 32768
  // (25 MB: from memory), 16 channels per call as LlmQuantMatMul's tiles.
  if (sparseInt8DotFused()) {
    std::printf(
        "\n| weight | stored | ns per 64 weights | weight GB/s read |\n|---|---|---|---|\n");
    for (const int64_t n : {768, 32768}) {
      const int64_t k = 768;
      std::mt19937 rng(3);
      std::uniform_int_distribution<int> code(1, 127);
      std::normal_distribution<float> normal;
      std::vector<float> x(static_cast<size_t>(k)), w_scales(static_cast<size_t>(n), 0.01f),
          out(static_cast<size_t>(n));
      for (float& v : x) v = normal(rng);
      QuantizedActivations a;
      quantizeActivations(x.data(), k, k, 16, &a);
      for (const double sparsity : {0.0, 0.5, 0.7}) {
        std::vector<int8_t> wq(static_cast<size_t>(n * k));
        const int64_t kept = k - static_cast<int64_t>(sparsity * static_cast<double>(k));
        std::vector<int64_t> columns(static_cast<size_t>(k));
        for (int64_t r = 0; r < n; ++r) {
          for (int64_t j = 0; j < k; ++j) columns[static_cast<size_t>(j)] = j;
          std::shuffle(columns.begin(), columns.end(), rng);
          for (int64_t i = 0; i < kept; ++i)
            wq[static_cast<size_t>(r * k + columns[static_cast<size_t>(i)])] =
                static_cast<int8_t>(code(rng));
        }
        QuantWeight w;
        w.traits = &quantTraits(QuantFormat::kInt8);
        w.n = n, w.k = k, w.group = k;
        w.data = wq.data();
        w.scales = w_scales.data();
        std::vector<int8_t> packed(static_cast<size_t>(n * kept));
        std::vector<uint8_t> mask(static_cast<size_t>(n * k / 8));
        if (!packSparseInt8Rows(wq.data(), n, k, kept, packed.data(), mask.data()).ok()) return 1;
        const SparseInt8Rows sparse{packed.data(), mask.data(), n, k, kept};
        for (const bool stored_sparse : {false, true}) {
          if (sparsity == 0 && stored_sparse) continue;
          std::vector<double> runs;
          const int repeats = n == 768 ? 200 : 5;
          for (int r = 0; r < rounds; ++r) {
            const auto start = Clock::now();
            for (int rep = 0; rep < repeats; ++rep)
              for (int64_t c = 0; c < n; c += 16) {
                if (stored_sparse)
                  (void)sparseInt8DotRows(sparse, w_scales.data(), c, c + 16, a, out.data() + c);
                else
                  quantDotRowBlock(w, c, c + 16, &a, 1, out.data() + c, n, 1);
              }
            runs.push_back(std::chrono::duration<double>(Clock::now() - start).count() / repeats);
          }
          const Stat s = summarize(runs);
          const double chunks = static_cast<double>(n * k) / 64;
          const double bytes =
              stored_sparse ? static_cast<double>(n * (kept + k / 8)) : static_cast<double>(n * k);
          std::printf("| %lld x %lld, %.0f%% zeros | %s | %.2f [%.2f, %.2f] | %.1f |\n",
                      static_cast<long long>(n), static_cast<long long>(k), 100 * sparsity,
                      stored_sparse ? "sparse" : "dense", s.median / chunks * 1e9,
                      s.low / chunks * 1e9, s.high / chunks * 1e9, bytes / s.median / 1e9);
        }
      }
    }
  } else {
    std::printf("\nno AVX-512 VBMI2: the fused sparse decode kernel does not run here\n");
  }

  // Decode over dense int4 weights (groups of 128 and of 32), the same shapes: whether it is bound
  // by the bytes it reads (from memory slower than from cache) or by its own work (as fast either
  // way), which decides what reading fewer bytes (sparse 4-bit) could gain.
  std::printf(
      "\n| weight | int4 group | ns per 64 weights | weight GB/s read |\n|---|---|---|---|\n");
  for (const auto& [n, group] :
       {std::pair<int64_t, int64_t>{768, 128}, {32768, 128}, {768, 32}, {32768, 32}}) {
    const int64_t k = 768;
    std::mt19937 rng(5);
    std::normal_distribution<float> normal;
    Tensor wf = Tensor::allocate(DType::kFloat32, {n, k});
    for (int64_t i = 0; i < n * k; ++i) wf.data<float>()[i] = normal(rng);
    std::vector<float> x(static_cast<size_t>(k)), out(static_cast<size_t>(n));
    for (float& v : x) v = normal(rng);
    const QuantTraits& traits = quantTraits(QuantFormat::kInt4);
    Tensor data, scales, zeros;
    QuantWeight w;
    if (!quantizeWeight(wf, true, traits, group, &data, &scales, &zeros).ok() ||
        !makeQuantWeight(traits, k, group, data, scales, nullptr, &w).ok())
      return 1;
    QuantizedActivations a;
    quantizeActivations(x.data(), k, group, activationBits(traits), &a);
    std::vector<double> runs;
    const int repeats = n == 768 ? 200 : 5;
    for (int r = 0; r < rounds; ++r) {
      const auto start = Clock::now();
      for (int rep = 0; rep < repeats; ++rep)
        for (int64_t c = 0; c < n; c += 16)
          quantDotRowBlock(w, c, c + 16, &a, 1, out.data() + c, n, 1);
      runs.push_back(std::chrono::duration<double>(Clock::now() - start).count() / repeats);
    }
    const Stat st = summarize(runs);
    const double chunks = static_cast<double>(n * k) / 64;
    const double bytes =
        static_cast<double>(n * k / 2 + n * (k / group) * 2);  // codes + f16 scales
    std::printf("| %lld x %lld | %lld | %.2f [%.2f, %.2f] | %.1f |\n", static_cast<long long>(n),
                static_cast<long long>(k), static_cast<long long>(group), st.median / chunks * 1e9,
                st.low / chunks * 1e9, st.high / chunks * 1e9, bytes / st.median / 1e9);
  }
  return 0;
}
