// The reader behind every user-named file (core/file_io.h): a missing file, a directory and a
// bad range are Status errors naming the argument and the path; nothing throws.
#include "core/file_io.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include "llmc/engine.h"
#include "llmc/tensor_io.h"
#include "llmc/tokenizer.h"

namespace llmc {
namespace {

class FileIoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("llmc-file-io-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_ / "folder.npy");
    std::ofstream(dir_ / "data.bin", std::ios::binary) << "0123456789";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::filesystem::path dir_;
};

bool contains(const Status& status, const std::string& text) {
  return status.message().find(text) != std::string::npos;
}

TEST_F(FileIoTest, ReadsWholeFilesAndRanges) {
  std::string bytes;
  ASSERT_TRUE(readFile(path("data.bin"), "--weights", &bytes).ok());
  EXPECT_EQ(bytes, "0123456789");
  ASSERT_TRUE(readFile(path("data.bin"), "--weights", &bytes, 3, 4).ok());
  EXPECT_EQ(bytes, "3456");
  ASSERT_TRUE(readFile(path("data.bin"), "--weights", &bytes, 7).ok());
  EXPECT_EQ(bytes, "789");
  std::vector<uint8_t> raw;
  ASSERT_TRUE(readFile(path("data.bin"), "--weights", &raw).ok());
  EXPECT_EQ(raw.size(), 10u);
}

TEST_F(FileIoTest, DirectoriesMissingFilesAndBadRangesAreNamedErrors) {
  std::string bytes;
  Status status = readFile(path("folder.npy"), "--tokenizer", &bytes);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.toString();
  EXPECT_TRUE(contains(status, "--tokenizer " + path("folder.npy") + ": is a directory"))
      << status.toString();
  status = readFile(path("absent"), "--calib", &bytes);
  EXPECT_EQ(status.code(), StatusCode::kNotFound) << status.toString();
  EXPECT_TRUE(contains(status, "--calib " + path("absent"))) << status.toString();
  status = readFile(path("data.bin"), "external data file", &bytes, 8, 4);
  EXPECT_EQ(status.code(), StatusCode::kOutOfRange) << status.toString();
  EXPECT_TRUE(contains(status, "(10 bytes)")) << status.toString();
  status = readFile(path("data.bin"), "x", &bytes, -1, 2);
  EXPECT_EQ(status.code(), StatusCode::kOutOfRange) << status.toString();
  status = readFile("", "--text", &bytes);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.toString();
  EXPECT_TRUE(checkDirectory(path("folder.npy"), "--calib-dir").ok());
  status = checkDirectory(path("data.bin"), "--calib-dir");
  EXPECT_TRUE(contains(status, "is not a directory")) << status.toString();
}

// Every runtime reader goes through it: before, a directory threw std::ios_base::failure out
// of Tokenizer::fromFile and was "not a regular file" or a read failure elsewhere.
TEST_F(FileIoTest, RuntimeReadersRefuseDirectories) {
  std::unique_ptr<Tokenizer> tokenizer;
  Status status = Tokenizer::fromFile(path("folder.npy"), &tokenizer);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.toString();
  EXPECT_TRUE(contains(status, "is a directory")) << status.toString();
  Tensor tensor;
  status = readTensorFile(path("folder.npy"), &tensor);
  EXPECT_TRUE(contains(status, "is a directory")) << status.toString();
  status = readNpy(path("folder.npy"), &tensor);
  EXPECT_TRUE(contains(status, "is a directory")) << status.toString();
  std::shared_ptr<const Engine> engine;
  status = Engine::load(path("folder.npy"), &engine);
  EXPECT_TRUE(contains(status, "engine " + path("folder.npy") + ": is a directory"))
      << status.toString();
  status = Engine::load(path("absent.engine"), &engine);
  EXPECT_EQ(status.code(), StatusCode::kNotFound) << status.toString();
}

}  // namespace
}  // namespace llmc
