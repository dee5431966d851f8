// Probing the CUDA device (device.h).
#include "cuda/device.h"

#include "cuda/cuda_status.h"

namespace llmc::cuda {

Status probeDevice(DeviceInfo* info) {
  *info = DeviceInfo();
  cudaRuntimeGetVersion(&info->runtime_version);
  cudaError_t error = cudaDriverGetVersion(&info->driver_version);
  if (error != cudaSuccess || info->driver_version == 0)
    return unavailable("no NVIDIA driver: the CUDA backend needs a driver for CUDA " +
                       std::to_string(info->runtime_version / 1000) + "." +
                       std::to_string(info->runtime_version % 1000 / 10) + " or newer");
  if (info->driver_version < info->runtime_version)
    return unavailable("the NVIDIA driver supports CUDA " + std::to_string(info->driver_version / 1000) +
                       "." + std::to_string(info->driver_version % 1000 / 10) +
                       ", llmc was built with CUDA " + std::to_string(info->runtime_version / 1000) +
                       "." + std::to_string(info->runtime_version % 1000 / 10) + ": update the driver");
  LLMC_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&info->device_count), "cudaGetDeviceCount");
  if (info->device_count == 0) return unavailable("no CUDA device");
  cudaDeviceProp props;
  LLMC_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&props, info->device), "cudaGetDeviceProperties");
  info->name = props.name;
  info->sm_major = props.major;
  info->sm_minor = props.minor;
  info->memory_bytes = props.totalGlobalMem;
  info->multiprocessors = props.multiProcessorCount;
  if (info->sm_major < 8)
    return failedPrecondition(info->name + " is sm_" + std::to_string(info->sm_major) +
                              std::to_string(info->sm_minor) + "; llmc's CUDA backend needs sm_80 or newer");
  return okStatus();
}

Status checkTarget(const DeviceInfo& info, const std::string& target) {
  const std::string prefix = "cuda-sm";
  if (target.compare(0, prefix.size(), prefix) != 0)
    return invalidArgument("engine target '" + target + "' is not a CUDA target");
  const int wanted = std::atoi(target.c_str() + prefix.size());
  const int have = info.sm_major * 10 + info.sm_minor;
  if (wanted <= 0) return invalidArgument("engine target '" + target + "' names no compute capability");
  if (have < wanted)
    return failedPrecondition("the engine targets sm_" + std::to_string(wanted) + ", " + info.name +
                              " is sm_" + std::to_string(have));
  return okStatus();
}

}  // namespace llmc::cuda
