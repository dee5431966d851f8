// --llmc-plan-memory: liveness-based reuse of one arena. Each exec.call result gets a slot;
// a slot is reused once its previous tenant's last reader has run.
#include <map>

#include "core/engine_file.h"
#include "llmc/tensor.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "transforms/KernelEvaluator.h"
#include "transforms/Passes.h"

namespace llmc {
#define GEN_PASS_DEF_PLANMEMORY
#include "transforms/Passes.h.inc"
}  // namespace llmc

using namespace mlir;

namespace llmc {
namespace {

uint64_t alignUp(uint64_t n) {
  return (n + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
}

class PlanMemoryPass : public impl::PlanMemoryBase<PlanMemoryPass> {
 public:
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    Block& body = func.getBody().front();

    // Planning value of each symbol: its max when bounded, else its min (1 by default).
    std::map<std::string, int64_t> planning;
    if (auto ranges = func->getAttrOfType<DictionaryAttr>("llmc.symbol_ranges")) {
      for (NamedAttribute range : ranges) {
        auto bounds = cast<DenseI64ArrayAttr>(range.getValue()).asArrayRef();
        planning[range.getName().getValue().str()] = bounds[1] >= 0 ? bounds[1] : bounds[0];
      }
    }

    // Position of each op and the last position that reads each value.
    llvm::DenseMap<Operation*, int64_t> position;
    int64_t index = 0;
    for (Operation& op : body) position[&op] = index++;
    int64_t end = index;
    llvm::DenseMap<Value, int64_t> last_read;
    for (Operation& op : body) {
      for (Value operand : op.getOperands())
        last_read[operand] = isa<func::ReturnOp>(op) ? end : position[&op];
    }

    struct Slot {
      uint64_t size_bytes = 0;
      int64_t free_after = -1;  // position of the last reader of the current tenant
    };
    std::vector<Slot> slots;
    for (Operation& op : body) {
      auto call = dyn_cast<exec::CallOp>(op);
      if (!call) continue;
      int64_t here = position[&op];
      auto dims = call->getAttrOfType<ArrayAttr>("llmc.dims");
      SmallVector<int64_t> assigned;
      for (unsigned r = 0; r < call.getNumResults(); ++r) {
        Value result = call.getResult(r);
        uint64_t bytes = plannedBytes(
            result.getType(), dims && r < dims.size() ? dyn_cast<ArrayAttr>(dims[r]) : ArrayAttr(),
            planning);
        // A result nobody reads still needs its slot during this step.
        int64_t dead_after = last_read.count(result) ? last_read[result] : here;
        // Best fit among slots free before this step; else grow the largest free one; else new.
        int best = -1;
        for (size_t s = 0; s < slots.size(); ++s) {
          if (slots[s].free_after >= here) continue;
          if (best < 0) {
            best = static_cast<int>(s);
            continue;
          }
          const Slot& current = slots[static_cast<size_t>(best)];
          bool fits = slots[s].size_bytes >= bytes, best_fits = current.size_bytes >= bytes;
          if ((fits && (!best_fits || slots[s].size_bytes < current.size_bytes)) ||
              (!fits && !best_fits && slots[s].size_bytes > current.size_bytes))
            best = static_cast<int>(s);
        }
        if (best < 0) {
          slots.push_back({});
          best = static_cast<int>(slots.size() - 1);
        }
        Slot& slot = slots[static_cast<size_t>(best)];
        slot.size_bytes = std::max(slot.size_bytes, alignUp(bytes));
        assigned.push_back(best);
        // Results of one step must not share a slot: mark busy through this step at least.
        slot.free_after = std::max(dead_after, here);
      }
      call.setSlotsAttr(DenseI64ArrayAttr::get(&getContext(), assigned));
    }

    SmallVector<int64_t> sizes;
    uint64_t arena = 0;
    for (const Slot& slot : slots) {
      sizes.push_back(static_cast<int64_t>(slot.size_bytes));
      arena += slot.size_bytes;
    }
    Builder b(&getContext());
    func->setAttr("exec.slot_sizes", b.getDenseI64ArrayAttr(sizes));
    func->setAttr("exec.arena_bytes", b.getI64IntegerAttr(static_cast<int64_t>(arena)));
  }

 private:
  static uint64_t plannedBytes(Type type, ArrayAttr dims,
                               const std::map<std::string, int64_t>& planning) {
    auto ranked = dyn_cast<RankedTensorType>(type);
    if (!ranked) return 0;  // rank known only at run time: the runtime sizes the slot
    DType dtype = dtypeFromMlir(ranked.getElementType());
    uint64_t elements = 1;
    for (int64_t d = 0; d < ranked.getRank(); ++d) {
      int64_t size = ranked.getDimSize(d);
      if (ShapedType::isDynamic(size)) {
        std::string name = dims && d < static_cast<int64_t>(dims.size())
                               ? cast<StringAttr>(dims[d]).getValue().str()
                               : "";
        auto it = planning.find(name);
        size = it != planning.end() ? it->second : 1;
      }
      elements *= static_cast<uint64_t>(size);
    }
    return elements * dtypeSize(dtype);
  }
};

}  // namespace
}  // namespace llmc
