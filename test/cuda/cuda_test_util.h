// Shared pieces of the GPU tests: a fixture that skips without a usable GPU (saying why), and
// device buffers that copy to and from host tensors.
#pragma once

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <vector>

#include "cuda/cuda_status.h"
#include "cuda/device.h"
#include "kernel_test_util.h"

namespace llmc::testing {

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cuda::DeviceInfo info;
    Status status = cuda::probeDevice(&info);
    if (!status.ok()) GTEST_SKIP() << "no usable GPU: " << status.message();
  }
};

// A device copy of a host tensor (any dtype), or `count` floats poisoned with NaN so that an
// element the kernel failed to write shows.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(const Tensor& host)
      : bytes_(static_cast<size_t>(host.numElements()) * dtypeSize(host.dtype())) {
    EXPECT_EQ(cudaMalloc(&data_, bytes_), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(data_, host.data(), bytes_, cudaMemcpyHostToDevice), cudaSuccess);
  }
  explicit DeviceBuffer(int64_t count) : bytes_(static_cast<size_t>(count) * sizeof(float)) {
    EXPECT_EQ(cudaMalloc(&data_, bytes_), cudaSuccess);
    std::vector<float> nan(static_cast<size_t>(count), std::numeric_limits<float>::quiet_NaN());
    EXPECT_EQ(cudaMemcpy(data_, nan.data(), bytes_, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  float* get() { return static_cast<float*>(data_); }
  template <typename T>
  T* as() { return static_cast<T*>(data_); }
  Tensor toHost(Shape shape) const {
    Tensor t = Tensor::allocate(DType::kFloat32, std::move(shape));
    EXPECT_EQ(static_cast<size_t>(t.numElements()) * sizeof(float), bytes_);
    EXPECT_EQ(cudaMemcpy(t.data(), data_, bytes_, cudaMemcpyDeviceToHost), cudaSuccess);
    return t;
  }

 private:
  size_t bytes_ = 0;
  void* data_ = nullptr;
};


// ||a - b|| / ||b|| (NaN anywhere gives infinity).
inline double relativeL2(const Tensor& a, const Tensor& b) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < b.numElements(); ++i) {
    const double x = a.data<float>()[i], y = b.data<float>()[i];
    if (std::isnan(x) || std::isnan(y)) return INFINITY;
    diff += (x - y) * (x - y);
    norm += y * y;
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}


}  // namespace llmc::testing
