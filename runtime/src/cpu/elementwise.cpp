// CPU reference kernels, elementwise family: registration and the broadcast loop shared by
// elementwise_unary.cpp, elementwise_binary.cpp, elementwise_variadic.cpp and
// elementwise_cast.cpp.
#include <string>

#include "cpu/elementwise_common.h"

namespace llmc {

BroadcastLoop::BroadcastLoop(const Shape& output, const std::vector<const Shape*>& inputs)
    : strides_(inputs.size()) {
  num_elements_ = shapeNumElements(output);
  const size_t rank = output.size();
  // Each input's element strides aligned to the output's rank, 0 along broadcast dims.
  std::vector<std::vector<int64_t>> aligned(inputs.size(), std::vector<int64_t>(rank, 0));
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Shape& shape = *inputs[k];
    const size_t lead = rank - shape.size();
    int64_t stride = 1;
    for (size_t i = shape.size(); i-- > 0;) {
      aligned[k][lead + i] = shape[i] == 1 ? 0 : stride;
      stride *= shape[i];
    }
  }
  for (size_t d = 0; d < rank; ++d) {
    if (output[d] == 1) continue;
    bool mergeable = !dims_.empty();
    for (size_t k = 0; mergeable && k < inputs.size(); ++k)
      mergeable = strides_[k].back() == aligned[k][d] * output[d];
    if (mergeable) {
      dims_.back() *= output[d];
      for (size_t k = 0; k < inputs.size(); ++k) strides_[k].back() = aligned[k][d];
    } else {
      dims_.push_back(output[d]);
      for (size_t k = 0; k < inputs.size(); ++k) strides_[k].push_back(aligned[k][d]);
    }
  }
  if (dims_.empty()) {  // a scalar output (or all dims 1)
    dims_.push_back(1);
    for (auto& strides : strides_) strides.push_back(0);
  }
}

Status broadcastAll(const KernelContext& ctx, const std::vector<const Tensor*>& inputs,
                    Shape* out) {
  Shape shape;
  for (const Tensor* input : inputs) {
    if (!input) continue;
    LLMC_RETURN_IF_ERROR(broadcastShapes(shape, input->shape(), ctx.nodeName(), &shape));
  }
  *out = std::move(shape);
  return okStatus();
}

Status unsupportedDType(const KernelContext& ctx, const char* op, DType dtype) {
  return unimplemented("node '" + ctx.nodeName() + "': " + op + " does not support dtype " +
                       dtypeName(dtype));
}

void registerElementwiseKernels(KernelRegistry& registry) {
  registerUnaryKernels(registry);
  registerBinaryKernels(registry);
  registerVariadicKernels(registry);
  registerCastKernels(registry);
}

}  // namespace llmc
