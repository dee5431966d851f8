// The plan's arena layout and the check every backend applies to a kernel's outputs against
// the plan (core/plan.h).
#include "core/plan.h"

namespace llmc {

namespace {
constexpr uint64_t kAlign = 64;
uint64_t alignUp(uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

ArenaLayout::ArenaLayout(const std::vector<PlanSlot>& slots) {
  for (const PlanSlot& slot : slots) capacity.push_back(slot.size_bytes);
}

uint64_t ArenaLayout::layout() {
  total = 0;
  offset.resize(capacity.size());
  laid_out = capacity;
  for (size_t i = 0; i < capacity.size(); ++i) {
    offset[i] = total;
    total += alignUp(capacity[i]);
  }
  return total;
}

bool ArenaLayout::fits(int slot, uint64_t bytes) {
  const size_t s = static_cast<size_t>(slot);
  if (bytes <= laid_out[s]) return true;
  if (bytes > capacity[s]) capacity[s] = bytes;
  return false;
}

Status checkPlannedOutput(const Plan& plan, const PlanStep& step, size_t i, DType dtype,
                          const Shape& shape, uint64_t* bytes) {
  if (i >= step.outputs.size())
    return internalError("node '" + step.node + "': output index out of range");
  const PlanValue& value = plan.values[static_cast<size_t>(step.outputs[i])];
  // The compiler's inferred dtype and static dims must agree with what the kernel computes.
  if (dtype != value.dtype || (value.ranked && shape.size() != value.dims.size()))
    return internalError("node '" + step.node + "': kernel " + step.kernel_name + " produced " +
                         dtypeName(dtype) + shapeToString(shape) + " for '" + value.name +
                         "', the plan declares " + dtypeName(value.dtype) + " of rank " +
                         std::to_string(value.dims.size()));
  for (size_t d = 0; value.ranked && d < shape.size(); ++d) {
    if (value.dims[d].size >= 0 && value.dims[d].size != shape[d])
      return internalError("node '" + step.node + "': kernel " + step.kernel_name +
                           " produced shape " + shapeToString(shape) + " for '" + value.name +
                           "', the plan declares dim " + std::to_string(d) + " = " +
                           std::to_string(value.dims[d].size));
  }
  int64_t count = 0;
  if (!checkedNumElements(shape, &count))
    return invalidArgument("node '" + step.node + "': output shape " + shapeToString(shape) +
                           " is too large");
  *bytes = static_cast<uint64_t>(count) * dtypeSize(dtype);
  return okStatus();
}

}  // namespace llmc
