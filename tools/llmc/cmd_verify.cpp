// llmc verify: the built-in golden check. Compiles a model with the given options and at
// --opt-level 0, runs both engines on the same inputs (given, or random) and prints the
// error of every output; exit 1 when any is beyond tolerance.
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>

#include "cli.h"
#include "compile_flags.h"
#include "core/file_io.h"
#include "core/half.h"
#include "llmc/engine.h"
#include "llmc/session.h"
#include "llmc/tensor_io.h"

namespace llmc::cli {

namespace {

// A size for each dimension symbol: 3 (or the range's bound nearest to it); a symbol named
// as a sum ("past_sequence_length + sequence_length") is the sum of its terms' sizes, so the
// inputs of a cache export agree with each other.
int64_t symbolSize(const Engine& engine, const std::string& symbol, int depth = 0) {
  if (depth < 4 && symbol.find(" + ") != std::string::npos) {
    int64_t total = 0;
    size_t start = 0;
    while (start <= symbol.size()) {
      size_t plus = symbol.find(" + ", start);
      std::string term = symbol.substr(start, plus == std::string::npos ? std::string::npos : plus - start);
      int64_t number = 0;
      total +=
          parseInteger(term, 0, kInt32Max, &number) ? number : symbolSize(engine, term, depth + 1);
      if (plus == std::string::npos) break;
      start = plus + 3;
    }
    return total;
  }
  for (const SymbolInfo& info : engine.symbols())
    if (info.name == symbol) {
      int64_t size = std::max<int64_t>(info.min, 3);
      return info.max >= 0 ? std::min(size, info.max) : size;
    }
  return 3;
}

// Random inputs: floats ~ N(0, 1); integer inputs named like masks are 1, like token types
// 0, anything else uniform in [0, bound) (the vocabulary for language models, else 2).
Status randomInput(const Engine& engine, const TensorInfo& info, std::mt19937& rng, Tensor* out) {
  Shape shape;
  for (const DimInfo& d : info.dims) shape.push_back(d.size >= 0 ? d.size : symbolSize(engine, d.symbol));
  *out = Tensor::allocate(info.dtype, shape);
  const int64_t n = out->numElements();
  std::normal_distribution<float> normal;
  const bool mask = info.name.find("mask") != std::string::npos;
  const bool type = info.name.find("type") != std::string::npos;
  int64_t bound = engine.llmConfig() && engine.llmConfig()->vocab_size > 0
                      ? engine.llmConfig()->vocab_size
                      : 2;
  std::uniform_int_distribution<int64_t> uniform(0, std::max<int64_t>(bound, 1) - 1);
  for (int64_t i = 0; i < n; ++i) {
    switch (info.dtype) {
      case DType::kFloat32: out->data<float>()[i] = normal(rng); break;
      case DType::kFloat16: out->data<Float16>()[i] = toFloat16(normal(rng)); break;
      case DType::kBFloat16: out->data<BFloat16>()[i] = toBFloat16(normal(rng)); break;
      case DType::kFloat64: out->data<double>()[i] = normal(rng); break;
      case DType::kInt64: out->data<int64_t>()[i] = mask ? 1 : type ? 0 : uniform(rng); break;
      case DType::kInt32: out->data<int32_t>()[i] = static_cast<int32_t>(mask ? 1 : type ? 0 : uniform(rng)); break;
      case DType::kBool: out->data<bool>()[i] = mask || (rng() & 1); break;
      default:
        return unimplemented("input '" + info.name + "' has dtype " + dtypeName(info.dtype) +
                             ": give it with --input NAME=FILE");
    }
  }
  return okStatus();
}

double elementAt(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kFloat32: return t.data<float>()[i];
    case DType::kFloat64: return t.data<double>()[i];
    case DType::kFloat16: return toFloat(t.data<Float16>()[i]);
    case DType::kBFloat16: return toFloat(t.data<BFloat16>()[i]);
    case DType::kInt64: return static_cast<double>(t.data<int64_t>()[i]);
    case DType::kInt32: return t.data<int32_t>()[i];
    case DType::kBool: return t.data<bool>()[i];
    default: return NAN;
  }
}

Status compileToEngine(const std::string& bytes, const CompileOptions& options,
                       std::shared_ptr<const Engine>* engine) {
  std::vector<uint8_t> data;
  CompileStats stats;
  LLMC_RETURN_IF_ERROR(compileModelBytes(bytes, options, &data, &stats));
  return Engine::loadFromMemory(data, options.input_path, engine);
}

}  // namespace

int runVerify(const std::vector<std::string>& args) {
  CompileOptions options;
  std::vector<std::pair<std::string, std::string>> input_files;
  double rtol = 1e-4, atol = 1e-5;
  uint32_t seed = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--input" || arg == "-i") {
      if (i + 1 >= args.size()) return usageError("verify", "--input needs NAME=FILE");
      const std::string& spec = args[++i];
      size_t eq = spec.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
        return usageError("verify", "--input takes NAME=FILE, got '" + spec + "'");
      input_files.emplace_back(spec.substr(0, eq), spec.substr(eq + 1));
      continue;
    }
    if (arg == "--rtol" || arg == "--atol" || arg == "--seed") {
      Status value = arg == "--seed"
                         ? intOption(args, &i, 0, std::numeric_limits<uint32_t>::max(), &seed)
                         : floatOption(args, &i, 0, kUnbounded, arg == "--rtol" ? &rtol : &atol);
      if (!value.ok()) return usageError("verify", value);
      continue;
    }
    int parsed = parseCompileFlag("verify", args, i, options, nullptr);
    if (parsed > 0) return parsed;
    if (parsed == kExitOk) continue;
    if (!arg.empty() && arg[0] == '-') return usageError("verify", "unknown option '" + arg + "'");
    if (!options.input_path.empty()) return usageError("verify", "more than one model given");
    options.input_path = arg;
  }
  if (options.input_path.empty()) return usageError("verify", "no model given");
  std::string bytes;
  Status read = readFile(options.input_path, "model", &bytes);
  if (!read.ok()) return reportError("verify", read);

  CompileOptions reference_options = options;
  reference_options.opt_level = 0;
  reference_options.disabled_passes.clear();
  std::shared_ptr<const Engine> engine, reference;
  Status status = compileToEngine(bytes, options, &engine);
  if (!status.ok()) return reportError("verify", status);
  status = compileToEngine(bytes, reference_options, &reference);
  if (!status.ok()) return reportError("verify", status.withContext("the --opt-level 0 reference"));

  std::vector<NamedTensor> inputs;
  std::mt19937 rng(seed);
  for (const TensorInfo& info : reference->inputs()) {
    NamedTensor input{info.name, Tensor()};
    auto given = std::find_if(input_files.begin(), input_files.end(),
                              [&](const auto& f) { return f.first == info.name; });
    status = given != input_files.end() ? readTensorFile(given->second, &input.tensor)
                                        : randomInput(*reference, info, rng, &input.tensor);
    if (!status.ok())
      return reportError(
          "verify", status.withContext(given != input_files.end() ? "--input " + info.name
                                                                  : "input '" + info.name + "'"));
    inputs.push_back(std::move(input));
  }
  for (const auto& [name, path] : input_files) {
    bool known = false;
    for (const TensorInfo& info : reference->inputs()) known |= info.name == name;
    if (!known) return usageError("verify", "--input " + name + ": the model has no input of that name");
  }
  std::vector<NamedTensor> outputs[2];
  const std::shared_ptr<const Engine>* engines[2] = {&engine, &reference};
  for (int e = 0; e < 2; ++e) {
    std::unique_ptr<Session> session;
    status = Session::create(*engines[e], &session);
    if (status.ok()) status = session->run(inputs, &outputs[e]);
    if (!status.ok())
      return reportError("verify", status.withContext(e == 0 ? "the engine under test" : "the reference"));
  }
  std::printf("inputs:");
  for (const NamedTensor& input : inputs)
    std::printf(" %s%s", input.name.c_str(), shapeToString(input.tensor.shape()).c_str());
  std::printf("\nsteps: %zu (opt-level %d) vs %zu (reference, opt-level 0)\n", engine->numSteps(),
              options.opt_level, reference->numSteps());
  std::printf("%-24s %-16s %12s %12s %10s\n", "output", "shape", "max abs err", "max rel err", "mismatch");
  bool failed = false;
  for (size_t o = 0; o < outputs[1].size(); ++o) {
    const Tensor& want = outputs[1][o].tensor;
    const Tensor* got = nullptr;
    for (const NamedTensor& t : outputs[0]) if (t.name == outputs[1][o].name) got = &t.tensor;
    if (!got || got->shape() != want.shape() || got->dtype() != want.dtype()) {
      std::printf("%-24s differs in shape or dtype: %s vs %s\n", outputs[1][o].name.c_str(),
                  got ? shapeToString(got->shape()).c_str() : "missing", shapeToString(want.shape()).c_str());
      failed = true;
      continue;
    }
    double max_abs = 0, max_rel = 0;
    int64_t mismatches = 0;
    for (int64_t i = 0; i < want.numElements(); ++i) {
      double a = elementAt(*got, i), b = elementAt(want, i);
      double err = std::fabs(a - b);
      if (std::isnan(a) != std::isnan(b)) err = INFINITY;
      else if (std::isnan(a) || a == b) err = 0;
      max_abs = std::max(max_abs, err);
      max_rel = std::max(max_rel, err / std::max(std::fabs(b), 1e-30));
      if (err > atol + rtol * std::fabs(b)) ++mismatches;
    }
    failed |= mismatches > 0;
    std::printf("%-24s %-16s %12.3g %12.3g %10lld\n", outputs[1][o].name.c_str(),
                shapeToString(want.shape()).c_str(), max_abs, max_rel, static_cast<long long>(mismatches));
  }
  std::printf("%s (rtol %g, atol %g)\n", failed ? "FAILED: outputs differ beyond tolerance" : "OK: within tolerance", rtol, atol);
  return failed ? kExitFailure : kExitOk;
}

}  // namespace llmc::cli
