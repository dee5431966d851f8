// Calibration for quantization: runs the float32 engine of a model on the CPU runtime over
// calibration inputs and collects, for each matrix product with a constant weight, statistics
// of its input activations (per-channel absmax and mean |x|, and a fixed-size sample of rows
// for the activation-aware searches). Stored as safetensors next to the output engine, keyed
// by the model, the inputs and the float compile options, so a second compile with other
// quantization options reuses them.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "llmc/session.h"
#include "llmc/status.h"
#include "llmc/tensor.h"

namespace llmc {

// Rows of each product's input kept for the searches (a deterministic reservoir sample).
inline constexpr int64_t kCalibrationRows = 256;

struct ActivationStats {
  Tensor absmax;    // float32 [K]
  Tensor mean_abs;  // float32 [K]
  Tensor mean_sq;   // float32 [K]: mean x^2 (Wanda's channel norms, up to the factor rows_seen)
  Tensor samples;   // float32 [rows, K], rows <= kCalibrationRows
  Tensor gram;      // float32 [K, K]: XᵀX over every row seen (SparseGPT), when collected
  int64_t rows_seen = 0;
};
// Per-channel percentile q (in (0, 1]) of |x| over the stats' row sample (q = 1: the sample's
// max; the true absmax over every row seen is `absmax`), float32 [K].
Tensor channelPercentile(const ActivationStats& stats, double q);
// The statistics of a product whose input kept only the channels `keep` (ascending): each
// per-channel vector, the row sample and XᵀX restricted to them.
void sliceChannels(ActivationStats* stats, const std::vector<int64_t>& keep);

// By the product step's ONNX node (the name the quantization pass sees for the same op); and,
// under the norm step's node name + kStreamSuffix, the residual stream each norm reads (the
// sum with its residual, or its input), its samples the same tokens for every norm.
using CalibrationStats = std::map<std::string, ActivationStats>;
inline constexpr std::string_view kStreamSuffix = " (stream)";

// The calibration inputs: `calib_file` holds one prompt per line, tokenized with
// `tokenizer_json` (each becomes input_ids [1, tokens]); `calib_dir` holds .npy files, each one
// input_ids sample ([tokens] or [1, tokens]). Errors name the file.
Status readCalibrationInputs(const std::string& calib_file, const std::string& calib_dir,
                             const std::string& tokenizer_json,
                             std::vector<std::vector<NamedTensor>>* samples);

// Runs `float_engine` over `samples` and collects the statistics (`with_gram`: also XᵀX, K^2
// floats per product); `progress` is called per sample.
Status collectCalibrationStats(const std::vector<uint8_t>& float_engine,
                               const std::vector<std::vector<NamedTensor>>& samples, bool with_gram,
                               const std::function<void(const std::string&)>& progress,
                               CalibrationStats* stats);
// Whether every product's statistics hold XᵀX.
bool hasGram(const CalibrationStats& stats);
// Whether the statistics hold the residual stream at the norms (files from before they did
// not).
bool hasStreams(const CalibrationStats& stats);

// A key for the statistics: the model, the inputs and the float compile options.
std::string calibrationKey(const std::string& model_bytes, const std::vector<std::vector<NamedTensor>>& samples,
                           const std::string& float_options);

Status writeCalibrationStats(const std::string& path, const std::string& key, const CalibrationStats& stats);
// kNotFound when the file is missing or holds another key (an empty `key` takes any).
Status readCalibrationStats(const std::string& path, const std::string& key, CalibrationStats* stats);

}  // namespace llmc
