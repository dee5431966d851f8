// CPU kernels of weight quantization (core/quant.h): LlmQuantizeWeight (the compiler's and
// `llmc refit`'s round-to-nearest quantizer), LlmQuantMatMul, the product with a quantized
// weight, and LlmQuantGather, rows of a quantized embedding table. As llama.cpp does, each row
// of activations is quantized on the fly to int8 in blocks of 32 with a float scale per block,
// and the products are int8 dot products scaled per block (cpu/quant_dot.cpp). Tested against
// dequantized float products (test/unit/cpu/quant_test.cpp). An int8 weight may be stored sparse
// (core/sparse.h): its rows are expanded, a tile at a time, into a buffer the dense kernels read.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/fp8.h"
#include "core/kernel.h"
#include "core/quant.h"
#include "core/scale.h"
#include "core/sparse.h"
#include "core/thread_pool.h"
#include "cpu/epilogue.h"
#include "cpu/quant_dot.h"

namespace llmc {

namespace {

Status quantizeWeightKernel(KernelContext& ctx) {
  const Tensor* w = ctx.input(0);
  const QuantTraits* traits = findQuantTraits(ctx.params().getString("format", ""));
  if (!traits) return kernelError(ctx, "unknown quantization format '" + ctx.params().getString("format", "") + "'");
  if (!w || w->rank() != 2 || w->dtype() != DType::kFloat32)
    return kernelError(ctx, "LlmQuantizeWeight needs a 2-D float32 weight");
  const bool transposed = ctx.params().getInt("trans_b", 0) != 0;
  const int64_t k = transposed ? w->dim(1) : w->dim(0), n = transposed ? w->dim(0) : w->dim(1);
  const int64_t group = ctx.params().getInt("group", k);
  if (Status s = checkQuantGroup(*traits, k, group); !s.ok()) return kernelError(ctx, s.message());
  const int64_t groups = (k + group - 1) / group;
  // data, scales and (for formats with them) zero points; a caller may ask for a prefix of them
  // (`llmc refit` replays one output of a recipe step at a time).
  const size_t available = traits->zero_points ? 3 : 2;
  if (ctx.numOutputs() < 1 || ctx.numOutputs() > available)
    return kernelError(ctx, std::string(traits->name) + " has " + std::to_string(available) + " outputs");
  const DType dtypes[3] = {traits->data_dtype, traits->scale_dtype, DType::kUInt8};
  const Shape shapes[3] = {{n, traits->bits == 8 ? k : k / 2}, {n, groups}, {n, groups}};
  Tensor* outs[3] = {nullptr, nullptr, nullptr};
  for (size_t i = 0; i < ctx.numOutputs(); ++i)
    LLMC_RETURN_IF_ERROR(ctx.allocateOutput(i, dtypes[i], shapes[i], &outs[i]));
  if (ctx.shapeOnly()) return okStatus();
  const Tensor* importance = ctx.input(1);
  if (importance && (importance->dtype() != DType::kFloat32 || importance->numElements() != k))
    return kernelError(ctx, "importance must be float32 [K = " + std::to_string(k) + "]");
  Tensor parts[3];
  LLMC_RETURN_IF_ERROR(quantizeWeight(*w, transposed, *traits, group, &parts[0], &parts[1],
                                      &parts[2], importance ? importance->data<float>() : nullptr,
                                      ctx.threadPool()));
  for (size_t i = 0; i < ctx.numOutputs(); ++i) std::memcpy(outs[i]->data(), parts[i].data(), parts[i].sizeBytes());
  return okStatus();
}

// A dense int8 weight repacked for the VNNI panels and the AMX tiles (made with AVX-512 VNNI
// where the CPU has it, else without: the same bytes), on the first call, kept by the executor;
// null where it keeps nothing.
std::shared_ptr<const void> int8PanelPack(KernelContext& ctx, const QuantWeight& w,
                                          ThreadPool* pool) {
  return ctx.derivedFromWeights({1}, "int8-panels", [&] {
    const int8_t* codes = static_cast<const int8_t*>(w.data);
    std::shared_ptr<const Int8PanelPack> made = quantDotHasVnniPanel()
                                                    ? packInt8PanelsVnni(codes, w.n, w.k, pool)
                                                    : packInt8PanelsPortable(codes, w.n, w.k, pool);
    return KernelContext::Derived{made, made ? made->bytes() : 0};
  });
}

// y = act(alpha * x·Wᵀ + bias) with W the quantized [N, K]; or, gated (N = 2F),
// y = act(h[:, :F]) * h[:, F:] with h = x·Wᵀ. Inputs: x, data, scales, zeros, bias, input scales
// and, for a sparse int8 weight, its mask (data then holds the packed values).
Status quantMatMulKernel(KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  const Tensor* data = ctx.input(1);
  const Tensor* scales = ctx.input(2);
  const Tensor* zeros = ctx.input(3);
  const Tensor* bias = ctx.input(4);
  const Tensor* input_scales = ctx.input(5);
  const Tensor* mask = ctx.input(6);
  const QuantTraits* traits = findQuantTraits(ctx.params().getString("format", ""));
  if (!traits) return kernelError(ctx, "unknown quantization format '" + ctx.params().getString("format", "") + "'");
  if (!x || !data || !scales || x->rank() < 1 || x->dtype() != DType::kFloat32)
    return kernelError(ctx, "LlmQuantMatMul needs float32 x [..., K], data and scales");
  const int64_t k = x->dim(x->rank() - 1);
  const int64_t group = ctx.params().getInt("group", k);
  QuantWeight w;
  SparseInt8Rows sparse;
  if (mask) {
    if (traits->bits != 8 || traits->e4m3 || traits->scale_dtype != DType::kFloat32)
      return kernelError(
          ctx, std::string("sparse storage is for int8 and w8a8 weights, not ") + traits->name);
    if (Status s = makeSparseInt8Rows(*data, *mask, k, &sparse); !s.ok())
      return kernelError(ctx, s.message());
    // The dense [N, K] the packed rows stand for, for the checks of the scales; never read.
    const Tensor shape =
        Tensor::view(DType::kInt8, {sparse.n, k}, const_cast<int8_t*>(sparse.packed));
    if (Status s = makeQuantWeight(*traits, k, group, shape, *scales, zeros, &w); !s.ok())
      return kernelError(ctx, s.message());
    w.data = nullptr;
  } else if (Status s = makeQuantWeight(*traits, k, group, *data, *scales, zeros, &w); !s.ok()) {
    return kernelError(ctx, s.message());
  }
  const bool gated = ctx.params().getInt("gated", 0) != 0;
  const Activation activation = activationFromName(ctx.params().getString("activation", ""));
  if (activation == Activation::kUnknown || (gated && activation == Activation::kNone))
    return kernelError(ctx, "unknown activation");
  if (gated && (w.n % 2 != 0 || bias)) return kernelError(ctx, "a gated product has 2F outputs and no bias");
  if (input_scales && (input_scales->dtype() != DType::kFloat32 || input_scales->numElements() != k))
    return kernelError(ctx, "input_scales " + shapeToString(input_scales->shape()) + " does not have K = " +
                                std::to_string(k) + " values");
  if (bias && (bias->dtype() != DType::kFloat32 || bias->numElements() != w.n))
    return kernelError(ctx, "bias " + shapeToString(bias->shape()) + " does not have " + std::to_string(w.n) + " values");
  const int64_t out_n = gated ? w.n / 2 : w.n;
  Shape out_shape = x->shape();
  out_shape.back() = out_n;
  Tensor* out = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, DType::kFloat32, out_shape, &out));
  if (ctx.shapeOnly()) return okStatus();
  const int64_t rows = x->numElements() / k;
  ThreadPool* pool = ctx.threadPool();
  // Row r of the activations, through `scaled` (k floats of the caller's) when the weight has
  // input scales: activation-aware or smoothed, x * s per channel, the weight's rows hold 1 / s.
  auto input_row = [&](int64_t r, std::vector<float>& scaled) {
    const float* row = x->data<float>() + r * k;
    if (!input_scales) return row;
    scaled.resize(static_cast<size_t>(k));
    for (int64_t j = 0; j < k; ++j)
      scaled[static_cast<size_t>(j)] = row[j] * input_scales->data<float>()[j];
    return static_cast<const float*>(scaled.data());
  };
  // Scratch kept by the calling thread between calls: prefill's buffers are megabytes, and
  // fresh ones cost a page fault per 4 KiB each time (15% of a w8a8 prefill when allocated per
  // call).
  // (A thread_local named inside a task would be the worker's own: tasks reach these through
  // references bound here.)
  thread_local std::vector<float> gate_up_scratch;
  std::vector<float>& gate_up = gate_up_scratch;
  float* h = out->data<float>();
  if (gated) {
    if (gate_up.size() < static_cast<size_t>(rows * w.n))
      gate_up.resize(static_cast<size_t>(rows * w.n));
    h = gate_up.data();
  }
  // The integer paths take output channels in tiles, rows inner: a tile's weight rows serve
  // every row (prefill) from cache. A task is kTaskTiles tiles; each channel's sum is the same
  // whichever task computes it.
  constexpr int64_t kChannelTile = 16;
  constexpr int64_t kTaskTiles = 4;
  const int64_t channel_tasks = (w.n + kChannelTile * kTaskTiles - 1) / (kChannelTile * kTaskTiles);
  auto for_each_task = [&](auto&& channels) {
    parallelFor(pool, channel_tasks, [&](int64_t task) {
      channels(task * kChannelTile * kTaskTiles,
               std::min(w.n, (task + 1) * kChannelTile * kTaskTiles));
    });
  };
  auto for_each_tile = [&](auto&& tile) {
    for_each_task([&](int64_t begin, int64_t end) {
      for (int64_t n0 = begin; n0 < end; n0 += kChannelTile)
        tile(n0, std::min(kChannelTile, w.n - n0));
    });
  };
  // The weight's rows [n0, n1) for the dense kernels: fn(weight, first, end) with the weight
  // itself, or (sparse) a weight of n1 - n0 rows expanded into the calling thread's buffer.
  std::atomic<int64_t> overrun{-1};
  auto dense_rows = [&](int64_t n0, int64_t n1, auto&& fn) {
    if (!mask) return fn(w, n0, n1);
    thread_local std::vector<int8_t> expanded_scratch;  // the worker's own
    std::vector<int8_t>& expanded = expanded_scratch;
    if (expanded.size() < static_cast<size_t>((n1 - n0) * k))
      expanded.resize(static_cast<size_t>((n1 - n0) * k));
    if (int64_t bad = expandSparseInt8Rows(sparse, n0, n1, expanded.data()); bad >= 0)
      overrun = bad;
    QuantWeight part = w;
    part.n = n1 - n0;
    part.data = expanded.data();
    part.scales = static_cast<const float*>(w.scales) + n0 * w.groupsPerRow();
    return fn(part, int64_t{0}, n1 - n0);
  };
  // Prefill on a CPU with AMX: the tiles take all the rows of a task's channels at once (from
  // kAmxMinRows rows for int8 weights, kAmxInt8MinRows for w8a8). Without
  // AMX, and where K is off the 64s (or, int8 weights, past kAmxMaxK), the AVX-512 panels do from
  // kInt16PanelMinRows / kInt8PanelMinRows rows (int8 weights; w8a8 with VNNI); without AVX-512,
  // int8 weights take the AVX2 panels from kAvx2Int16PanelMinRows rows, and w8a8 the AVX-VNNI ones
  // from kAvxVnniInt8PanelMinRows.
  const bool amx = quantDotHasAmx() && rows >= kAmxMinRows;
  // Tasks go to the pool's threads in turn: a thread's next one is this many tasks on.
  const int pool_threads = pool ? pool->threads() : 1;
  const bool panels = quantDotHasAvx512();
  // Rows quantized in parallel, tasks of kRowTask rows, each with its own scratch.
  constexpr int64_t kRowTask = 8;
  auto for_each_row = [&](auto&& row_fn) {
    parallelFor(pool, (rows + kRowTask - 1) / kRowTask, [&](int64_t task) {
      std::vector<float> scaled;
      for (int64_t r = task * kRowTask; r < std::min(rows, (task + 1) * kRowTask); ++r)
        row_fn(r, input_row(r, scaled));
    });
  };
  if (traits->e4m3) {
    // fp8: the activations (all rows) as E4M3 with one scale, the products of the decoded
    // values summed in float (each product of two E4M3 values is exact in float32), then the
    // two scales. The reference the GPU's FP8 products are tested against; not tuned.
    float amax = 0;
    std::vector<float> scaled;
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = input_row(r, scaled);
      for (int64_t j = 0; j < k; ++j) amax = std::max(amax, std::fabs(row[j]));
    }
    const float a_scale = amax / kE4M3Max;
    const float inverse = inverseScale(a_scale);
    std::vector<float> a(static_cast<size_t>(rows * k));
    for_each_row([&](int64_t r, const float* row) {
      for (int64_t j = 0; j < k; ++j)
        a[static_cast<size_t>(r * k + j)] = e4m3ToFloat(floatToE4M3(row[j] * inverse));
    });
    const uint8_t* wq = static_cast<const uint8_t*>(w.data);
    for_each_tile([&](int64_t n0, int64_t count) {
      std::vector<float> wrow(static_cast<size_t>(k));
      for (int64_t n = n0; n < n0 + count; ++n) {
        for (int64_t j = 0; j < k; ++j) wrow[static_cast<size_t>(j)] = e4m3ToFloat(wq[n * k + j]);
        const float w_scale = w.scale(n, 0);
        for (int64_t r = 0; r < rows; ++r) {
          float sum = 0;
          for (int64_t j = 0; j < k; ++j)
            sum += a[static_cast<size_t>(r * k + j)] * wrow[static_cast<size_t>(j)];
          h[r * w.n + n] = sum * a_scale * w_scale;
        }
      }
    });
  } else if (traits->per_token_activations) {
    // w8a8: one int8 scale per row, exact int32 sums over K, two float multiplies per output.
    if (k > kMaxPerTokenK) return kernelError(ctx, "w8a8 takes K up to " + std::to_string(kMaxPerTokenK));
    const bool tiled = quantDotHasAmx() && rows >= kAmxInt8MinRows && k % kAmxChunk == 0;
    // The AMX tiles read rows in sixteens: the padding rows stay zero.
    thread_local CacheLineVector<int8_t> aq_scratch;
    CacheLineVector<int8_t>& aq = aq_scratch;
    const int64_t padded = tiled ? (rows + 15) / 16 * 16 : rows;
    if (aq.size() < static_cast<size_t>(padded * k)) aq.resize(static_cast<size_t>(padded * k));
    std::fill(aq.begin() + rows * k, aq.begin() + padded * k, int8_t{0});
    std::vector<float> row_scales(static_cast<size_t>(rows));
    // The VNNI panels (AVX-512, or AVX2 with AVX-VNNI) take the codes plus 128, as unsigned bytes.
    const bool wide_panels = panels && quantDotHasVnniPanel();
    const bool biased =
        !tiled && (wide_panels ? rows >= kInt8PanelMinRows
                               : rows >= kAvxVnniInt8PanelMinRows && quantDotHasAvxVnniPanel());
    for_each_row([&](int64_t r, const float* row) {
      int8_t* codes = aq.data() + r * k;
      row_scales[r] = quantizeRowPerToken(row, k, codes);
      if (biased)
        for (int64_t j = 0; j < k; ++j) codes[j] = static_cast<int8_t>(codes[j] ^ 0x80);
    });
    if (tiled || biased) {
      // The VNNI panels and the AMX tiles read an engine's weight repacked once and kept by the
      // executor (one layout for both).
      std::shared_ptr<const void> pack;
      if (!mask) pack = int8PanelPack(ctx, w, pool);
      for_each_task([&](int64_t n0, int64_t n1) {
        float channel_scales[kChannelTile * kTaskTiles];
        for (int64_t n = n0; n < n1; ++n) channel_scales[n - n0] = w.scale(n, 0);
        if (tiled) {
          // The tiles' sums go straight to the floats, in 16 lanes.
          dense_rows(n0, n1, [&](const QuantWeight& part, int64_t p0, int64_t p1) {
            quantDotInt8TileAmx(aq.data(), rows, static_cast<const int8_t*>(part.data), k, p0, p1,
                                row_scales.data(), channel_scales, h + n0, w.n,
                                static_cast<const Int8PanelPack*>(pack.get()), pool_threads);
          });
          return;
        }
        const int64_t stride = kChannelTile * kTaskTiles;
        thread_local std::vector<int32_t> sums;  // this task's thread's own
        if (sums.size() < static_cast<size_t>(rows * stride))
          sums.resize(static_cast<size_t>(rows * stride));
        dense_rows(n0, n1, [&](const QuantWeight& part, int64_t p0, int64_t p1) {
          (wide_panels ? dotInt8PanelVnni : dotInt8PanelAvxVnni)(
              reinterpret_cast<const uint8_t*>(aq.data()), rows,
              static_cast<const int8_t*>(part.data), k, p0, p1, sums.data(), stride,
              static_cast<const Int8PanelPack*>(pack.get()));
        });
        for (int64_t r = 0; r < rows; ++r) {
          const int32_t* sum = sums.data() + r * stride;
          float* row = h + r * w.n + n0;
          const float row_scale = row_scales[r];
          for (int64_t i = 0; i < n1 - n0; ++i)
            row[i] = static_cast<float>(sum[i]) * row_scale * channel_scales[i];
        }
      });
    } else {
      for_each_tile([&](int64_t n0, int64_t count) {
        int32_t sums[kChannelTile];
        const int8_t* wq = nullptr;
        dense_rows(n0, n0 + count, [&](const QuantWeight& part, int64_t p0, int64_t) {
          wq = static_cast<const int8_t*>(part.data) + p0 * k;
        });
        for (int64_t r = 0; r < rows; ++r) {
          dotInt8Rows(aq.data() + r * k, wq, k, count, sums, channelsPerPass(rows));
          for (int64_t i = 0; i < count; ++i)
            h[r * w.n + n0 + i] = static_cast<float>(sums[i]) * row_scales[r] * w.scale(n0 + i, 0);
        }
      });
    }
  } else if (amx && traits->bits == 8 && amxTakesK(k)) {
    // int8 weights: the int16 codes as 24-bit integers over one scale per row, in byte planes.
    thread_local AmxActivations codes_scratch;
    AmxActivations& codes = codes_scratch;
    resizeAmxActivations(rows, k, &codes);
    for_each_row([&](int64_t r, const float* row) { quantizeAmxRow(row, r, &codes); });
    std::shared_ptr<const void> pack;
    if (!mask) pack = int8PanelPack(ctx, w, pool);
    for_each_task([&](int64_t n0, int64_t n1) {
      dense_rows(n0, n1, [&](const QuantWeight& part, int64_t p0, int64_t p1) {
        quantDotTileAmx(part, p0, p1, codes, h + n0, w.n,
                        static_cast<const Int8PanelPack*>(pack.get()), pool_threads);
      });
    });
  } else if ((panels ? rows >= kInt16PanelMinRows
                     : quantDotHasAvx2Panels() && rows >= kAvx2Int16PanelMinRows) &&
             traits->bits == 8) {
    // int8 weights: the int16 codes of all rows, [rows, K], and their block scales.
    thread_local std::vector<int16_t> codes_scratch;
    thread_local std::vector<float> scales_scratch;
    std::vector<int16_t>& codes = codes_scratch;
    std::vector<float>& block_scales = scales_scratch;
    const int64_t blocks = k / kQuantBlock;
    if (codes.size() < static_cast<size_t>(rows * k)) codes.resize(static_cast<size_t>(rows * k));
    if (block_scales.size() < static_cast<size_t>(rows * blocks))
      block_scales.resize(static_cast<size_t>(rows * blocks));
    for_each_row([&](int64_t r, const float* row) {
      quantizeInt16Row(row, k, codes.data() + r * k, block_scales.data() + r * blocks);
    });
    // An engine's weight is repacked for the panels once and kept by the executor (the same
    // layout on both levels).
    std::shared_ptr<const void> pack;
    if (!mask)
      pack = ctx.derivedFromWeights({1, 2}, "int16-panels", [&] {
        std::shared_ptr<const Int16PanelPack> made = packInt16Panels(w, pool);
        return KernelContext::Derived{made, made ? made->bytes() : 0};
      });
    for_each_task([&](int64_t n0, int64_t n1) {
      dense_rows(n0, n1, [&](const QuantWeight& part, int64_t p0, int64_t p1) {
        (panels ? quantDotPanelAvx512 : quantDotPanelAvx2)(
            part, p0, p1, codes.data(), block_scales.data(), rows, h + n0, w.n,
            static_cast<const Int16PanelPack*>(pack.get()));
      });
    });
  } else {
    std::vector<QuantizedActivations> activations(static_cast<size_t>(rows));
    for_each_row([&](int64_t r, const float* row) {
      quantizeActivations(row, k, w.group, activationBits(*traits), &activations[r]);
    });
    // 4-bit weights from kInt4PanelMinRows rows (prefill, batched decode) take the AVX-512
    // panels, or the AVX2 ones without AVX-512. Decode over a sparse weight reads it once in its
    // compact form, where the CPU can expand it in registers.
    if ((panels || quantDotHasAvx2Panels()) && traits->bits == 4 && rows >= kInt4PanelMinRows &&
        k % (2 * kQuantBlock) == 0) {
      // An engine's weight is repacked for the panels once and kept by the executor (the same
      // layout on both levels).
      const std::shared_ptr<const void> pack =
          ctx.derivedFromWeights({1, 2, 3}, "int4-panels-g" + std::to_string(w.group), [&] {
            std::shared_ptr<const Int4PanelPack> made = packInt4Panels(w, pool);
            return KernelContext::Derived{made, made ? made->bytes() : 0};
          });
      for_each_task([&](int64_t n0, int64_t n1) {
        (panels ? quantDotInt4PanelAvx512 : quantDotInt4PanelAvx2)(
            w, n0, n1, activations.data(), rows, h + n0, w.n,
            static_cast<const Int4PanelPack*>(pack.get()));
      });
    } else if (mask && rows == 1 && k % kQuantBlock == 0 && sparseInt8DotFused())
      for_each_tile([&](int64_t n0, int64_t count) {
        if (int64_t bad = sparseInt8DotRows(sparse, static_cast<const float*>(w.scales), n0,
                                            n0 + count, activations[0], h + n0);
            bad >= 0)
          overrun = bad;
      });
    else
      for_each_tile([&](int64_t n0, int64_t count) {
        dense_rows(n0, n0 + count, [&](const QuantWeight& part, int64_t p0, int64_t p1) {
          quantDotRowBlock(part, p0, p1, activations.data(), rows, h + n0, w.n,
                           channelsPerPass(rows));
        });
      });
  }
  if (overrun >= 0)
    return kernelError(ctx, "sparse weight: row " + std::to_string(overrun.load()) +
                                "'s mask sets more than its " + std::to_string(sparse.stride) +
                                " stored values (corrupted)");
  float* y = out->data<float>();
  const float alpha = static_cast<float>(ctx.params().getFloat("alpha", 1.0));
  parallelFor(pool, (rows + kRowTask - 1) / kRowTask, [&](int64_t task) {
    const int64_t r0 = task * kRowTask, count = std::min(kRowTask, rows - r0);
    if (!gated) {
      applyEpilogue(h + r0 * w.n, count, w.n, alpha, bias ? bias->data<float>() : nullptr,
                    activation);
      return;
    }
    for (int64_t r = r0; r < r0 + count; ++r)
      gatedRow(activation, h + r * w.n, h + r * w.n + out_n, y + r * out_n, out_n);
  });
  return okStatus();
}

// Rows of a quantized table [V, K] by ids (an embedding): y[i..., :] = dequantized row ids[i...];
// ids in [-V, V), negative ones counting from the end as ONNX Gather's do.
Status quantGatherKernel(KernelContext& ctx) {
  const Tensor* ids = ctx.input(0);
  const Tensor* data = ctx.input(1);
  const Tensor* scales = ctx.input(2);
  const Tensor* zeros = ctx.input(3);
  const QuantTraits* traits = findQuantTraits(ctx.params().getString("format", ""));
  if (!traits) return kernelError(ctx, "unknown quantization format '" + ctx.params().getString("format", "") + "'");
  if (!ids || !data || !scales || data->rank() != 2 ||
      (ids->dtype() != DType::kInt64 && ids->dtype() != DType::kInt32))
    return kernelError(ctx, "LlmQuantGather needs int32/int64 ids, data and scales");
  const int64_t k = traits->bits == 8 ? data->dim(1) : data->dim(1) * 2;
  QuantWeight w;
  if (Status s = makeQuantWeight(*traits, k, ctx.params().getInt("group", k), *data, *scales, zeros, &w); !s.ok())
    return kernelError(ctx, s.message());
  Shape out_shape = ids->shape();
  out_shape.push_back(k);
  Tensor* out = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, DType::kFloat32, out_shape, &out));
  if (ctx.shapeOnly()) return okStatus();
  std::vector<int64_t> rows;
  LLMC_RETURN_IF_ERROR(readInt64s(ids, &rows));
  for (size_t i = 0; i < rows.size(); ++i) {
    int64_t row = rows[i];
    if (row < -w.n || row >= w.n)
      return kernelError(ctx, "index " + std::to_string(row) + " is outside the table's " + std::to_string(w.n) + " rows");
    if (row < 0) row += w.n;
    dequantizeRow(w, row, out->data<float>() + static_cast<int64_t>(i) * k);
  }
  return okStatus();
}

}  // namespace

void registerQuantKernels(KernelRegistry& registry) {
  registry.add({"LlmQuantizeWeight", 1, 2, 2, 3, quantizeWeightKernel});
  registry.add({"LlmQuantMatMul", 3, 7, 1, 1, quantMatMulKernel});
  registry.add({"LlmQuantGather", 3, 4, 1, 1, quantGatherKernel});
}

}  // namespace llmc
