// --llmc-fuse-elementwise: a tree of float32 elementwise ops (unary, and binary with numpy
// broadcasting) whose inner results each feed only the next op becomes one llm.elementwise,
// evaluated in one pass over memory. Runs last, on what the other fusions left.
#include <numeric>

#include "transforms/FusionUtil.h"
#include "transforms/KernelEvaluator.h"
#include "transforms/Passes.h"

namespace llmc {
#define GEN_PASS_DEF_FUSEELEMENTWISE
#include "transforms/Passes.h.inc"
}  // namespace llmc

using namespace mlir;

namespace llmc {
namespace {

constexpr const char* kPass = "fuse-elementwise";

// llm.elementwise's opcode for an nn op (LLMOps.td), or -1.
int64_t opcodeOf(Operation* op) {
  static const std::pair<const char*, int64_t> kOpcodes[] = {
      {"nn.add", 0},   {"nn.sub", 1},   {"nn.mul", 2},         {"nn.div", 3},   {"nn.pow", 4},
      {"nn.max", 5},   {"nn.min", 6},   {"nn.neg", 16},        {"nn.exp", 17},  {"nn.log", 18},
      {"nn.sqrt", 19}, {"nn.reciprocal", 20}, {"nn.tanh", 21}, {"nn.erf", 22},  {"nn.sigmoid", 23},
      {"nn.relu", 24}, {"nn.abs", 25},  {"nn.sin", 26},        {"nn.cos", 27}};
  for (const auto& [name, opcode] : kOpcodes) {
    if (!isOp(op, name)) continue;
    if (op->getNumResults() != 1 || !isFloat32Tensor(op->getResult(0).getType())) return -1;
    if (opcode < 16 && op->getNumOperands() != 2) return -1;
    if (opcode >= 16 && op->getNumOperands() != 1) return -1;
    for (Value operand : op->getOperands())
      if (!isFloat32Tensor(operand.getType())) return -1;
    return opcode;
  }
  return -1;
}

class FuseElementwisePass : public impl::FuseElementwiseBase<FuseElementwisePass> {
 public:
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    // Union-find over candidate ops: an op joins the group of each operand's producer when
    // that producer is a candidate whose result only it uses.
    std::vector<Operation*> ops;
    llvm::DenseMap<Operation*, size_t> index;
    for (Operation& op : func.getBody().front())
      if (opcodeOf(&op) >= 0) {
        index[&op] = ops.size();
        ops.push_back(&op);
      }
    std::vector<size_t> parent(ops.size());
    std::iota(parent.begin(), parent.end(), 0);
    auto find = [&](size_t i) {
      while (parent[i] != i) i = parent[i] = parent[parent[i]];
      return i;
    };
    for (size_t i = 0; i < ops.size(); ++i)
      for (Value operand : ops[i]->getOperands()) {
        Operation* def = operand.getDefiningOp();
        auto it = def ? index.find(def) : index.end();
        if (it != index.end() && operand.hasOneUse()) parent[find(it->second)] = find(i);
      }
    std::map<size_t, std::vector<Operation*>> groups;  // in block order within each group
    for (size_t i = 0; i < ops.size(); ++i) groups[find(i)].push_back(ops[i]);
    for (auto& [root, members] : groups)
      if (members.size() >= 2) fuse(func, members);
    eraseDeadOps(func.getBody().front());
  }

  void fuse(func::FuncOp func, const std::vector<Operation*>& members) {
    Operation* root = members.back();
    llvm::DenseMap<Value, int64_t> registers;
    SmallVector<Value> inputs;
    SmallVector<float> constants;
    llvm::DenseSet<Operation*> in_group(members.begin(), members.end());
    // Inputs first: every operand produced outside the group (scalar constants become
    // immediates).
    for (Operation* op : members)
      for (Value operand : op->getOperands()) {
        Operation* def = operand.getDefiningOp();
        if ((def && in_group.contains(def)) || registers.count(operand)) continue;
        if (auto scalar = scalarConstant(operand)) {
          constants.push_back(static_cast<float>(*scalar));
          registers[operand] = -static_cast<int64_t>(constants.size());
          continue;
        }
        registers[operand] = static_cast<int64_t>(inputs.size());
        inputs.push_back(operand);
      }
    if (inputs.empty()) return;  // constants only: folding's business
    SmallVector<int64_t> program;
    int64_t next = static_cast<int64_t>(inputs.size());
    for (Operation* op : members) {
      int64_t opcode = opcodeOf(op);
      program.push_back(opcode);
      program.push_back(registers[op->getOperand(0)]);
      program.push_back(opcode < 16 ? registers[op->getOperand(1)] : 0);
      registers[op->getResult(0)] = next++;
    }
    OpBuilder b(root);
    std::vector<Operation*> replaced(members.begin(), members.end());
    Value y = createOp(b, fusedLoc(func.getContext(), replaced), "llm.elementwise", inputs,
                       root->getResult(0).getType(),
                       {b.getNamedAttr("program", b.getDenseI64ArrayAttr(program)),
                        b.getNamedAttr("constants", b.getDenseF32ArrayAttr(constants))});
    carryNames(root, y.getDefiningOp());
    root->getResult(0).replaceAllUsesWith(y);
    logFusion(func, {true, kPass, "elementwise-" + std::to_string(members.size()),
                     nodeNames(replaced), ""});
    for (auto it = replaced.rbegin(); it != replaced.rend(); ++it) (*it)->erase();
  }
};

}  // namespace
}  // namespace llmc
