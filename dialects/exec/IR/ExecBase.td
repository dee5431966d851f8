// The exec dialect: the execution plan, step by step, as the runtime will run it.
#ifndef LLMC_EXEC_BASE
#define LLMC_EXEC_BASE

include "mlir/IR/OpBase.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Exec_Dialect : Dialect {
  let name = "exec";
  let summary = "Execution plan: kernel calls, weights and the arena memory plan";
  let description = [{
    The lowest level before serialization. Each `exec.call` is one engine step: a kernel
    from the runtime's registry, its typed parameters and its operands. After memory
    planning every call result carries the arena slot it lives in; the function carries the
    slot sizes and the arena size. The serializer writes exactly what is here.
  }];
  let cppNamespace = "::llmc::exec";
  let usePropertiesForAttributes = 0;
}

class Exec_Op<string mnemonic, list<Trait> traits = []> : Op<Exec_Dialect, mnemonic, traits>;

#endif // LLMC_EXEC_BASE
