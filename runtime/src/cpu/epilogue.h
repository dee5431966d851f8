// The activations and the bias/alpha/activation epilogue of the matrix-product kernels
// (LlmFusedMatMul, LlmGatedMlp, LlmQuantMatMul), named as in llm.fused_matmul.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "cpu/exp_poly.h"

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

// The sigmoid of the activations: exp of -|z| through cpu/exp_poly.h (so that 8 and 16 lanes
// give these bits), then 1 / (1 + e) or e / (1 + e). Within 3 ulp of sigmoid in double over all
// of float32 (test/unit/cpu/isa_test.cpp).
inline float sigmoidPoly(float z) {
  const float e = expNonPositiveScalar(-std::fabs(z));
  return (z >= 0.0f ? 1.0f : e) / (1.0f + e);
}

// gelu_tanh's 0.5 v (1 + tanh(u)) is v sigmoid(2u), u = sqrt(2 / pi) (v + 0.044715 v^3).
inline float geluTanhArgument(float v) {
  return std::fma(0.044715f, v * v * v, v) * 1.5957691216057308f;
}

// One value of an activation; silu, sigmoid and gelu_tanh as their vector forms
// (activateRow, gatedRow) compute it.
inline float activate(Activation activation, float v) {
  switch (activation) {
    case Activation::kRelu: return v > 0 ? v : 0.0f;
    case Activation::kGeluErf: return 0.5f * v * (1.0f + std::erf(v * 0.70710678118654752f));
    case Activation::kGeluTanh: return v * sigmoidPoly(geluTanhArgument(v));
    case Activation::kSilu: return v * sigmoidPoly(v);
    case Activation::kSigmoid: return sigmoidPoly(v);
    case Activation::kTanh: return std::tanh(v);
    default: return v;
  }
}

// The activations computed in vectors where the CPU has AVX2/FMA or AVX-512 (silu, sigmoid,
// gelu_tanh; cpu/activation_rows.cpp), with activate()'s bits at every ISA level and for every
// element whatever its place in the row (tails run masked).
bool vectorActivation(Activation activation);
// row[i] = act(row[i]) for i < n.
void activateRow(Activation activation, float* row, int64_t n);
// y[i] = act(gate[i]) * up[i] for i < n; y may be gate or up.
void gatedRow(Activation activation, const float* gate, const float* up, float* y, int64_t n);

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
  if (vectorActivation(activation)) {
    if (alpha != 1.0f || bias) epilogueRows<Activation::kNone>(y, rows, n_size, alpha, bias);
    for (int64_t r = 0; r < rows; ++r) activateRow(activation, y + r * n_size, n_size);
    return;
  }
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
