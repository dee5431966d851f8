// Calibration statistics for quantization (Calibration.h).
#include "pipeline/Calibration.h"

#include <dirent.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <sstream>

#include "core/engine_file.h"
#include "core/file_io.h"
#include "core/kernel.h"
#include "core/thread_pool.h"
#include "cpu/gemm.h"
#include "llmc/engine.h"
#include "llmc/refit.h"
#include "llmc/tensor_io.h"
#include "llmc/tokenizer.h"

namespace llmc {
namespace {

constexpr const char* kKeyTensor = "llmc.calibration_key";
constexpr int64_t kMaxPromptTokens = 512;

bool isProduct(const StepObservation& step) {
  return (step.kernel == "LlmFusedMatMul" || step.kernel == "LlmGatedMlp" || step.kernel == "MatMul") &&
         step.inputs.size() >= 2 && step.inputs[0] && step.inputs[1] && step.inputs[1]->rank() == 2 &&
         step.inputs[0]->dtype() == DType::kFloat32 && step.inputs[0]->rank() >= 1;
}

std::string jsonString(const std::string& text) {
  std::string out;
  out.push_back('"');
  for (char c : text) {
    if (c == '"' || c == '\\') out.push_back('\\');
    if (static_cast<unsigned char>(c) < 0x20) {
      char buffer[8];
      std::snprintf(buffer, sizeof(buffer), "\\u%04x", c);
      out.append(buffer);
      continue;
    }
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

const char* safetensorsDtype(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "F32";
    case DType::kInt64: return "I64";
    default: return "U8";
  }
}

}  // namespace

Status readCalibrationInputs(const std::string& calib_file, const std::string& calib_dir,
                             const std::string& tokenizer_json,
                             std::vector<std::vector<NamedTensor>>* samples) {
  auto add = [&](std::vector<int64_t> ids) {
    Tensor t = Tensor::allocate(DType::kInt64, {1, static_cast<int64_t>(ids.size())});
    std::memcpy(t.data(), ids.data(), ids.size() * sizeof(int64_t));
    samples->push_back({{"input_ids", std::move(t)}});
  };
  if (!calib_file.empty()) {
    if (tokenizer_json.empty())
      return invalidArgument("--calib " + calib_file + ": the prompts need a tokenizer (--tokenizer tokenizer.json)");
    std::unique_ptr<Tokenizer> tokenizer;
    LLMC_RETURN_IF_ERROR(Tokenizer::fromJson(tokenizer_json, &tokenizer));
    std::string text;
    LLMC_RETURN_IF_ERROR(readFile(calib_file, "--calib", &text));
    std::istringstream lines(text);
    std::string line;
    int64_t number = 0;
    while (std::getline(lines, line)) {
      ++number;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      std::vector<int32_t> ids;
      LLMC_RETURN_IF_ERROR(tokenizer->encode(line, false, &ids).withContext(calib_file + ":" + std::to_string(number)));
      if (ids.empty()) continue;
      if (static_cast<int64_t>(ids.size()) > kMaxPromptTokens) ids.resize(kMaxPromptTokens);
      add(std::vector<int64_t>(ids.begin(), ids.end()));
    }
  }
  if (!calib_dir.empty()) {
    LLMC_RETURN_IF_ERROR(checkDirectory(calib_dir, "--calib-dir"));
    DIR* dir = opendir(calib_dir.c_str());
    if (!dir)
      return invalidArgument("--calib-dir " + calib_dir +
                             ": cannot open the directory: " + std::strerror(errno));
    std::vector<std::string> files;
    while (dirent* entry = readdir(dir)) {
      const std::string name = entry->d_name;
      if (name.size() > 4 && name.compare(name.size() - 4, 4, ".npy") == 0) files.push_back(name);
    }
    closedir(dir);
    std::sort(files.begin(), files.end());
    for (const std::string& name : files) {
      const std::string path = calib_dir + "/" + name;
      Tensor t;
      LLMC_RETURN_IF_ERROR(readNpy(path, &t).withContext("--calib-dir"));
      if ((t.dtype() != DType::kInt64 && t.dtype() != DType::kInt32) || t.rank() < 1 || t.rank() > 2 ||
          (t.rank() == 2 && t.dim(0) != 1) || t.numElements() == 0)
        return invalidArgument(path + ": a calibration sample is int32/int64 input_ids [tokens] or [1, tokens], got " +
                               std::string(dtypeName(t.dtype())) + shapeToString(t.shape()));
      std::vector<int64_t> ids;
      LLMC_RETURN_IF_ERROR(readInt64s(&t, &ids));
      add(std::move(ids));
    }
  }
  if (samples->empty())
    return invalidArgument("no calibration samples in " + (calib_file.empty() ? calib_dir : calib_file));
  return okStatus();
}

Status collectCalibrationStats(const std::vector<uint8_t>& float_engine,
                               const std::vector<std::vector<NamedTensor>>& samples, bool with_gram,
                               const std::function<void(const std::string&)>& progress,
                               CalibrationStats* stats) {
  std::shared_ptr<const Engine> engine;
  LLMC_RETURN_IF_ERROR(Engine::loadFromMemory(float_engine, "the calibration engine", &engine));
  std::mt19937_64 rng(20261201);
  SessionOptions options;
  options.backend = Backend::kCpu;
  // The compiler already holds the model and this engine in memory: no third copy of the
  // weights in the kernels' layouts (a few percent of calibration's time).
  options.prepack_weights = false;
  // Σ|x| and Σx² per channel of each statistics entry, in double (the means at the end).
  std::map<const ActivationStats*, std::pair<std::vector<double>, std::vector<double>>> sums;
  std::vector<float> transposed, gram_part;
  // The rows of `x` into the statistics `s` (absmax, sums, XᵀX when allocated, and the row
  // reservoir, whose slot for the n-th row `slot(n)` chooses).
  auto accumulate = [&](ActivationStats& s, const Tensor& x, bool gram_wanted, auto&& slot) {
    const int64_t k = x.dim(x.rank() - 1);
    if (k == 0) return;
    if (s.absmax.dtype() == DType::kUndefined) {
      s.absmax = Tensor::allocate(DType::kFloat32, {k});
      s.mean_abs = Tensor::allocate(DType::kFloat32, {k});
      s.mean_sq = Tensor::allocate(DType::kFloat32, {k});
      s.samples = Tensor::allocate(DType::kFloat32, {kCalibrationRows, k});
      if (gram_wanted) s.gram = Tensor::allocate(DType::kFloat32, {k, k});
    }
    if (s.absmax.dim(0) != k) return;  // the same node with another width: keep the first
    const int64_t rows = x.numElements() / k;
    float* absmax = s.absmax.data<float>();
    auto& [sum_abs, sum_sq] = sums[&s];
    sum_abs.resize(static_cast<size_t>(k)), sum_sq.resize(static_cast<size_t>(k));
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = x.data<float>() + r * k;
      for (int64_t j = 0; j < k; ++j) {
        const float a = std::fabs(row[j]);
        absmax[j] = std::max(absmax[j], a);
        sum_abs[j] += a;
        sum_sq[j] += static_cast<double>(a) * a;
      }
      // Reservoir sampling: every row seen so far is kept with the same probability.
      const int64_t slot_index = s.rows_seen < kCalibrationRows ? s.rows_seen : slot(s.rows_seen);
      if (slot_index < kCalibrationRows)
        std::memcpy(s.samples.data<float>() + slot_index * k, row, k * sizeof(float));
      ++s.rows_seen;
    }
    if (s.gram.dtype() == DType::kFloat32 && rows > 0) {
      // XᵀX of this call's rows as one product (Xᵀ [K, rows] by X), added to the running sum.
      transposed.resize(static_cast<size_t>(k * rows));
      gram_part.resize(static_cast<size_t>(k * k));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < k; ++j) transposed[j * rows + r] = x.data<float>()[r * k + j];
      floatGemm(transposed.data(), k, rows, x.data<float>(), k, gram_part.data(),
                sharedThreadPool());
      float* gram = s.gram.data<float>();
      for (int64_t i = 0; i < k * k; ++i) gram[i] += gram_part[i];
    }
  };
  options.observer = [&](const StepObservation& step) {
    if (step.kernel == "LlmNorm") {
      // The residual stream where a norm reads it (the sum it makes with its residual, or its
      // input), for --prune layers. Every norm sees the same tokens in the same order and the
      // reservoir's slot depends on the row's index alone, so the samples of all norms hold the
      // same tokens, row for row.
      const bool fused = step.inputs.size() >= 2 && step.inputs[1];
      const Tensor* stream =
          fused ? (step.outputs.size() >= 2 ? step.outputs[1] : nullptr) : step.inputs[0];
      if (!stream || stream->dtype() != DType::kFloat32 || stream->rank() < 1) return;
      accumulate((*stats)[step.node + std::string(kStreamSuffix)], *stream, false, [](int64_t n) {
        uint64_t z = static_cast<uint64_t>(n) + 0x9e3779b97f4a7c15ull;  // splitmix64 of n
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return static_cast<int64_t>((z ^ (z >> 31)) % static_cast<uint64_t>(n + 1));
      });
      return;
    }
    if (!isProduct(step)) return;
    accumulate((*stats)[step.node], *step.inputs[0], with_gram, [&](int64_t n) {
      return static_cast<int64_t>(rng() % static_cast<uint64_t>(n + 1));
    });
  };
  std::unique_ptr<Session> session;
  LLMC_RETURN_IF_ERROR(Session::create(engine, options, &session));
  const LlmConfig* llm = engine->llmConfig();
  std::vector<NamedTensor> outputs;
  for (size_t i = 0; i < samples.size(); ++i) {
    if (progress && (i % 8 == 0 || i + 1 == samples.size()))
      progress("calibrating: sample " + std::to_string(i + 1) + "/" + std::to_string(samples.size()));
    std::vector<NamedTensor> inputs;
    for (const TensorInfo& info : engine->inputs()) {
      const Tensor& ids = samples[i][0].tensor;  // [1, tokens]
      Shape shape = ids.shape();
      // A decoder runs at most its context (the runtime refuses more): a longer sample is cut.
      if (llm && shape.back() > llm->max_context) shape.back() = llm->max_context;
      Tensor t = Tensor::allocate(info.dtype, shape);
      for (int64_t j = 0; j < t.numElements(); ++j) {
        // What a tokenizer gives one unpadded sequence: every token attended, positions from 0,
        // and (BERT's segments) every token in the first segment.
        const int64_t v = info.name == "input_ids"        ? ids.data<int64_t>()[j]
                          : info.name == "attention_mask" ? 1
                          : info.name == "position_ids"   ? j
                          : info.name == "token_type_ids" ? 0
                                                          : -1;
        if (v < 0 && info.name != "input_ids")
          return invalidArgument("calibration feeds input_ids, attention_mask, position_ids and token_type_ids; "
                                 "the model also has '" + info.name + "'");
        if (info.dtype == DType::kInt32) t.data<int32_t>()[j] = static_cast<int32_t>(v);
        else if (info.dtype == DType::kInt64) t.data<int64_t>()[j] = v;
        else return invalidArgument("calibration input '" + info.name + "' must be int32 or int64");
      }
      inputs.push_back({info.name, std::move(t)});
    }
    LLMC_RETURN_IF_ERROR(session->run(inputs, &outputs).withContext("calibration sample " + std::to_string(i + 1)));
  }
  // The means; trim each sample to the rows it holds.
  for (auto& [node, s] : *stats) {
    const int64_t rows = std::min(s.rows_seen, kCalibrationRows), k = s.absmax.dim(0);
    const auto& [sum_abs, sum_sq] = sums[&s];
    const double seen = static_cast<double>(std::max<int64_t>(s.rows_seen, 1));
    for (int64_t j = 0; j < static_cast<int64_t>(sum_abs.size()); ++j) {
      s.mean_abs.data<float>()[j] = static_cast<float>(sum_abs[j] / seen);
      s.mean_sq.data<float>()[j] = static_cast<float>(sum_sq[j] / seen);
    }
    Tensor trimmed = Tensor::allocate(DType::kFloat32, {rows, k});
    std::memcpy(trimmed.data(), s.samples.data(), static_cast<size_t>(rows * k) * sizeof(float));
    s.samples = std::move(trimmed);
  }
  return okStatus();
}

std::string calibrationKey(const std::string& model_bytes, const std::vector<std::vector<NamedTensor>>& samples,
                           const std::string& float_options) {
  uint64_t key = checksum64(model_bytes.data(), model_bytes.size());
  for (const auto& sample : samples)
    for (const NamedTensor& t : sample) key = key * 1000003 ^ checksum64(t.tensor.data(), t.tensor.sizeBytes());
  key = key * 1000003 ^ checksum64(float_options.data(), float_options.size());
  char buffer[17];
  std::snprintf(buffer, sizeof(buffer), "%016llx", static_cast<unsigned long long>(key));
  return buffer;
}

bool isStream(const std::string& key) {
  return key.size() > kStreamSuffix.size() && key.ends_with(kStreamSuffix);
}

bool hasGram(const CalibrationStats& stats) {
  for (const auto& [node, s] : stats)
    if (!isStream(node) && s.gram.dtype() != DType::kFloat32) return false;
  return true;
}

bool hasStreams(const CalibrationStats& stats) {
  for (const auto& [node, s] : stats)
    if (isStream(node)) return true;
  return false;
}

void sliceChannels(ActivationStats* stats, const std::vector<int64_t>& keep) {
  ActivationStats& s = *stats;
  const int64_t k = s.absmax.numElements(), kept = static_cast<int64_t>(keep.size());
  auto slice_vector = [&](Tensor& t) {
    if (t.dtype() != DType::kFloat32 || t.numElements() != k) return;
    Tensor out = Tensor::allocate(DType::kFloat32, {kept});
    for (int64_t i = 0; i < kept; ++i) out.data<float>()[i] = t.data<float>()[keep[i]];
    t = std::move(out);
  };
  slice_vector(s.absmax);
  slice_vector(s.mean_abs);
  slice_vector(s.mean_sq);
  if (s.samples.rank() == 2 && s.samples.dim(1) == k) {
    const int64_t rows = s.samples.dim(0);
    Tensor out = Tensor::allocate(DType::kFloat32, {rows, kept});
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < kept; ++i)
        out.data<float>()[r * kept + i] = s.samples.data<float>()[r * k + keep[i]];
    s.samples = std::move(out);
  }
  if (s.gram.dtype() == DType::kFloat32 && s.gram.numElements() == k * k) {
    Tensor out = Tensor::allocate(DType::kFloat32, {kept, kept});
    for (int64_t i = 0; i < kept; ++i)
      for (int64_t j = 0; j < kept; ++j)
        out.data<float>()[i * kept + j] = s.gram.data<float>()[keep[i] * k + keep[j]];
    s.gram = std::move(out);
  }
}

Tensor channelPercentile(const ActivationStats& stats, double q) {
  const int64_t rows = stats.samples.rank() == 2 ? stats.samples.dim(0) : 0;
  const int64_t k = stats.absmax.numElements();
  Tensor out = Tensor::allocate(DType::kFloat32, {k});
  std::vector<float> column(static_cast<size_t>(rows));
  for (int64_t j = 0; j < k; ++j) {
    if (rows == 0) {
      out.data<float>()[j] = stats.absmax.data<float>()[j];
      continue;
    }
    for (int64_t r = 0; r < rows; ++r) column[static_cast<size_t>(r)] = std::fabs(stats.samples.data<float>()[r * k + j]);
    // Nearest rank: the ceil(q * rows)-th smallest.
    const int64_t rank = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(q * static_cast<double>(rows))), 1, rows);
    std::nth_element(column.begin(), column.begin() + (rank - 1), column.end());
    out.data<float>()[j] = column[static_cast<size_t>(rank - 1)];
  }
  return out;
}

Status writeCalibrationStats(const std::string& path, const std::string& key, const CalibrationStats& stats) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  Tensor key_tensor = Tensor::allocate(DType::kUInt8, {static_cast<int64_t>(key.size())});
  std::memcpy(key_tensor.data(), key.data(), key.size());
  tensors.emplace_back(kKeyTensor, key_tensor);
  for (const auto& [node, s] : stats) {
    Tensor seen = Tensor::allocate(DType::kInt64, {1});
    seen.data<int64_t>()[0] = s.rows_seen;
    tensors.emplace_back(node + "/absmax", s.absmax);
    tensors.emplace_back(node + "/mean_abs", s.mean_abs);
    tensors.emplace_back(node + "/mean_sq", s.mean_sq);
    tensors.emplace_back(node + "/samples", s.samples);
    if (s.gram.dtype() != DType::kUndefined) tensors.emplace_back(node + "/gram", s.gram);
    tensors.emplace_back(node + "/rows_seen", seen);
  }
  std::ostringstream json;
  json << "{";
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i].second;
    json << (i ? "," : "") << jsonString(tensors[i].first) << ":{\"dtype\":\"" << safetensorsDtype(t.dtype())
         << "\",\"shape\":[";
    for (int64_t d = 0; d < t.rank(); ++d) json << (d ? "," : "") << t.dim(d);
    json << "],\"data_offsets\":[" << offset << "," << offset + t.sizeBytes() << "]}";
    offset += t.sizeBytes();
  }
  json << "}";
  std::string header = json.str();
  header.append((8 - header.size() % 8) % 8, ' ');
  std::vector<uint8_t> bytes(8 + header.size());
  const uint64_t length = header.size();
  std::memcpy(bytes.data(), &length, 8);
  std::memcpy(bytes.data() + 8, header.data(), header.size());
  for (const auto& [name, t] : tensors) {
    const auto* data = static_cast<const uint8_t*>(t.data());
    bytes.insert(bytes.end(), data, data + t.sizeBytes());
  }
  return writeEngineFile(path, bytes);
}

Status readCalibrationStats(const std::string& path, const std::string& key, CalibrationStats* stats) {
  std::vector<uint8_t> bytes;
  LLMC_RETURN_IF_ERROR(readFile(path, "calibration statistics", &bytes));
  std::map<std::string, Tensor> tensors;
  LLMC_RETURN_IF_ERROR(parseSafetensors(bytes, path, &tensors));
  auto stored = tensors.find(kKeyTensor);
  if (stored == tensors.end() ||
      (!key.empty() && std::string(stored->second.data<char>(), static_cast<size_t>(stored->second.numElements())) != key))
    return notFound(path + ": calibration statistics of another model, data or options");
  for (const auto& [name, t] : tensors) {
    const size_t slash = name.rfind('/');
    if (slash == std::string::npos) continue;
    const std::string node = name.substr(0, slash), field = name.substr(slash + 1);
    ActivationStats& s = (*stats)[node];
    if (field == "absmax") s.absmax = t.clone();
    else if (field == "mean_abs") s.mean_abs = t.clone();
    else if (field == "mean_sq")
      s.mean_sq = t.clone();
    else if (field == "samples") s.samples = t.clone();
    else if (field == "gram")
      s.gram = t.clone();
    else if (field == "rows_seen" && t.dtype() == DType::kInt64 && t.numElements() == 1) s.rows_seen = t.data<int64_t>()[0];
  }
  // The quantization passes read these as float32 [K] and [rows, K]: a file that says otherwise
  // (another writer, a damaged cache) is refused rather than read past its tensors.
  for (const auto& [node, s] : *stats) {
    const int64_t k = s.absmax.rank() == 1 ? s.absmax.dim(0) : -1;
    auto vector_ok = [&](const Tensor& t) {
      return t.dtype() == DType::kFloat32 && t.rank() == 1 && t.dim(0) == k;
    };
    const bool gram_ok = s.gram.dtype() == DType::kUndefined ||
                         (s.gram.dtype() == DType::kFloat32 && s.gram.rank() == 2 &&
                          s.gram.dim(0) == k && s.gram.dim(1) == k);
    if (k < 0 || !vector_ok(s.absmax) || !vector_ok(s.mean_abs) || !vector_ok(s.mean_sq) ||
        s.samples.dtype() != DType::kFloat32 || s.samples.rank() != 2 || s.samples.dim(1) != k ||
        !gram_ok)
      return invalidArgument(
          path + ": statistics of '" + node +
          "' are incomplete (absmax, mean_abs and mean_sq must be float32 [K], samples "
          "float32 [rows, K], gram float32 [K, K])");
  }
  return okStatus();
}

}  // namespace llmc
