// llmc run: load an engine, bind inputs from .npy/.pb files, run, write outputs as .npy.
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "cli.h"
#include "core/dispatch.h"
#include "llmc/engine.h"
#include "llmc/session.h"
#include "llmc/tensor_io.h"

namespace llmc::cli {

namespace {

// Output names may contain '/', ':' (exporters' value names); file names may not.
std::string fileNameFor(const std::string& name) {
  std::string out = name;
  for (char& c : out)
    if (c == '/' || c == '\\' || c == ':') c = '_';
  return out;
}

std::string preview(const Tensor& tensor, int64_t count) {
  std::string text;
  int64_t n = std::min(count, tensor.numElements());
  dispatchAll(tensor.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* data = tensor.data<T>();
    for (int64_t i = 0; i < n; ++i) {
      char buffer[32];
      double v = static_cast<double>(load(data[i]));
      std::snprintf(buffer, sizeof(buffer), "%.6g", v);
      text += (i ? ", " : "") + std::string(buffer);
    }
  });
  if (tensor.numElements() > n) text += ", ...";
  return "[" + text + "]";
}

}  // namespace

int runRun(const std::vector<std::string>& args) {
  std::string engine_path, output_dir;
  std::vector<std::pair<std::string, std::string>> input_files;
  int repeat = 1;
  std::string output_format = "npy";
  SessionOptions session_options;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    std::string flag_error;
    if (parseSessionFlag(args, &i, &session_options, &flag_error)) {
      if (!flag_error.empty()) return usageError("run", flag_error);
    } else if (arg == "--input" || arg == "-i") {
      if (i + 1 >= args.size()) return usageError("run", "--input needs NAME=FILE");
      const std::string& spec = args[++i];
      size_t eq = spec.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
        return usageError("run", "--input takes NAME=FILE, got '" + spec + "'");
      input_files.emplace_back(spec.substr(0, eq), spec.substr(eq + 1));
    } else if (arg == "--output-dir" || arg == "-o") {
      if (i + 1 >= args.size()) return usageError("run", "--output-dir needs a directory");
      output_dir = args[++i];
    } else if (arg == "--output-format") {
      if (i + 1 >= args.size()) return usageError("run", "--output-format needs npy or pb");
      output_format = args[++i];
      if (output_format != "npy" && output_format != "pb")
        return usageError("run", "--output-format takes npy or pb, got '" + output_format + "'");
    } else if (arg == "--repeat") {
      if (Status s = intOption(args, &i, 1, kInt32Max, &repeat); !s.ok())
        return usageError("run", s);
    } else if (!arg.empty() && arg[0] == '-') {
      return usageError("run", "unknown option '" + arg + "'");
    } else if (engine_path.empty()) {
      engine_path = arg;
    } else {
      return usageError("run", "more than one engine given");
    }
  }
  if (engine_path.empty()) return usageError("run", "no engine given");

  std::shared_ptr<const Engine> engine;
  Status status = Engine::load(engine_path, &engine);
  if (!status.ok()) return reportError("run", status);

  std::vector<NamedTensor> inputs;
  for (const auto& [name, path] : input_files) {
    Tensor tensor;
    status = readTensorFile(path, &tensor);
    if (!status.ok()) return reportError("run", status.withContext("--input " + name));
    inputs.push_back({name, std::move(tensor)});
  }

  std::unique_ptr<Session> session;
  status = Session::create(engine, session_options, &session);
  if (!status.ok()) return reportError("run", status);
  std::vector<NamedTensor> outputs;
  std::vector<double> times_ms;
  for (int r = 0; r < repeat; ++r) {
    auto start = std::chrono::steady_clock::now();
    status = session->run(inputs, &outputs);
    if (!status.ok()) return reportError("run", status);
    times_ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
  }

  if (!output_dir.empty()) {
    ::mkdir(output_dir.c_str(), 0755);
    struct stat st;
    if (::stat(output_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      return reportError("run",
                         invalidArgument(output_dir + ": cannot create the output directory"));
  }
  for (const NamedTensor& output : outputs) {
    std::printf("%s: %s%s %s\n", output.name.c_str(), dtypeName(output.tensor.dtype()),
                shapeToString(output.tensor.shape()).c_str(), preview(output.tensor, 8).c_str());
    if (!output_dir.empty()) {
      std::string path = output_dir + "/" + fileNameFor(output.name) + "." + output_format;
      status = output_format == "npy" ? writeNpy(path, output.tensor)
                                      : writeTensorProto(path, output.tensor, output.name);
      if (!status.ok()) return reportError("run", status);
    }
  }
  std::sort(times_ms.begin(), times_ms.end());
  double median = times_ms[times_ms.size() / 2];
  if (repeat == 1) {
    std::printf("ran %zu steps in %.3f ms\n", engine->numSteps(), median);
  } else {
    std::printf("ran %zu steps %d times: median %.3f ms (min %.3f, max %.3f)\n", engine->numSteps(),
                repeat, median, times_ms.front(), times_ms.back());
  }
  return kExitOk;
}

}  // namespace llmc::cli
