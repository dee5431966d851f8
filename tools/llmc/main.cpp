// llmc: compile ONNX models to engines, run them, inspect them.
#include <malloc.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cli.h"

namespace {
const char kUsage[] =
    "usage: llmc <command> [options]\n"
    "\n"
    "commands:\n"
    "  compile MODEL.onnx -o OUT.engine [--target cpu] [--dim NAME=MIN:MAX ...] [--tokenizer "
    "FILE]\n"
    "          [--tokenizer-config tokenizer_config.json] [--generation-config "
    "generation_config.json]\n"
    "          [--verbose] [--dump-ir-after PASS|import|all] [--as-graph] [--threads N]\n"
    "          [--max-context N] [--bos-id ID] [--eos-id ID ...]\n"
    "          [--opt-level 0|1] [--disable-pass NAME ...] [--report] [--strip-weights]\n"
    "          [--quantize int8|int4|int4_zp|w8a8|fp8 [--quant-group N] [--quant-head FORMAT]\n"
    "           [--keep-float PATTERN ...] [--calib FILE | --calib-dir DIR] [--awq]\n"
    "           [--smooth-alpha A] [--smooth-percentile Q] [--max-ppl-increase PERCENT "
    "[--eval-text FILE]]]\n"
    "          [--prune "
    "magnitude|wanda|sparsegpt:SPARSITY|N:M[,layers|mlp|heads|kv-heads:FRACTION] "
    "(all but magnitude with --calib)]\n"
    "          [--keep-dense PATTERN ...] [--sparse-storage]\n"
    "          [--drift-text FILE [--drift-tokens N] [--drift-new-tokens K]]\n"
    "      compile an ONNX model into an engine file\n"
    "  run ENGINE --input NAME=FILE.npy|FILE.pb ... [--output-dir DIR] [--output-format npy|pb]\n"
    "          [--repeat N] [--threads N] [--backend auto|cpu|cuda] [--precision "
    "fp32|tf32|bf16|fp16] "
    "[--no-cuda-graphs] [--no-prepack]\n"
    "      run an engine on inputs; writes DIR/NAME.npy (or .pb) for every output\n"
    "  generate ENGINE --prompt-ids 1,2,3 | --prompt TEXT --tokenizer tokenizer.json\n"
    "          [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P] [--min-p P]\n"
    "          [--repetition-penalty R] [--seed S] [--stop-id ID ...] [--beam N [--length-penalty "
    "L]]\n"
    "          [--print-ids] [--no-kv-cache] [--kv-cache-tokens N] [--kv-prefault]\n"
    "          [--kv-cache-dtype auto|f32|f16|bf16|int8|fp8] [--threads N] [--backend "
    "auto|cpu|cuda] "
    "[--precision "
    "fp32|tf32|bf16|fp16] [--no-cuda-graphs] [--no-prepack]\n"
    "      generate tokens from a decoder language model (temperature 0, the default, is greedy)\n"
    "  bench ENGINE [--context N] [--new-tokens N] [--repeat N] [--kv-only] [--batch N] "
    "[--kv-prefault]\n"
    "          [--kv-cache-dtype auto|f32|f16|bf16|int8|fp8] [--threads N] [--backend "
    "auto|cpu|cuda] "
    "[--precision "
    "fp32|tf32|bf16|fp16] [--no-cuda-graphs] [--no-prepack]\n"
    "      time to first token and decode tokens/s over the KV cache and by full recomputation\n"
    "  verify MODEL.onnx [compile options] [--engine FILE] [--input NAME=FILE ...] [--length N]\n"
    "          [--rtol R] [--atol A] [--seed S] [--threads N]\n"
    "      the engine (compiled with the options, or FILE) against the graph as exported, on the\n"
    "      same inputs (decoders: every length up to the context); exit 1 beyond tolerance\n"
    "  refit ENGINE --weights FILE.safetensors -o OUT.engine\n"
    "      fill an engine's weights (e.g. a --strip-weights engine) from the model's initializers\n"
    "  eval ENGINE --reference FLOAT.engine --text FILE [--context N] [--max-windows N]\n"
    "  eval ENGINE --reference FLOAT.engine --sentences FILE [--output NAME]   (an encoder)\n"
    "          [--tokenizer tokenizer.json] [--json] [--threads N] [--backend auto|cpu|cuda]\n"
    "      accuracy against a reference engine: perplexity, KL divergence, top-1 agreement\n"
    "  serve ENGINE [--host 127.0.0.1] [--port 8000] [--tokenizer tokenizer.json] [--model-name "
    "NAME]\n"
    "          [--chat-template FILE.jinja]\n"
    "          [--api-key KEY | --api-key-file FILE] [--max-body-bytes N] [--max-prompt-tokens N]\n"
    "          [--max-tokens N] [--max-n N] [--max-connections N] [--max-queue N]\n"
    "          [--read-timeout S] [--write-timeout S] [--shutdown-grace S] [--io-threads N]\n"
    "          [--max-step-tokens N] [--max-running N] [--kv-cache-tokens N] [--kv-prefault]\n"
    "          [--kv-cache-dtype auto|f32|f16|bf16|int8|fp8] [--threads N] [--backend "
    "auto|cpu|cuda]\n"
    "          [--no-prepack] [--drift-window N] [--drift-min-tokens N] [--drift-threshold PSI]\n"
    "      the OpenAI-compatible HTTP service (docs/serving.md); LLMC_API_KEY sets the key too\n"
    "  inspect ENGINE [--json]\n"
    "      print an engine's format, target, inputs, outputs, steps and memory\n"
    "\n"
    "exit codes: 0 success, 1 runtime failure, 2 bad input or usage\n";
}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? llmc::cli::kExitBadInput : llmc::cli::kExitOk;
  }
  if (args[0] == "--version") {
    std::puts("llmc 0.1.0");
    return 0;
  }
  std::string command = args[0];
  args.erase(args.begin());
  if (command == "compile" || command == "verify") {
    // The mask proof (compiler/transforms/MaskProof.cpp) evaluates a decoder's mask at its
    // whole context: tensors of [context, context] elements allocated and freed one after
    // another. By default glibc maps each from the kernel and unmaps it when freed, so every one
    // faults in fresh zeroed pages: half of the compile of a small decoder at a context of 2048
    // (2.4 s against 1.2 s for a 0.6 MB model). Kept in the heap, freed blocks are reused warm.
    // Only the compiling commands, and only this process: the runtime leaves malloc alone.
    mallopt(M_MMAP_THRESHOLD, 1 << 30);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    mallopt(M_TOP_PAD, 64 << 20);
  }
  if (command == "compile") return llmc::cli::runCompile(args);
  if (command == "run") return llmc::cli::runRun(args);
  if (command == "inspect") return llmc::cli::runInspect(args);
  if (command == "generate") return llmc::cli::runGenerate(args);
  if (command == "bench") return llmc::cli::runBench(args);
  if (command == "verify") return llmc::cli::runVerify(args);
  if (command == "refit") return llmc::cli::runRefit(args);
  if (command == "eval") return llmc::cli::runEval(args);
  if (command == "serve") return llmc::cli::runServe(args);
  std::fprintf(stderr, "llmc: error: unknown command '%s'\n%s", command.c_str(), kUsage);
  return llmc::cli::kExitBadInput;
}
