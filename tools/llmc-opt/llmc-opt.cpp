// llmc-opt: mlir-opt with llmc's dialects and passes, for lit tests and debugging.
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"
#include "transforms/Passes.h"

int main(int argc, char** argv) {
  mlir::DialectRegistry registry;
  registry.insert<llmc::nn::NNDialect, llmc::exec::ExecDialect, llmc::llm::LLMDialect, mlir::func::FuncDialect>();
  llmc::registerLLMCPasses();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  return mlir::asMainReturnCode(mlir::MlirOptMain(argc, argv, "llmc optimizer driver\n", registry));
}
