// The CUDA device llmc runs on: probing it, with a clear error when there is no usable driver
// or GPU, or when the GPU is older than the engine's target.
#pragma once

#include <cstddef>
#include <string>

#include "llmc/status.h"

namespace llmc::cuda {

struct DeviceInfo {
  int device = 0;
  int device_count = 0;
  std::string name;
  int sm_major = 0, sm_minor = 0;  // compute capability
  size_t memory_bytes = 0;
  int multiprocessors = 0;
  int driver_version = 0;   // e.g. 13000 for CUDA 13.0
  int runtime_version = 0;  // the CUDA runtime llmc was built with
};

// Fills `info` for device 0. kUnavailable with a readable message when the driver is missing or
// too old, or there is no GPU; kFailedPrecondition for GPUs older than sm_80.
Status probeDevice(DeviceInfo* info);

// Whether `info` can run an engine built for `target` ("cuda-sm90": sm_90 or newer).
Status checkTarget(const DeviceInfo& info, const std::string& target);

}  // namespace llmc::cuda
