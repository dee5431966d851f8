// The activations and the bias/alpha/activation epilogue of the matrix-product kernels
// (LlmFusedMatMul, LlmGatedMlp, LlmQuantMatMul), named as in llm.fused_matmul.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

namespace llmc {

enum class Activation { kNone, kRelu, kGeluErf, kGeluTanh, kSilu, kSigmoid, kTanh, kUnknown };

inline Activation activationFromName(const std::string& name) {
  if (name.empty() || name == "none") return Activation::kNone;
  if (name == "relu") return Activation::kRelu;
  if (name == "gelu_erf") return Activation::kGeluErf;
  if (name == "gelu_tanh") return Activation::kGeluTanh;
  if (name == "silu") return Activation::kSilu;
  if (name == "sigmoid") return Activation::kSigmoid;
  if (name == "tanh") return Activation::kTanh;
  return Activation::kUnknown;
}

inline float sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }

inline float activate(Activation activation, float v) {
  switch (activation) {
    case Activation::kRelu: return v > 0 ? v : 0.0f;
    case Activation::kGeluErf: return 0.5f * v * (1.0f + std::erf(v * 0.70710678118654752f));
    case Activation::kGeluTanh:
      return 0.5f * v * (1.0f + std::tanh(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    case Activation::kSilu: return v * sigmoid(v);
    case Activation::kSigmoid: return sigmoid(v);
    case Activation::kTanh: return std::tanh(v);
    default: return v;
  }
}

// y = act(alpha * y + bias) over `rows` rows of `n_size`, the activation chosen once per call
// (a switch or a modulo per element would keep the loops from vectorizing).
template <Activation kAct>
void epilogueRows(float* y, int64_t rows, int64_t n_size, float alpha, const float* bias) {
  for (int64_t r = 0; r < rows; ++r) {
    float* __restrict row = y + r * n_size;
    if (bias)
      for (int64_t n = 0; n < n_size; ++n) row[n] = activate(kAct, alpha * row[n] + bias[n]);
    else
      for (int64_t n = 0; n < n_size; ++n) row[n] = activate(kAct, alpha * row[n]);
  }
}

inline void applyEpilogue(float* y, int64_t rows, int64_t n_size, float alpha, const float* bias,
                   Activation activation) {
  if (activation == Activation::kNone && alpha == 1.0f && !bias) return;
  switch (activation) {
    case Activation::kRelu: return epilogueRows<Activation::kRelu>(y, rows, n_size, alpha, bias);
    case Activation::kGeluErf: return epilogueRows<Activation::kGeluErf>(y, rows, n_size, alpha, bias);
    case Activation::kGeluTanh: return epilogueRows<Activation::kGeluTanh>(y, rows, n_size, alpha, bias);
    case Activation::kSilu: return epilogueRows<Activation::kSilu>(y, rows, n_size, alpha, bias);
    case Activation::kSigmoid: return epilogueRows<Activation::kSigmoid>(y, rows, n_size, alpha, bias);
    case Activation::kTanh: return epilogueRows<Activation::kTanh>(y, rows, n_size, alpha, bias);
    default: return epilogueRows<Activation::kNone>(y, rows, n_size, alpha, bias);
  }
}

}  // namespace llmc
