// The CPU backend's llm kernels: LlmAttention (causal or sliding-window attention that appends
// to and reads from the paged KV cache), LlmPositions and LlmLastTokens. Reference
// implementations: plain loops, float accumulation.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "core/fp8.h"
#include "core/half.h"
#include "core/kernel.h"
#include "core/scale.h"
#include "core/step_context.h"
#include "core/thread_pool.h"
#include "cpu/attend.h"
#include "cpu/head_layout.h"
#include "cpu/rotary.h"

namespace llmc {
namespace {

Status llmAttention(KernelContext& ctx) {
  const Tensor* q = ctx.input(0);
  const Tensor* k = ctx.input(1);
  const Tensor* v = ctx.input(2);
  if (!q || !k || !v) return kernelError(ctx, "LlmAttention needs q, k and v");
  if (q->dtype() != DType::kFloat32 || k->dtype() != DType::kFloat32 ||
      v->dtype() != DType::kFloat32)
    return kernelError(ctx, "LlmAttention computes float32 only");
  const bool token_major = ctx.params().getInt("num_heads", 0) > 0;
  int64_t batch = 0, heads = 0, tokens = 0, head_dim = 0, kv_heads = 0;
  HeadLayout q_layout, k_layout, v_layout, out_layout;
  Shape out_shape;
  if (token_major) {
    heads = ctx.params().getInt("num_heads", 0);
    kv_heads = ctx.params().getInt("num_kv_heads", 0);
    head_dim = ctx.params().getInt("head_dim", 0);
    if (q->rank() != 3 || k->rank() != 3 || v->rank() != 3 || kv_heads < 1 || head_dim < 1 ||
        heads % kv_heads != 0)
      return kernelError(ctx, "token-major q, k, v must be [batch, tokens, width] with heads a "
                              "multiple of kv_heads, got " + shapeToString(q->shape()) + ", " +
                                  shapeToString(k->shape()) + ", " + shapeToString(v->shape()));
    batch = q->dim(0);
    tokens = q->dim(1);
    LLMC_RETURN_IF_ERROR(tokenMajorLayouts(ctx, q, k, v, heads, kv_heads, head_dim, tokens, tokens,
                                           &q_layout, &k_layout, &v_layout));
    out_shape = {batch, tokens, heads * head_dim};
    out_layout = HeadLayout::tokenMajor(tokens, heads * head_dim, head_dim, 0);
  } else {
    if (q->rank() != 4 || k->rank() != 4 || v->rank() != 4)
      return kernelError(ctx, "q, k, v must be [batch, heads, tokens, head_dim], got " +
                                  shapeToString(q->shape()) + ", " + shapeToString(k->shape()) +
                                  ", " + shapeToString(v->shape()));
    batch = q->dim(0), heads = q->dim(1), tokens = q->dim(2), head_dim = q->dim(3);
    kv_heads = k->dim(1);
    if (k->shape() != v->shape() || k->dim(0) != batch || k->dim(2) != tokens ||
        k->dim(3) != head_dim || kv_heads < 1 || heads % kv_heads != 0)
      return kernelError(ctx, "k/v " + shapeToString(k->shape()) + " do not fit q " +
                                  shapeToString(q->shape()));
    q_layout = out_layout = HeadLayout::headMajor(heads, tokens, head_dim);
    k_layout = v_layout = HeadLayout::headMajor(kv_heads, tokens, head_dim);
    out_shape = q->shape();
  }
  Tensor* out = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, DType::kFloat32, out_shape, &out));
  if (ctx.shapeOnly()) return okStatus();
  const int64_t layer = ctx.params().getInt("layer", 0);
  const float scale = static_cast<float>(ctx.params().getFloat("scale", 1.0));
  // Sliding window: a token at position p sees positions max(0, p - window + 1) .. p.
  const int64_t window = ctx.params().getInt("window", 0);
  if (window < 0) return kernelError(ctx, "window must not be negative");
  // Soft-capping: each scaled score s becomes softcap * tanh(s / softcap); attendOne only.
  const double softcap_param = ctx.params().getFloat("softcap", 0.0);
  if (!(softcap_param >= 0 && std::isfinite(softcap_param)))
    return kernelError(ctx, "softcap must be 0 (off) or positive and finite");
  const float softcap = static_cast<float>(softcap_param);
  // ALiBi: head h adds slopes[h] * j to the scaled score of the key at position j (float
  // arithmetic, as the model computes it); attendOne only.
  std::vector<float> slopes;
  for (double slope : ctx.params().getFloats("alibi_slopes")) {
    if (!std::isfinite(slope)) return kernelError(ctx, "alibi_slopes must be finite");
    slopes.push_back(static_cast<float>(slope));
  }
  auto first_visible = [&](int64_t position) {
    return window > 0 ? std::max<int64_t>(0, position - window + 1) : 0;
  };
  if (!slopes.empty() && static_cast<int64_t>(slopes.size()) != heads)
    return kernelError(ctx, "alibi_slopes holds " + std::to_string(slopes.size()) + " slopes for " +
                                std::to_string(heads) + " heads");
  const bool plain = window == 0 && softcap == 0 && slopes.empty();
  // The bias of head h for the key at position `first + j`.
  auto alibi = [&](int64_t h, int64_t first) {
    const float slope = slopes.empty() ? 0.0f : slopes[static_cast<size_t>(h)];
    return [slope, first](int64_t j) { return slope * static_cast<float>(first + j); };
  };
  const int64_t group = heads / kv_heads;
  const float* qd = q->data<float>();
  const float* kd = k->data<float>();
  const float* vd = v->data<float>();
  float* od = out->data<float>();
  auto q_at = [&](int64_t b, int64_t h, int64_t t) { return q_layout.at(b, h, t); };
  auto o_at = [&](int64_t b, int64_t h, int64_t t) { return out_layout.at(b, h, t); };
  auto k_at = [&](int64_t b, int64_t h, int64_t t) { return k_layout.at(b, h, t); };
  auto v_at = [&](int64_t b, int64_t h, int64_t t) { return v_layout.at(b, h, t); };

  LlmStepContext* step = ctx.llmStep();
  if (!step) {
    // Every batch row is one sequence starting at position 0: causal self-attention. One task
    // per (batch row, head).
    parallelFor(ctx.threadPool(), batch * heads, [&](int64_t task) {
      const int64_t b = task / heads, h = task % heads, kvh = h / group;
      std::vector<float> scores;
      if (plain && attendChunkSupported(head_dim)) {
        // The sequence's rows as one block, queries in chunks of kChunkQueries.
        const void* key_rows = kd + k_at(b, kvh, 0);
        const void* value_rows = vd + v_at(b, kvh, 0);
        const int64_t key_stride = tokens > 1 ? k_at(b, kvh, 1) - k_at(b, kvh, 0) : head_dim;
        const int64_t value_stride = tokens > 1 ? v_at(b, kvh, 1) - v_at(b, kvh, 0) : head_dim;
        if (key_stride == value_stride) {
          const KvRows rows{&key_rows, &value_rows, tokens, key_stride};
          constexpr int64_t kChunkQueries = 32;
          const float* queries[kChunkQueries];
          float* outs[kChunkQueries];
          int64_t counts[kChunkQueries];
          for (int64_t t0 = 0; t0 < tokens; t0 += kChunkQueries) {
            const int64_t m = std::min(kChunkQueries, tokens - t0);
            for (int64_t i = 0; i < m; ++i) {
              queries[i] = qd + q_at(b, h, t0 + i);
              outs[i] = od + o_at(b, h, t0 + i);
              counts[i] = t0 + i + 1;
            }
            attendChunk(queries, counts, m, head_dim, scale, rows, outs, scores);
          }
          return;
        }
      }
      for (int64_t t = 0; t < tokens; ++t) {
        const int64_t first = first_visible(t);
        attendOne(
            qd + q_at(b, h, t), t + 1 - first, head_dim, head_dim, scale,
            [&](int64_t j) { return kd + k_at(b, kvh, first + j); },
            [&](int64_t j) { return vd + v_at(b, kvh, first + j); }, alibi(h, first), scores,
            od + o_at(b, h, t), softcap);
      }
    });
    return okStatus();
  }

  KvStorage& cache = *step->cache;
  const KvCacheSpec& spec = cache.spec();
  if (batch != 1 || static_cast<size_t>(tokens) != step->token_position.size())
    return kernelError(ctx, "a ragged step runs [1, " +
                                std::to_string(step->token_position.size()) +
                                "] tokens, attention got q " + shapeToString(q->shape()));
  if (layer >= spec.num_layers || kv_heads != spec.num_kv_heads || head_dim != spec.head_dim ||
      (spec.dtype != DType::kFloat32 && spec.dtype != DType::kFloat16 &&
       spec.dtype != DType::kBFloat16 && !isQuantizedKvDType(spec.dtype)))
    return kernelError(ctx, "the KV cache (" + std::to_string(spec.num_layers) + " layers, " +
                                std::to_string(spec.num_kv_heads) + " KV heads of " +
                                std::to_string(spec.head_dim) + ", " + kvDTypeName(spec.dtype) +
                                ") does not fit layer " + std::to_string(layer) + " with " +
                                std::to_string(kv_heads) + " KV heads of " +
                                std::to_string(head_dim));
  const int64_t block_size = spec.block_size;
  // 1. Store every new token's K and V (converted to the cache's dtype; the 8-bit formats with
  // one scale per row, absmax / 127 or / 448, after the layer's codes).
  const DType cache_dtype = spec.dtype;
  const bool quantized = isQuantizedKvDType(cache_dtype);
  const size_t element = quantized ? 1 : dtypeSize(cache_dtype);
  const int64_t scale_offset = spec.kvScaleOffset();
  // Row `row` (= kv_head * block_size + slot) of a layer's K or V at `base`.
  auto store_row = [&](uint8_t* base, int64_t row, const float* src) {
    void* dst = base + static_cast<size_t>(row * head_dim) * element;
    switch (cache_dtype) {
      case DType::kFloat16:
        for (int64_t d = 0; d < head_dim; ++d) static_cast<Float16*>(dst)[d] = toFloat16(src[d]);
        break;
      case DType::kBFloat16:
        for (int64_t d = 0; d < head_dim; ++d) static_cast<BFloat16*>(dst)[d] = toBFloat16(src[d]);
        break;
      case DType::kInt8:
      case DType::kUInt8: {
        float amax = 0;
        for (int64_t d = 0; d < head_dim; ++d) amax = std::max(amax, std::fabs(src[d]));
        const float row_scale = amax / (cache_dtype == DType::kInt8 ? 127.0f : kE4M3Max);
        const float inverse = inverseScale(row_scale);
        for (int64_t d = 0; d < head_dim; ++d) {
          if (cache_dtype == DType::kInt8)
            static_cast<int8_t*>(dst)[d] = static_cast<int8_t>(std::clamp<long>(std::lround(src[d] * inverse), -127, 127));
          else
            static_cast<uint8_t*>(dst)[d] = floatToE4M3(src[d] * inverse);
        }
        std::memcpy(base + scale_offset + row * 4, &row_scale, 4);
        break;
      }
      default:
        std::memcpy(dst, src, head_dim * sizeof(float));
    }
  };
  // `count` rows from row `row` on, as float.
  auto load_rows = [&](float* dst, const uint8_t* base, int64_t row, int64_t count) {
    kvRowsToFloat(cache_dtype, base + static_cast<size_t>(row * head_dim) * element, head_dim,
                  reinterpret_cast<const float*>(base + scale_offset) + row, count, head_dim, dst);
  };
  for (int64_t t = 0; t < tokens; ++t) {
    const KvSlot& slot = step->token_slot[t];
    auto* kc = static_cast<uint8_t*>(cache.keyData(slot.block, static_cast<int32_t>(layer)));
    auto* vc = static_cast<uint8_t*>(cache.valueData(slot.block, static_cast<int32_t>(layer)));
    for (int64_t h = 0; h < kv_heads; ++h) {
      store_row(kc, h * block_size + slot.offset, kd + k_at(0, h, t));
      store_row(vc, h * block_size + slot.offset, vd + v_at(0, h, t));
    }
  }
  // 2. Each token attends to the visible positions of its sequence, read from the cache's
  // blocks: float32 in place; the other dtypes converted to float (exactly), by attendChunk a
  // block at a time as it reads them where a task has at most kConvertInChunk tokens (decode:
  // each row is read once), else per (sequence, KV head) into scratch once for all the task's
  // tokens and the heads that share it. Either way the same floats, so the same result. Tasks:
  // (sequence, KV head, chunk of kTokenChunk of its tokens, part of its query heads); every
  // (token, head) is computed the same way by whichever task runs it.
  std::vector<std::vector<int64_t>> tokens_of(step->block_tables.size());
  for (int64_t t = 0; t < tokens; ++t) {
    const int32_t w = step->token_sequence[t];
    if (w < 0 || static_cast<size_t>(w) >= tokens_of.size())
      return kernelError(ctx, "token " + std::to_string(t) + " names sequence " +
                                  std::to_string(w) + " of a step with " +
                                  std::to_string(tokens_of.size()));
    tokens_of[static_cast<size_t>(w)].push_back(t);
  }
  struct Task {
    int64_t sequence, kv_head, first_token, last_token;  // tokens_of[sequence][first, last)
    int64_t first_head, last_head;                       // query heads [first, last)
    int64_t last_kv_head;  // KV heads [kv_head, last_kv_head): more than one for attendHeads
  };
  constexpr int64_t kTokenChunk = 32;
  const int64_t threads = ctx.threadPool() ? ctx.threadPool()->threads() : 1;
  const bool chunked = plain && attendChunkSupported(head_dim);
  // A sequence's decode token under multi-head attention (a KV head per query head): its task
  // takes a range of KV heads, walked a block at a time for all of them (attendHeads), so that
  // it reads each block's rows of those heads together; as many ranges per sequence as keep
  // every thread busy. A head's result is the same in any range, so no bit depends on them.
  const bool by_heads = chunked && group == 1 && attendHeadsSupported(head_dim, cache_dtype);
  int64_t lone_tokens = 0;
  for (const std::vector<int64_t>& own : tokens_of) lone_tokens += own.size() == 1;
  const int64_t ranges =
      lone_tokens > 0 ? std::clamp<int64_t>((threads + lone_tokens - 1) / lone_tokens, 1, kv_heads)
                      : 1;
  const int64_t heads_per_range = (kv_heads + ranges - 1) / ranges;
  std::vector<int64_t> lengths(tokens_of.size(), 0);
  std::vector<Task> tasks;
  for (size_t w = 0; w < tokens_of.size(); ++w) {
    for (int64_t t : tokens_of[w]) lengths[w] = std::max(lengths[w], step->token_position[t] + 1);
    if (lengths[w] == 0) continue;
    const std::vector<int32_t>& table = step->block_tables[w];
    if ((lengths[w] + block_size - 1) / block_size > static_cast<int64_t>(table.size()))
      return kernelError(ctx, "sequence " + std::to_string(w) + " of the step needs " +
                                  std::to_string(lengths[w]) +
                                  " positions, its block table holds " +
                                  std::to_string(table.size() * block_size));
    const int64_t count = static_cast<int64_t>(tokens_of[w].size());
    const int64_t heads_per_task = by_heads && count == 1 ? heads_per_range : 1;
    for (int64_t h = 0; h < kv_heads; h += heads_per_task)
      for (int64_t c = 0; c < count; c += kTokenChunk)
        tasks.push_back({static_cast<int64_t>(w), h, c, std::min(count, c + kTokenChunk), h * group,
                         (h + 1) * group, std::min(kv_heads, h + heads_per_task)});
  }
  // Fewer tasks than threads (a decode step of one sequence over a few KV heads; one for
  // multi-query attention): each task's query heads are split into parts, each reading the KV
  // head's rows itself, so that every thread has work. A head's result does not depend on the
  // part it is in, so the split (and the thread count) changes no bit.
  if (group > 1 && !tasks.empty() && static_cast<int64_t>(tasks.size()) < threads) {
    const int64_t parts = std::min(group, (threads + static_cast<int64_t>(tasks.size()) - 1) /
                                              static_cast<int64_t>(tasks.size()));
    const int64_t per_part = (group + parts - 1) / parts;
    std::vector<Task> split;
    for (const Task& task : tasks)
      for (int64_t h = task.first_head; h < task.last_head; h += per_part) {
        split.push_back(task);
        split.back().first_head = h;
        split.back().last_head = std::min(task.last_head, h + per_part);
      }
    tasks = std::move(split);
  }
  constexpr int64_t kConvertInChunk = 2;
  const int64_t element_bytes = static_cast<int64_t>(element);
  // The 8-bit formats' row scales follow the layer's codes: scale_offset bytes from the layer's
  // start, 4 per row; as an offset from KV head h's first row:
  auto head_scale_offset = [&](int64_t h) {
    return scale_offset + h * block_size * (4 - head_dim * element_bytes);
  };
  parallelFor(ctx.threadPool(), static_cast<int64_t>(tasks.size()), [&](int64_t i) {
    const Task& task = tasks[static_cast<size_t>(i)];
    const size_t w = static_cast<size_t>(task.sequence);
    const std::vector<int32_t>& table = step->block_tables[w];
    const std::vector<int64_t>& own = tokens_of[w];
    if (by_heads && own.size() == 1) {
      // Positions [0, count), read in place: KV head h's rows lie h * head_bytes into each
      // block's layer.
      const int64_t t = own[0], count = step->token_position[t] + 1;
      const int64_t heads_here = task.last_kv_head - task.kv_head;
      const int64_t blocks = (count + block_size - 1) / block_size;
      const int64_t head_bytes = block_size * head_dim * element_bytes;
      std::vector<const void*> pointers(static_cast<size_t>(2 * heads_here * blocks));
      std::vector<KvRows> rows(static_cast<size_t>(heads_here));
      std::vector<const float*> queries(rows.size());
      std::vector<float*> outs(rows.size());
      for (int64_t k = 0; k < heads_here; ++k) {
        const int64_t h = task.kv_head + k;
        const void** keys = &pointers[static_cast<size_t>(2 * k * blocks)];
        const void** values = keys + blocks;
        for (int64_t b = 0; b < blocks; ++b) {
          const int32_t block = table[static_cast<size_t>(b)];
          keys[b] = static_cast<const uint8_t*>(cache.keyData(block, static_cast<int32_t>(layer))) +
                    h * head_bytes;
          values[b] =
              static_cast<const uint8_t*>(cache.valueData(block, static_cast<int32_t>(layer))) +
              h * head_bytes;
        }
        KvRows& r = rows[static_cast<size_t>(k)];
        r = KvRows{keys, values, block_size, head_dim};
        if (cache_dtype != DType::kFloat32) {
          r.dtype = cache_dtype;
          r.scale_offset = head_scale_offset(h);
        }
        queries[static_cast<size_t>(k)] = qd + q_at(0, h, t);
        outs[static_cast<size_t>(k)] = od + o_at(0, h, t);
      }
      thread_local std::vector<float> scores;
      attendHeads(queries.data(), count, heads_here, head_dim, scale, rows.data(), outs.data(),
                  scores);
      return;
    }
    // The positions this task's tokens see: [lowest first visible, length of the last).
    int64_t from = INT64_MAX, to = 0;
    for (int64_t c = task.first_token; c < task.last_token; ++c) {
      const int64_t position = step->token_position[own[static_cast<size_t>(c)]];
      from = std::min(from, first_visible(position));
      to = std::max(to, position + 1);
    }
    const bool in_place = cache_dtype == DType::kFloat32 ||
                          (chunked && task.last_token - task.first_token <= kConvertInChunk);
    std::vector<float> scores;
    // Per block from `from`'s on: where its rows of this KV head are, in the cache or in scratch.
    // The scratch is not zeroed as a vector's would be (3% of a 2,048-token prefill of the 8-bit
    // 110M Llama over a float16 cache went to that): each block's rows are written below, and
    // the rows past a partial last block set to zero, as the cache's unwritten slots read.
    const int64_t base_block = from / block_size;
    const int64_t blocks = (to + block_size - 1) / block_size - base_block;
    const int64_t block_rows = block_size * head_dim;
    std::unique_ptr<float[]> keys, values;
    if (!in_place) {
      keys.reset(new float[static_cast<size_t>(blocks * block_rows)]);
      values.reset(new float[static_cast<size_t>(blocks * block_rows)]);
    }
    std::vector<const void*> key_blocks, value_blocks;
    for (int64_t i = 0; i < blocks; ++i) {
      const int32_t block = table[static_cast<size_t>(base_block + i)];
      const auto* kc = static_cast<const uint8_t*>(cache.keyData(block, static_cast<int32_t>(layer)));
      const auto* vc = static_cast<const uint8_t*>(cache.valueData(block, static_cast<int32_t>(layer)));
      if (in_place) {
        key_blocks.push_back(kc + task.kv_head * block_rows * element_bytes);
        value_blocks.push_back(vc + task.kv_head * block_rows * element_bytes);
        continue;
      }
      const int64_t n = std::min(block_size, to - (base_block + i) * block_size);
      float* k_rows = &keys[static_cast<size_t>(i * block_rows)];
      float* v_rows = &values[static_cast<size_t>(i * block_rows)];
      load_rows(k_rows, kc, task.kv_head * block_size, n);
      load_rows(v_rows, vc, task.kv_head * block_size, n);
      std::fill(k_rows + n * head_dim, k_rows + block_rows, 0.0f);
      std::fill(v_rows + n * head_dim, v_rows + block_rows, 0.0f);
      key_blocks.push_back(k_rows);
      value_blocks.push_back(v_rows);
    }
    if (chunked) {
      // Every token sees positions from 0 (from == 0): block i of the lists is the sequence's
      // block i. The chunk's queries per head at once.
      KvRows rows{key_blocks.data(), value_blocks.data(), block_size, head_dim};
      if (in_place && cache_dtype != DType::kFloat32) {
        rows.dtype = cache_dtype;
        rows.scale_offset = head_scale_offset(task.kv_head);
      }
      // The KV head's query heads read the same rows: as many of them as fit in a chunk of
      // kTokenChunk queries go in one call (all of a decode step's group), so that each tile of
      // queries reads the rows once instead of once per head. A query's result does not depend
      // on the chunk it is in (cpu/attend.h), so the bits are those of a call per head.
      const int64_t m = task.last_token - task.first_token;
      const int64_t heads_per_call = std::max<int64_t>(1, std::min(group, kTokenChunk / m));
      std::vector<const float*> queries(static_cast<size_t>(m * heads_per_call));
      std::vector<float*> outs(queries.size());
      std::vector<int64_t> counts(queries.size());
      for (int64_t h0 = task.first_head; h0 < task.last_head; h0 += heads_per_call) {
        const int64_t h1 = std::min(task.last_head, h0 + heads_per_call);
        size_t n = 0;
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t i = 0; i < m; ++i, ++n) {
            const int64_t t = own[static_cast<size_t>(task.first_token + i)];
            queries[n] = qd + q_at(0, h, t);
            outs[n] = od + o_at(0, h, t);
            counts[n] = step->token_position[t] + 1;
          }
        attendChunk(queries.data(), counts.data(), static_cast<int64_t>(n), head_dim, scale, rows,
                    outs.data(), scores);
      }
      return;
    }
    auto row_at = [&](const std::vector<const void*>& rows, int64_t position) {
      return static_cast<const float*>(rows[static_cast<size_t>(position / block_size - base_block)]) +
             (position % block_size) * head_dim;
    };
    for (int64_t c = task.first_token; c < task.last_token; ++c) {
      const int64_t t = own[static_cast<size_t>(c)];
      const int64_t first = first_visible(step->token_position[t]);
      const int64_t count = step->token_position[t] + 1 - first;
      for (int64_t h = task.first_head; h < task.last_head; ++h)
        attendOne(
            qd + q_at(0, h, t), count, head_dim, head_dim, scale,
            [&](int64_t j) { return row_at(key_blocks, first + j); },
            [&](int64_t j) { return row_at(value_blocks, first + j); }, alibi(h, first), scores,
            od + o_at(0, h, t), softcap);
    }
  });
  return okStatus();
}

Status llmPositions(KernelContext& ctx) {
  const Tensor* ids = ctx.input(0);
  if (!ids || ids->rank() != 2) return kernelError(ctx, "LlmPositions needs [batch, tokens] ids");
  const int64_t tokens = ids->dim(1);
  // The compiler gives the result dtype through the plan; int64 unless it asked for int32.
  DType dtype = ctx.params().getString("dtype", "int64") == "int32" ? DType::kInt32 : DType::kInt64;
  Tensor* out = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, dtype, {tokens}, &out));
  if (ctx.shapeOnly()) return okStatus();
  LlmStepContext* step = ctx.llmStep();
  if (step && static_cast<size_t>(tokens) != step->token_position.size())
    return kernelError(ctx, "the step has " + std::to_string(step->token_position.size()) +
                                " tokens, input_ids has " + std::to_string(tokens));
  for (int64_t t = 0; t < tokens; ++t) {
    int64_t p = step ? step->token_position[t] : t;
    if (dtype == DType::kInt64)
      out->data<int64_t>()[t] = p;
    else
      out->data<int32_t>()[t] = static_cast<int32_t>(p);
  }
  return okStatus();
}

Status llmLastTokens(KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  if (!x || x->rank() != 3) return kernelError(ctx, "LlmLastTokens needs [batch, tokens, features]");
  LlmStepContext* step = ctx.llmStep();
  Shape shape = x->shape();
  if (step) {
    if (x->dim(0) != 1 || static_cast<size_t>(x->dim(1)) != step->token_position.size())
      return kernelError(ctx, "a ragged step runs [1, " +
                                  std::to_string(step->token_position.size()) + "] tokens, got " +
                                  shapeToString(x->shape()));
    shape[1] = static_cast<int64_t>(step->last_token.size());
  }
  Tensor* out = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, x->dtype(), shape, &out));
  if (ctx.shapeOnly()) return okStatus();
  const size_t row_bytes = static_cast<size_t>(x->dim(2)) * dtypeSize(x->dtype());
  const auto* in = static_cast<const uint8_t*>(x->data());
  auto* dst = static_cast<uint8_t*>(out->data());
  if (!step) {
    std::memcpy(dst, in, row_bytes * static_cast<size_t>(x->dim(0) * x->dim(1)));
    return okStatus();
  }
  for (size_t s = 0; s < step->last_token.size(); ++s) {
    int32_t t = step->last_token[s];
    if (t < 0 || t >= x->dim(1)) return kernelError(ctx, "last token index out of range");
    std::memcpy(dst + s * row_bytes, in + static_cast<size_t>(t) * row_bytes, row_bytes);
  }
  return okStatus();
}

// Rotates the halves of one head by full-width per-token tables (x * cos + rotate_half(x) *
// sin, as models compute it): x[i] and x[i + half] use their own table entries.
void rotateHalvesByTable(float* x, const float* cos_row, const float* sin_row, int64_t half) {
  for (int64_t i = 0; i < half; ++i) {
    const float a = x[i], b = x[i + half];
    x[i] = a * cos_row[i] - b * sin_row[i];
    x[i + half] = b * cos_row[i + half] + a * sin_row[i + half];
  }
}

// The same for adjacent pairs (GPT-J's rotate_every_two): x[2i], x[2i + 1] with each value's
// own table entry, x * cos + rotate_every_two(x) * sin as the model computes it.
void rotatePairsByTable(float* x, const float* cos_row, const float* sin_row, int64_t half) {
  for (int64_t i = 0; i < half; ++i) {
    const float a = x[2 * i], b = x[2 * i + 1];
    x[2 * i] = a * cos_row[2 * i] - b * sin_row[2 * i];
    x[2 * i + 1] = b * cos_row[2 * i + 1] + a * sin_row[2 * i + 1];
  }
}

Status llmRope(KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  const Tensor* positions = ctx.input(1);
  const Tensor* cos = ctx.input(2);
  const Tensor* sin = ctx.input(3);
  if (!x || !cos || !sin || cos->shape() != sin->shape() || x->dtype() != DType::kFloat32 ||
      cos->dtype() != DType::kFloat32 || sin->dtype() != DType::kFloat32)
    return kernelError(ctx, "LlmRope needs float32 x and cos/sin of one shape");
  const bool token_major = ctx.params().getInt("num_heads", 0) > 0;
  int64_t batch = 0, heads = 0, tokens = 0, head_dim = 0, width = 0;
  if (token_major) {
    heads = ctx.params().getInt("num_heads", 0);
    head_dim = ctx.params().getInt("head_dim", 0);
    if (x->rank() != 3 || head_dim < 2 || head_dim % 2 != 0 || heads * head_dim > x->dim(2))
      return kernelError(ctx, "token-major x " + shapeToString(x->shape()) + " does not hold " +
                                  std::to_string(heads) + " heads of " + std::to_string(head_dim));
    batch = x->dim(0), tokens = x->dim(1), width = x->dim(2);
  } else {
    if (x->rank() != 4) return kernelError(ctx, "x must be [batch, heads, tokens, head_dim]");
    batch = x->dim(0), heads = x->dim(1), tokens = x->dim(2), head_dim = x->dim(3);
  }
  int64_t half = head_dim / 2;
  const bool tables = positions == nullptr;
  // Per-token tables: [batch | 1, 1, tokens, rotary_dim] for head-major x [batch, heads,
  // tokens, head_dim]; with token_axis = 1, x is [batch, tokens, heads, head_dim] (GPT-J's heads
  // before their transpose) and the tables [batch | 1, tokens, 1, rotary_dim]. Either table
  // layout holds one row per batch row and token, and the token-major form takes either. The
  // first rotary_dim values of each head rotate, the rest pass through (partial rotary).
  const int64_t token_axis = ctx.params().getInt("token_axis", 2);
  if (token_axis != 1 && token_axis != 2)
    return kernelError(ctx, "token_axis must be 1 or 2, got " + std::to_string(token_axis));
  if (!token_major && token_axis == 1) {
    tokens = x->dim(1);
    heads = x->dim(2);
  }
  if (tables) {
    if (cos->rank() != 4)
      return kernelError(ctx, "cos/sin tables must be 4-D, got " + shapeToString(cos->shape()));
    const bool rows_on_axis_1 = token_major ? cos->dim(2) == 1 : token_axis == 1;
    const int64_t table_tokens = rows_on_axis_1 ? cos->dim(1) : cos->dim(2);
    const int64_t table_unit = rows_on_axis_1 ? cos->dim(2) : cos->dim(1);
    if ((cos->dim(0) != 1 && cos->dim(0) != batch) || table_unit != 1 || table_tokens != tokens ||
        cos->dim(3) < 2 || cos->dim(3) % 2 != 0 || cos->dim(3) > head_dim)
      return kernelError(ctx, "cos/sin tables " + shapeToString(cos->shape()) + " do not fit x " +
                                  shapeToString(x->shape()));
    half = cos->dim(3) / 2;
  } else if (cos->rank() != 2 || cos->dim(1) * 2 != head_dim || positions->numElements() != tokens) {
    return kernelError(ctx, "x " + shapeToString(x->shape()) + ", positions " +
                                shapeToString(positions->shape()) + " and cos " +
                                shapeToString(cos->shape()) + " do not fit");
  }
  Tensor* out = nullptr;
  LLMC_RETURN_IF_ERROR(ctx.allocateOutput(0, DType::kFloat32, x->shape(), &out));
  if (ctx.shapeOnly()) return okStatus();
  const bool interleaved = ctx.params().getInt("interleaved", 0) != 0;
  std::vector<int64_t> pos;
  if (!tables) {
    LLMC_RETURN_IF_ERROR(readInt64s(positions, &pos));
    for (int64_t t = 0; t < tokens; ++t)
      if (pos[t] < 0 || pos[t] >= cos->dim(0))
        return kernelError(ctx, "position " + std::to_string(pos[t]) +
                                    " is outside the rotary cache of " + std::to_string(cos->dim(0)) +
                                    " positions");
  }
  // x copied, then each head's rotary values rotated in place, both in tasks on the pool (each
  // value computed alone, so any split gives the same bits).
  const float* xd = x->data<float>();
  float* y = out->data<float>();
  const int64_t elements = x->numElements();
  constexpr int64_t kCopyChunk = 1 << 16;
  parallelFor(ctx.threadPool(), (elements + kCopyChunk - 1) / kCopyChunk, [&](int64_t chunk) {
    const int64_t from = chunk * kCopyChunk;
    std::memcpy(y + from, xd + from,
                static_cast<size_t>(std::min(kCopyChunk, elements - from)) * sizeof(float));
  });
  constexpr int64_t kRopeRows = 16;  // (batch row, token) pairs a task
  const int64_t rows = batch * tokens;
  parallelFor(ctx.threadPool(), (rows + kRopeRows - 1) / kRopeRows, [&](int64_t task) {
    for (int64_t row = task * kRopeRows; row < std::min(rows, (task + 1) * kRopeRows); ++row) {
      const int64_t b = row / tokens, t = row % tokens;
      const int64_t table_row =
          tables ? ((cos->dim(0) == batch ? b : 0) * tokens + t) * cos->dim(3) : 0;
      for (int64_t h = 0; h < heads; ++h) {
        float* head = y + (token_major       ? (b * tokens + t) * width + h * head_dim
                           : token_axis == 1 ? ((b * tokens + t) * heads + h) * head_dim
                                             : ((b * heads + h) * tokens + t) * head_dim);
        if (tables && interleaved)
          rotatePairsByTable(head, cos->data<float>() + table_row, sin->data<float>() + table_row,
                             half);
        else if (tables)
          rotateHalvesByTable(head, cos->data<float>() + table_row, sin->data<float>() + table_row,
                              half);
        else
          rotateHead(head, cos->data<float>() + pos[t] * half, sin->data<float>() + pos[t] * half,
                     half, interleaved);
      }
    }
  });
  return okStatus();
}

}  // namespace

void registerLlmKernels(KernelRegistry& registry) {
  registry.add({"LlmRope", 3, 4, 1, 1, llmRope});
  registry.add({"LlmAttention", 3, 3, 1, 1, llmAttention});
  registry.add({"LlmPositions", 1, 1, 1, 1, llmPositions});
  registry.add({"LlmLastTokens", 1, 1, 1, 1, llmLastTokens});
}

}  // namespace llmc
