// The activations of llm.fused_matmul and the gated MLP on the device, shared by the epilogue
// kernels (small_kernels.cu, quant_matmul.cu). Names as in llm.fused_matmul.
#pragma once

#include <cstring>
#include <utility>

namespace llmc::cuda {

enum class Act : int { kNone, kRelu, kGeluErf, kGeluTanh, kSilu, kSigmoid, kTanh, kUnknown };

inline Act actFromName(const char* name) {
  if (!name) return Act::kUnknown;
  const std::pair<const char*, Act> names[] = {{"none", Act::kNone},         {"relu", Act::kRelu},
                                               {"gelu_erf", Act::kGeluErf},  {"gelu_tanh", Act::kGeluTanh},
                                               {"silu", Act::kSilu},         {"sigmoid", Act::kSigmoid},
                                               {"tanh", Act::kTanh}};
  for (const auto& [known, act] : names)
    if (std::strcmp(name, known) == 0) return act;
  return Act::kUnknown;
}

__device__ inline float activate(Act act, float v) {
  switch (act) {
    case Act::kRelu: return v > 0.0f ? v : 0.0f;
    case Act::kGeluErf: return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    case Act::kGeluTanh: return 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    case Act::kSilu: return v / (1.0f + expf(-v));
    case Act::kSigmoid: return 1.0f / (1.0f + expf(-v));
    case Act::kTanh: return tanhf(v);
    default: return v;
  }
}

}  // namespace llmc::cuda
