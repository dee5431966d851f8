// CUDA graphs of decode steps (executor.cpp): each language-model engine's decode steps replayed
// from a captured graph give the logits of the same steps launched kernel by kernel, for batch
// sizes that fill their bucket and ones that are padded to it, while the sequences grow across
// KV-cache blocks. A decode step in which a host step reads a device value (a form the GPU
// hands to the CPU mid-step, as GPT-NeoX's partial rotary) is never captured: with graphs on it
// runs eagerly, and the eager run's host_reads say why; every other engine must replay.
// Skipped without a GPU or without gpu-prep's engines (LLMC_GPU_MODELS).
#include <dirent.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "llm/llm_runner.h"
#include "llmc/engine.h"

namespace llmc::testing {
namespace {

class GraphGpuTest : public CudaTest {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped()) return;
    const char* root = std::getenv("LLMC_GPU_MODELS");
    if (!root) GTEST_SKIP() << "LLMC_GPU_MODELS is not set (gpu-check.sh sets it)";
    root_ = root;
  }
  std::string root_;
};

double relativeL2(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    norm += static_cast<double>(b[i]) * b[i];
  }
  return a.size() != b.size() ? INFINITY : std::sqrt(diff / std::max(norm, 1e-30));
}

TEST_F(GraphGpuTest, ReplayedDecodeStepsMatchEagerSteps) {
  int checked = 0, replayed = 0;
  DIR* dir = opendir(root_.c_str());
  ASSERT_NE(dir, nullptr) << root_;
  std::vector<std::string> names;
  while (dirent* entry = readdir(dir)) names.push_back(entry->d_name);
  closedir(dir);
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    const std::string path = root_ + "/" + name + "/lm.engine";
    if (name[0] == '.' || !std::ifstream(path).good()) continue;
    std::shared_ptr<const Engine> engine;
    ASSERT_TRUE(Engine::load(path, &engine).ok()) << path;
    if (!engine->llmConfig()) continue;
    const int64_t vocab = engine->llmConfig()->vocab_size > 0 ? engine->llmConfig()->vocab_size : 16;
    std::unique_ptr<LlmRunner> runners[2];
    for (int graphs = 0; graphs < 2; ++graphs) {
      SessionOptions options;
      options.backend = Backend::kCuda;
      options.cuda_graphs = graphs == 1;
      Status status = LlmRunner::create(engine, 0, &runners[graphs], DType::kFloat32, options);
      ASSERT_TRUE(status.ok()) << name << ": " << status.message();
    }
    // Three sequences (prompts of 5, 17 and 30 tokens), decoded together (bucket 4: one padding
    // token), then the first alone (bucket 1), 20 steps each: past a 16-token block boundary.
    const std::vector<int64_t> lengths = {5, 17, 30};
    for (auto& runner : runners) {
      std::vector<LlmRunner::Work> prefill;
      for (size_t s = 0; s < lengths.size(); ++s) {
        std::vector<int32_t> prompt;
        for (int64_t i = 0; i < lengths[s]; ++i) prompt.push_back(static_cast<int32_t>((7 * i + 3 * s + 1) % vocab));
        int64_t cached = 0;
        ASSERT_TRUE(runner->addSequence(static_cast<int64_t>(s), prompt, &cached).ok());
        prefill.push_back({static_cast<int64_t>(s), cached, lengths[s] - cached});
      }
      std::vector<std::vector<float>> logits;
      ASSERT_TRUE(runner->step(prefill, &logits).ok()) << name;
    }
    std::vector<int64_t> held = lengths;
    int64_t host_reads = 0;
    for (int decode = 0; decode < 40; ++decode) {
      const size_t batch = decode < 20 ? lengths.size() : 1;
      std::vector<std::vector<float>> logits[2];
      for (int graphs = 0; graphs < 2; ++graphs) {
        std::vector<LlmRunner::Work> work;
        for (size_t s = 0; s < batch; ++s) {
          const int32_t token = static_cast<int32_t>((decode * 5 + s) % vocab);
          ASSERT_TRUE(runners[graphs]->appendToken(static_cast<int64_t>(s), token).ok());
          work.push_back({static_cast<int64_t>(s), held[s], 1});
        }
        Status status = runners[graphs]->step(work, &logits[graphs]);
        ASSERT_TRUE(status.ok()) << name << " decode " << decode << ": " << status.message();
        const Session::StepCounts counts = runners[graphs]->session().lastRunSteps();
        if (graphs == 0) host_reads = counts.host_reads;  // the eager run of the same step
        EXPECT_EQ(counts.cuda_graph, graphs == 1 && host_reads == 0)
            << name << " decode " << decode << " (the eager step read " << host_reads
            << " device values on the host)";
      }
      for (size_t s = 0; s < batch; ++s) {
        EXPECT_LT(relativeL2(logits[1][s], logits[0][s]), 1e-5) << name << " decode " << decode << " sequence " << s;
        ++held[s];
      }
    }
    std::printf("%-24s %s\n", name.c_str(),
                host_reads == 0 ? "decode steps replayed from CUDA graphs"
                                : ("eager with graphs on: " + std::to_string(host_reads) +
                                   " device values read on the host per step")
                                      .c_str());
    ++checked;
    if (host_reads == 0) ++replayed;
  }
  EXPECT_GT(checked, 0);
  EXPECT_GT(replayed, 0) << "no engine's decode steps were captured";
}

}  // namespace
}  // namespace llmc::testing
