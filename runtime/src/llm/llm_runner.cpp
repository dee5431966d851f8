// LlmRunner: ragged steps over the paged KV cache (see llm_runner.h).
#include "llm/llm_runner.h"

#include <algorithm>
#include <cstring>

#include "core/backend.h"
#include "core/half.h"
#include "core/internal_access.h"

namespace llmc {

Status copyLogitsRow(const Tensor& logits, int64_t row, std::vector<float>* out) {
  const int64_t vocab = logits.dim(logits.rank() - 1);
  const int64_t offset = row * vocab;
  out->resize(static_cast<size_t>(vocab));
  switch (logits.dtype()) {
    case DType::kFloat32:
      std::memcpy(out->data(), logits.data<float>() + offset, vocab * sizeof(float));
      break;
    case DType::kFloat16:
      for (int64_t i = 0; i < vocab; ++i) (*out)[i] = toFloat(logits.data<Float16>()[offset + i]);
      break;
    case DType::kBFloat16:
      for (int64_t i = 0; i < vocab; ++i) (*out)[i] = toFloat(logits.data<BFloat16>()[offset + i]);
      break;
    default:
      return invalidArgument(std::string("logits of dtype ") + dtypeName(logits.dtype()) +
                             " are not supported");
  }
  return okStatus();
}

Status LlmRunner::create(std::shared_ptr<const Engine> engine, int64_t kv_cache_tokens,
                         std::unique_ptr<LlmRunner>* out, DType kv_dtype,
                         const SessionOptions& session_options, bool kv_prefault) {
  if (!engine || !engine->llmConfig())
    return invalidArgument("LlmRunner needs an engine compiled as a language model");
  const LlmConfig& config = *engine->llmConfig();
  std::unique_ptr<LlmRunner> runner(new LlmRunner());
  KvCacheSpec spec;
  spec.num_layers = config.num_layers;
  spec.num_kv_heads = config.num_kv_heads;
  spec.head_dim = config.head_dim;
  if (kv_dtype != kKvCacheAuto && kv_dtype != DType::kFloat32 && kv_dtype != DType::kFloat16 &&
      kv_dtype != DType::kBFloat16 && !isQuantizedKvDType(kv_dtype))
    return invalidArgument(std::string("KV cache dtype ") + dtypeName(kv_dtype) +
                           " is not supported (auto, float32, float16, bfloat16, int8, or uint8 "
                           "for fp8)");
  spec.block_size = 16;
  spec.prefault = kv_prefault;
  LLMC_RETURN_IF_ERROR(Session::create(engine, session_options, &runner->session_));
  // A backend with its own copy of the cache (the CUDA backend's device pools: float32
  // whatever the host cache stores) makes that dtype the automatic choice and sets the
  // budget in it.
  const DType device_kv = InternalAccess::backend(*runner->session_).device_kv_dtype;
  if (kv_dtype == kKvCacheAuto)
    kv_dtype = device_kv != DType::kUndefined ? device_kv : kvCacheDtypeFor(*engine);
  spec.dtype = kv_dtype;
  if (kv_cache_tokens <= 0) {
    KvCacheSpec budget_spec = spec;
    if (device_kv != DType::kUndefined) budget_spec.dtype = device_kv;
    int64_t budget_blocks = 0;
    LLMC_RETURN_IF_ERROR(KvCache::numBlocksForBudget(budget_spec, int64_t{1} << 30, &budget_blocks));
    kv_cache_tokens = std::min(4 * config.max_context, budget_blocks * spec.block_size);
  }
  spec.num_blocks = (kv_cache_tokens + spec.block_size - 1) / spec.block_size;
  LLMC_RETURN_IF_ERROR(KvCache::create(spec, &runner->cache_));
  for (const TensorInfo& input : engine->inputs())
    if (input.name == config.input_ids) runner->ids_dtype_ = input.dtype;
  for (size_t i = 0; i < engine->outputs().size(); ++i)
    if (engine->outputs()[i].name == config.logits) runner->logits_index_ = i;
  runner->engine_ = std::move(engine);
  runner->context_.cache = runner->cache_.get();
  *out = std::move(runner);
  return okStatus();
}

Status LlmRunner::addSequence(int64_t id, std::span<const int32_t> tokens, int64_t* num_cached) {
  return cache_->addSequence(id, tokens, num_cached);
}

Status LlmRunner::appendToken(int64_t id, int32_t token) {
  return cache_->appendTokens(id, std::span<const int32_t>(&token, 1));
}

void LlmRunner::removeSequence(int64_t id) {
  if (cache_->hasSequence(id)) (void)cache_->removeSequence(id);
}

Status LlmRunner::step(const std::vector<Work>& work, std::vector<std::vector<float>>* logits) {
  return step(work, nullptr, logits);
}

Status LlmRunner::step(const std::vector<Work>& work, DeviceSampling* sampling,
                       std::vector<std::vector<float>>* logits) {
  LlmStepContext& ctx = context_;
  if (sampling) {
    if (sampling->temperature > 0 && sampling->uniform.size() != work.size())
      return invalidArgument("step: device sampling needs one uniform draw per work item");
    sampling->logits_output = logits_index_;
    sampling->done = false;
    sampling->ids.clear();
    sampling->logprobs.clear();
  }
  ctx.token_sequence.clear();
  ctx.token_position.clear();
  ctx.token_slot.clear();
  ctx.block_tables.assign(work.size(), {});
  ctx.last_token.clear();
  std::vector<int64_t> ids;
  for (size_t w = 0; w < work.size(); ++w) {
    const Work& item = work[w];
    std::span<const int32_t> tokens;
    LLMC_RETURN_IF_ERROR(cache_->tokens(item.id, &tokens));
    if (item.count < 1 || item.first < 0 ||
        item.first + item.count > static_cast<int64_t>(tokens.size()))
      return invalidArgument("step: sequence " + std::to_string(item.id) + " holds " +
                             std::to_string(tokens.size()) + " tokens; cannot compute [" +
                             std::to_string(item.first) + ", " +
                             std::to_string(item.first + item.count) + ")");
    std::span<const int32_t> table;
    LLMC_RETURN_IF_ERROR(cache_->blockTable(item.id, &table));
    ctx.block_tables[w].assign(table.begin(), table.end());
    for (int64_t p = item.first; p < item.first + item.count; ++p) {
      KvSlot slot;
      LLMC_RETURN_IF_ERROR(cache_->slotFor(item.id, p, &slot));
      ctx.token_sequence.push_back(static_cast<int32_t>(w));
      ctx.token_position.push_back(p);
      ctx.token_slot.push_back(slot);
      ids.push_back(tokens[static_cast<size_t>(p)]);
    }
    ctx.last_token.push_back(static_cast<int32_t>(ids.size() - 1));
  }
  const int64_t num_tokens = static_cast<int64_t>(ids.size());
  Tensor input = Tensor::allocate(ids_dtype_, {1, num_tokens});
  for (int64_t t = 0; t < num_tokens; ++t) {
    if (ids_dtype_ == DType::kInt64)
      input.data<int64_t>()[t] = ids[static_cast<size_t>(t)];
    else
      input.data<int32_t>()[t] = static_cast<int32_t>(ids[static_cast<size_t>(t)]);
  }
  std::vector<NamedTensor> outputs;
  ctx.sampling = sampling;
  Status run =
      InternalAccess::runStep(*session_, {{config().input_ids, std::move(input)}}, &outputs, &ctx);
  ctx.sampling = nullptr;
  LLMC_RETURN_IF_ERROR(run);
  if (sampling && sampling->done) {
    if (sampling->ids.size() != work.size() || sampling->logprobs.size() != work.size())
      return internalError("step: the backend sampled " + std::to_string(sampling->ids.size()) + " tokens for " +
                           std::to_string(work.size()) + " work items");
    logits->assign(work.size(), {});
    for (const Work& item : work)
      LLMC_RETURN_IF_ERROR(cache_->commitTokens(item.id, item.first + item.count));
    return okStatus();
  }
  const Tensor& out = outputs[logits_index_].tensor;
  // Logits for every token, or (an engine whose LM head reads llm.last_tokens) only for each
  // work item's last token.
  const int64_t rows = out.rank() == 3 ? out.dim(1) : -1;
  const bool per_item = rows == static_cast<int64_t>(work.size()) && rows != num_tokens;
  if (out.rank() != 3 || out.dim(0) != 1 || (rows != num_tokens && !per_item))
    return internalError("step: logits have shape " + shapeToString(out.shape()) + ", expected [1, " +
                         std::to_string(num_tokens) + " or " + std::to_string(work.size()) +
                         ", vocab]");
  logits->assign(work.size(), {});
  for (size_t w = 0; w < work.size(); ++w)  // row w of per-item logits, else item w's last token
    LLMC_RETURN_IF_ERROR(copyLogitsRow(
        out, per_item ? static_cast<int64_t>(w) : ctx.last_token[w], &(*logits)[w]));
  for (const Work& item : work)
    LLMC_RETURN_IF_ERROR(cache_->commitTokens(item.id, item.first + item.count));
  return okStatus();
}

bool LlmRunner::samplesOnDevice() const {
  return InternalAccess::backend(*session_).samples_on_device;
}

}  // namespace llmc
