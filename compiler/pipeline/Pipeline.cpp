// The compile pipeline: ONNX -> nn -> (shape inference, folding, canonicalization, CSE)
// -> exec -> memory plan -> engine file.
#include "pipeline/Pipeline.h"

#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include "core/engine_file.h"
#include "importer/OnnxImporter.h"
#include "llmc/tokenizer.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/Timing.h"
#include "mlir/Transforms/Passes.h"
#include "serializer/Serializer.h"
#include "transforms/KernelEvaluator.h"
#include "transforms/Passes.h"

using namespace mlir;

namespace llmc {

namespace {

std::string hex64(uint64_t value) {
  char buffer[17];
  std::snprintf(buffer, sizeof(buffer), "%016llx", static_cast<unsigned long long>(value));
  return buffer;
}

std::string describeLocation(Location loc) {
  if (auto name = dyn_cast<NameLoc>(loc)) return "node '" + name.getName().str() + "'";
  if (auto file = dyn_cast<FileLineColLoc>(loc)) return file.getFilename().str();
  return "";
}

std::string joinLines(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& line : lines) text += (text.empty() ? "" : "\n") + line;
  return text;
}

}  // namespace

Status compileModelBytes(const std::string& bytes, const CompileOptions& options,
                         std::vector<uint8_t>* engine_out, CompileStats* stats) {
  if (options.target != "cpu")
    return invalidArgument("unknown target '" + options.target + "' (this build supports: cpu)");
  auto progress = [&](const std::string& stage) {
    if (options.progress) options.progress(stage);
  };

  MLIRContext context;
  context.disableMultithreading();  // deterministic output, and 2-core build machines
  context.loadDialect<nn::NNDialect, exec::ExecDialect, func::FuncDialect>();
  std::vector<std::string> diagnostics;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic& diag) {
    if (diag.getSeverity() != DiagnosticSeverity::Error) return success();
    std::string where = describeLocation(diag.getLocation());
    diagnostics.push_back((where.empty() ? "" : where + ": ") + diag.str());
    return success();
  });

  progress("importing " + options.input_path);
  ImportResult imported = importOnnxBytes(context, bytes.data(), bytes.size(), options.input_path);
  if (!imported.errors.empty()) {
    std::string message = joinLines(imported.errors);
    return imported.unsupported ? unimplemented(message) : invalidArgument(message);
  }
  ModuleOp module = *imported.module;
  auto main = module.lookupSymbol<func::FuncOp>("main");

  // Symbol ranges: every symbol defaults to [1, unbounded]; --dim narrows them.
  std::set<std::string> known_symbols;
  if (auto symbols = main->getAttrOfType<ArrayAttr>("llmc.symbols"))
    for (Attribute s : symbols) known_symbols.insert(cast<StringAttr>(s).getValue().str());
  Builder b(&context);
  SmallVector<NamedAttribute> ranges;
  for (const auto& [name, range] : options.dim_ranges) {
    if (!known_symbols.count(name)) {
      std::string list;
      for (const auto& s : known_symbols) list += (list.empty() ? "" : ", ") + s;
      return invalidArgument("--dim " + name + ": the model has no dimension named '" + name +
                             "' (it has: " + (list.empty() ? std::string("none") : list) + ")");
    }
    if (range.first < 0 || (range.second >= 0 && range.second < range.first))
      return invalidArgument("--dim " + name + ": empty range [" + std::to_string(range.first) +
                             ", " + std::to_string(range.second) + "]");
    ranges.push_back(b.getNamedAttr(name, b.getDenseI64ArrayAttr({range.first, range.second})));
  }
  main->setAttr("llmc.symbol_ranges", b.getDictionaryAttr(ranges));

  if (options.dump_ir_after == "import" || options.dump_ir_after == "all") {
    llvm::errs() << "// -----// IR after import //----- //\n";
    module.print(llvm::errs());
    llvm::errs() << "\n";
  }

  PassManager pm(&context);
  if (options.pass_timing) pm.enableTiming();  // the report prints when pm is destroyed
  if (!options.dump_ir_after.empty() && options.dump_ir_after != "import") {
    std::string wanted = options.dump_ir_after;
    pm.enableIRPrinting([](Pass*, Operation*) { return false; },
                        [wanted](Pass* pass, Operation*) {
                          return wanted == "all" || pass->getArgument() == wanted;
                        },
                        /*printModuleScope=*/true, /*printAfterOnlyOnChange=*/false);
  }
  OpPassManager& fpm = pm.nest<func::FuncOp>();
  fpm.addPass(createShapeInference());
  fpm.addPass(createFoldConstants());
  fpm.addPass(createSimplify());
  fpm.addPass(createCanonicalizerPass());
  fpm.addPass(createCSEPass());
  fpm.addPass(createShapeInference());
  fpm.addPass(createLowerToExec());
  fpm.addPass(createPlanMemory());

  progress("optimizing and planning");
  if (failed(pm.run(module))) {
    std::string message = joinLines(diagnostics);
    return invalidArgument(message.empty() ? "compilation failed" : message);
  }

  SerializeOptions serialize;
  serialize.compiler_version = kCompilerVersion;
  serialize.source_hash = hex64(checksum64(bytes.data(), bytes.size()));
  serialize.target = options.target;
  if (!options.tokenizer_path.empty()) {
    std::ifstream tokenizer_file(options.tokenizer_path, std::ios::binary);
    if (!tokenizer_file)
      return invalidArgument(options.tokenizer_path + ": cannot open the tokenizer");
    serialize.tokenizer_json.assign(std::istreambuf_iterator<char>(tokenizer_file),
                                    std::istreambuf_iterator<char>());
    std::unique_ptr<Tokenizer> tokenizer;  // refuse what the runtime could not load
    Status status = Tokenizer::fromJson(serialize.tokenizer_json, &tokenizer);
    if (!status.ok()) return status.withContext(options.tokenizer_path);
  }
  std::string opts = "target=" + options.target;
  if (!serialize.tokenizer_json.empty()) opts += ";tokenizer";
  for (const auto& [name, range] : options.dim_ranges)
    opts += ";dim " + name + "=" + std::to_string(range.first) + ":" + std::to_string(range.second);
  serialize.build_options = opts;
  std::vector<uint8_t>& engine = *engine_out;
  if (failed(serializeEngine(module, serialize, &engine))) {
    return internalError("serialization failed: " + joinLines(diagnostics));
  }

  if (stats) {
    stats->engine_bytes = engine.size();
    if (auto arena = main->getAttrOfType<IntegerAttr>("exec.arena_bytes"))
      stats->arena_bytes = static_cast<uint64_t>(arena.getInt());
    for (Operation& op : main.getBody().front()) {
      if (isa<exec::CallOp>(op)) ++stats->num_steps;
      if (auto weight = dyn_cast<exec::WeightOp>(op)) {
        auto type = cast<ShapedType>(weight.getType());
        stats->weight_bytes += static_cast<uint64_t>(type.getNumElements()) *
                               dtypeSize(dtypeFromMlir(type.getElementType()));
      }
    }
  }
  return okStatus();
}

Status compileModel(const CompileOptions& options, CompileStats* stats) {
  std::ifstream file(options.input_path, std::ios::binary);
  if (!file) return invalidArgument(options.input_path + ": cannot open the model file");
  std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  std::vector<uint8_t> engine;
  LLMC_RETURN_IF_ERROR(compileModelBytes(bytes, options, &engine, stats));
  if (options.progress) options.progress("writing " + options.output_path);
  // Write to a temporary file, then rename: a failed compile never leaves a partial engine.
  std::string temporary = options.output_path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) return invalidArgument(options.output_path + ": cannot write the engine file");
    out.write(reinterpret_cast<const char*>(engine.data()),
              static_cast<std::streamsize>(engine.size()));
    if (!out) {
      std::remove(temporary.c_str());
      return internalError(options.output_path + ": write failed (disk full?)");
    }
  }
  if (std::rename(temporary.c_str(), options.output_path.c_str()) != 0) {
    std::remove(temporary.c_str());
    return invalidArgument(options.output_path + ": cannot create the engine file");
  }

  return okStatus();
}

}  // namespace llmc
