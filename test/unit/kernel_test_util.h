// A KernelContext for unit tests: owns inputs, parameters and outputs, and runs one kernel
// from the reference registry by name.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/dispatch.h"
#include "core/kernel.h"

namespace llmc::testing {

class TestKernelContext : public KernelContext {
 public:
  // Inputs; std::nullopt marks an absent optional input.
  std::vector<std::optional<Tensor>> inputs;
  KernelParams kernel_params;
  std::vector<Tensor> outputs;
  size_t num_outputs = 1;
  bool shape_only = false;
  std::string node_name = "test_node";
  ThreadPool* pool = nullptr;  // the threads the kernel may use (none: the caller alone)
  // Set: every input counts as an engine weight and what the kernel derives from them is kept
  // here (as an executor keeps it), by key; how many times each key was built.
  std::map<std::string, Derived>* derived = nullptr;
  std::map<std::string, int>* builds = nullptr;

  size_t numInputs() const override { return inputs.size(); }
  const Tensor* input(size_t i) const override {
    return i < inputs.size() && inputs[i] ? &*inputs[i] : nullptr;
  }
  size_t numOutputs() const override { return num_outputs; }
  Status allocateOutput(size_t i, DType dtype, const Shape& shape, Tensor** out) override {
    if (i >= num_outputs) return internalError("output index out of range");
    if (outputs.size() < num_outputs) outputs.resize(num_outputs);
    outputs[i] = shape_only ? Tensor::view(dtype, shape, static_cast<void*>(nullptr))
                            : Tensor::allocate(dtype, shape);
    *out = &outputs[i];
    return okStatus();
  }
  const KernelParams& params() const override { return kernel_params; }
  const std::string& nodeName() const override { return node_name; }
  bool shapeOnly() const override { return shape_only; }
  ThreadPool* threadPool() const override { return pool; }
  std::shared_ptr<const void> derivedFromWeights(
      std::initializer_list<size_t>, const std::string& key,
      const std::function<Derived()>& build) const override {
    if (!derived) return nullptr;
    Derived& entry = (*derived)[key];
    if (!entry.data) {
      entry = build();
      if (builds) ++(*builds)[key];
    }
    return entry.data;
  }

  Status run(const std::string& kernel) {
    const KernelDef* def = KernelRegistry::cpuReference().find(kernel);
    if (!def) return notFound("no kernel " + kernel);
    return def->fn(*this);
  }
};

// Typed kernel parameters.
inline KernelParam intParam(int64_t value) {
  KernelParam p;
  p.kind = KernelParam::Kind::kInt;
  p.i = value;
  return p;
}
inline KernelParam floatParam(double value) {
  KernelParam p;
  p.kind = KernelParam::Kind::kFloat;
  p.f = value;
  return p;
}
inline KernelParam stringParam(const std::string& value) {
  KernelParam p;
  p.kind = KernelParam::Kind::kString;
  p.s = value;
  return p;
}
inline KernelParam intsParam(std::vector<int64_t> values) {
  KernelParam p;
  p.kind = KernelParam::Kind::kInts;
  p.ints = std::move(values);
  return p;
}
inline KernelParam floatsParam(std::vector<double> values) {
  KernelParam p;
  p.kind = KernelParam::Kind::kFloats;
  p.floats = std::move(values);
  return p;
}

// Kernel parameters from {name, param} pairs.
inline KernelParams params(std::initializer_list<std::pair<const char*, KernelParam>> entries) {
  KernelParams p;
  for (const auto& [name, value] : entries) p.set(name, value);
  return p;
}

template <typename T>
Tensor makeTensor(DType dtype, Shape shape, const std::vector<T>& values) {
  Tensor t = Tensor::allocate(dtype, std::move(shape));
  EXPECT_EQ(static_cast<size_t>(t.numElements()), values.size());
  if (!values.empty()) std::memcpy(t.data(), values.data(), values.size() * sizeof(T));
  return t;
}

inline Tensor makeFloat(Shape shape, const std::vector<float>& v) {
  return makeTensor(DType::kFloat32, shape, v);
}
inline Tensor makeInt64(Shape shape, const std::vector<int64_t>& v) {
  return makeTensor(DType::kInt64, shape, v);
}

// A float32 tensor of N(0, 1) values (never zeros: they hide unwritten outputs).
inline Tensor randomFloat(Shape shape, uint32_t seed) {
  Tensor t = Tensor::allocate(DType::kFloat32, std::move(shape));
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  for (int64_t i = 0; i < t.numElements(); ++i) t.data<float>()[i] = normal(rng);
  return t;
}

// Runs reference kernel `kernel` and returns output `output` (a failure is a test failure).
inline Tensor runKernel(const std::string& kernel, std::vector<std::optional<Tensor>> inputs,
                        KernelParams params = {}, size_t num_outputs = 1, size_t output = 0) {
  TestKernelContext ctx;
  ctx.inputs = std::move(inputs);
  ctx.kernel_params = std::move(params);
  ctx.num_outputs = num_outputs;
  Status status = ctx.run(kernel);
  EXPECT_TRUE(status.ok()) << kernel << ": " << status.message();
  return status.ok() ? ctx.outputs[output] : Tensor();
}

template <typename T>
std::vector<T> values(const Tensor& t) {
  std::vector<T> out(static_cast<size_t>(t.numElements()));
  if (!out.empty()) std::memcpy(out.data(), t.data(), out.size() * sizeof(T));
  return out;
}

}  // namespace llmc::testing
