// Tests of the .npy and TensorProto readers and writers: files written by numpy and onnx
// (test/unit/core/data/make_tensor_io_fixtures.py), round trips of every dtype, the ONNX
// backend test data, and corrupt inputs that must give one clear error.
#include "llmc/tensor_io.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"

namespace llmc {
namespace {

namespace fs = std::filesystem;

const fs::path kFixtures = fs::path(LLMC_TEST_SOURCE_DIR) / "unit" / "core" / "data" / "tensor_io";

constexpr DType kAllDTypes[] = {DType::kFloat32, DType::kUInt8,   DType::kInt8,   DType::kUInt16,
                                DType::kInt16,   DType::kInt32,   DType::kInt64,  DType::kBool,
                                DType::kFloat16, DType::kFloat64, DType::kUInt32, DType::kUInt64,
                                DType::kBFloat16};

// Element i of any tensor as a double.
double elementAsDouble(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kFloat32: return t.data<float>()[i];
    case DType::kFloat64: return t.data<double>()[i];
    case DType::kFloat16: return toFloat(t.data<Float16>()[i]);
    case DType::kBFloat16: return toFloat(t.data<BFloat16>()[i]);
    case DType::kInt8: return t.data<int8_t>()[i];
    case DType::kInt16: return t.data<int16_t>()[i];
    case DType::kInt32: return t.data<int32_t>()[i];
    case DType::kInt64: return static_cast<double>(t.data<int64_t>()[i]);
    case DType::kUInt8: return t.data<uint8_t>()[i];
    case DType::kUInt16: return t.data<uint16_t>()[i];
    case DType::kUInt32: return t.data<uint32_t>()[i];
    case DType::kUInt64: return static_cast<double>(t.data<uint64_t>()[i]);
    case DType::kBool: return t.data<uint8_t>()[i];
    default: return 0;
  }
}

// The values make_tensor_io_fixtures.py writes for each dtype, shape (2, 3).
std::vector<double> fixtureValues(DType dtype) {
  if (dtype == DType::kBool) return {1, 0, 1, 1, 0, 0};
  std::vector<double> values;
  for (int i = 0; i < 6; ++i) {
    if (isFloatDType(dtype)) {
      values.push_back((i - 3) * 0.5);
    } else if (dtype == DType::kUInt8 || dtype == DType::kUInt16 || dtype == DType::kUInt32 ||
               dtype == DType::kUInt64) {
      values.push_back(i);
    } else {
      values.push_back(i - 3);
    }
  }
  return values;
}

void expectValues(const Tensor& t, DType dtype, const Shape& shape,
                  const std::vector<double>& values) {
  ASSERT_EQ(t.dtype(), dtype) << dtypeName(t.dtype());
  ASSERT_EQ(t.shape(), shape);
  ASSERT_EQ(t.numElements(), static_cast<int64_t>(values.size()));
  for (int64_t i = 0; i < t.numElements(); ++i)
    EXPECT_EQ(elementAsDouble(t, i), values[static_cast<size_t>(i)]) << "element " << i;
}

std::string fixture(const std::string& name) {
  fs::path path = kFixtures / name;
  return path.string();
}

bool fixturesPresent() { return fs::exists(kFixtures / "float32.npy"); }

std::string readBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string tempPath(const std::string& name) {
  return (fs::path(testing::TempDir()) / ("llmc_tensor_io_" + name)).string();
}

// A tensor of `dtype` filled with reproducible random bytes (bools 0 or 1).
Tensor randomTensor(DType dtype, const Shape& shape, uint32_t seed) {
  Tensor t = Tensor::allocate(dtype, shape);
  std::mt19937 rng(seed);
  auto* bytes = t.data<uint8_t>();
  for (size_t i = 0; i < t.sizeBytes(); ++i)
    bytes[i] = static_cast<uint8_t>(dtype == DType::kBool ? rng() & 1 : rng());
  return t;
}

void expectSameBytes(const Tensor& actual, const Tensor& expected) {
  ASSERT_EQ(actual.dtype(), expected.dtype());
  ASSERT_EQ(actual.shape(), expected.shape());
  ASSERT_EQ(actual.sizeBytes(), expected.sizeBytes());
  if (expected.sizeBytes() > 0) {
    EXPECT_EQ(std::memcmp(actual.data(), expected.data(), expected.sizeBytes()), 0);
  }
}

// ---------------------------------------------------------------------------------------
// Files written by numpy and onnx.

TEST(TensorIoTest, ReadsNpyWrittenByNumpyForEveryDType) {
  if (!fixturesPresent()) GTEST_SKIP() << "no fixtures at " << kFixtures;
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(dtypeName(dtype));
    Tensor t;
    Status status = readNpy(fixture(std::string(dtypeName(dtype)) + ".npy"), &t);
    ASSERT_TRUE(status.ok()) << status.toString();
    expectValues(t, dtype, {2, 3}, fixtureValues(dtype));
  }
}

TEST(TensorIoTest, ReadsTensorProtoWrittenByOnnx) {
  if (!fixturesPresent()) GTEST_SKIP() << "no fixtures at " << kFixtures;
  for (DType dtype : kAllDTypes) {
    std::string base = dtypeName(dtype);
    for (const char* form : {"_raw", "_typed"}) {
      std::string file = base + form + ".pb";
      if (!fs::exists(fixture(file))) continue;  // onnx writes no raw bfloat16 from numpy
      SCOPED_TRACE(file);
      std::string bytes = readBytes(fixture(file));
      Tensor t;
      std::string name;
      Status status = parseTensorProto(bytes.data(), bytes.size(), file, &t, &name);
      ASSERT_TRUE(status.ok()) << status.toString();
      expectValues(t, dtype, {2, 3}, fixtureValues(dtype));
      EXPECT_EQ(name, (form == std::string("_raw") ? "x_" : "t_") + base);
    }
  }
}

TEST(TensorIoTest, ReadsNpyLayoutsAndVersions) {
  if (!fixturesPresent()) GTEST_SKIP() << "no fixtures at " << kFixtures;
  std::vector<double> grid;
  for (int i = 0; i < 24; ++i) grid.push_back(i);
  for (const char* file : {"fortran_order.npy", "version2.npy", "version3.npy"}) {
    SCOPED_TRACE(file);
    Tensor t;
    Status status = readTensorFile(fixture(file), &t);
    ASSERT_TRUE(status.ok()) << status.toString();
    expectValues(t, DType::kInt32, {2, 3, 4}, grid);
  }
  Tensor scalar;
  ASSERT_TRUE(readTensorFile(fixture("scalar.npy"), &scalar).ok());
  expectValues(scalar, DType::kFloat32, {}, {3.5});
  ASSERT_TRUE(readTensorFile(fixture("scalar.pb"), &scalar).ok());
  expectValues(scalar, DType::kFloat32, {}, {3.5});
  Tensor empty;
  ASSERT_TRUE(readTensorFile(fixture("empty.npy"), &empty).ok());
  expectValues(empty, DType::kFloat32, {0, 3}, {});
}

TEST(TensorIoTest, UnsupportedFeaturesAreUnimplemented) {
  if (!fixturesPresent()) GTEST_SKIP() << "no fixtures at " << kFixtures;
  struct Case {
    const char* file;
    const char* message;
  };
  for (const Case& c : {Case{"big_endian.npy", "big-endian .npy dtype '>i4'"},
                        Case{"complex.npy", ".npy dtype '<c8' is not supported"},
                        Case{"string.pb", "string_data"}, Case{"external.pb", "external_data"}}) {
    SCOPED_TRACE(c.file);
    Tensor t;
    Status status = readTensorFile(fixture(c.file), &t);
    EXPECT_EQ(status.code(), StatusCode::kUnimplemented) << status.toString();
    EXPECT_NE(status.message().find(c.message), std::string::npos) << status.message();
    EXPECT_NE(status.message().find(c.file), std::string::npos) << status.message();
  }
}

// ---------------------------------------------------------------------------------------
// Round trips.

TEST(TensorIoTest, RoundTripsEveryDTypeThroughNpyAndTensorProto) {
  const Shape shapes[] = {{}, {0}, {7}, {2, 3, 5}, {1, 0, 3}, {3, 1, 1, 2}};
  uint32_t seed = 1;
  for (DType dtype : kAllDTypes) {
    for (const Shape& shape : shapes) {
      SCOPED_TRACE(std::string(dtypeName(dtype)) + " " + shapeToString(shape));
      Tensor original = randomTensor(dtype, shape, seed++);

      std::string npy = tempPath("round_trip.npy");
      Status status = writeNpy(npy, original);
      ASSERT_TRUE(status.ok()) << status.toString();
      Tensor from_npy;
      status = readTensorFile(npy, &from_npy);
      ASSERT_TRUE(status.ok()) << status.toString();
      expectSameBytes(from_npy, original);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(from_npy.data()) % 64, 0u);

      std::string pb = tempPath("round_trip.pb");
      status = writeTensorProto(pb, original, "weight.0");
      ASSERT_TRUE(status.ok()) << status.toString();
      std::string bytes = readBytes(pb);
      Tensor from_pb;
      std::string name;
      status = parseTensorProto(bytes.data(), bytes.size(), pb, &from_pb, &name);
      ASSERT_TRUE(status.ok()) << status.toString();
      expectSameBytes(from_pb, original);
      EXPECT_EQ(name, "weight.0");
    }
  }
}

TEST(TensorIoTest, WritesNpyHeaderAsNumpyDoes) {
  Tensor t = randomTensor(DType::kFloat32, {2, 3}, 7);
  std::string path = tempPath("header.npy");
  ASSERT_TRUE(writeNpy(path, t).ok());
  std::string bytes = readBytes(path);
  ASSERT_GE(bytes.size(), 10u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  size_t header_size = static_cast<uint8_t>(bytes[8]) | static_cast<uint8_t>(bytes[9]) << 8;
  EXPECT_EQ((10 + header_size) % 64, 0u);
  EXPECT_EQ(bytes.size(), 10 + header_size + 24);
  std::string header = bytes.substr(10, header_size);
  EXPECT_EQ(header.rfind("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 0), 0u)
      << header;
  EXPECT_EQ(header.back(), '\n');
}

TEST(TensorIoTest, WritesVersion2NpyWhenTheHeaderIsLong) {
  Shape shape(30000, 1);  // "1, " per dimension: a header past 65535 bytes
  shape[0] = 2;
  Tensor t = randomTensor(DType::kInt16, shape, 3);
  std::string path = tempPath("long_header.npy");
  ASSERT_TRUE(writeNpy(path, t).ok());
  std::string bytes = readBytes(path);
  EXPECT_EQ(bytes[6], 2);
  Tensor back;
  Status status = parseNpy(bytes.data(), bytes.size(), "long_header.npy", &back);
  ASSERT_TRUE(status.ok()) << status.toString();
  expectSameBytes(back, t);
}

TEST(TensorIoTest, WritesBFloat16AsV2) {
  Tensor t = randomTensor(DType::kBFloat16, {4}, 5);
  std::string path = tempPath("bf16.npy");
  ASSERT_TRUE(writeNpy(path, t).ok());
  EXPECT_NE(readBytes(path).find("'descr': '<V2'"), std::string::npos);
}

TEST(TensorIoTest, WriteRejectsTensorsWithoutData) {
  Tensor shape_only = Tensor::view(DType::kFloat32, {2, 2}, static_cast<const void*>(nullptr));
  EXPECT_EQ(writeNpy(tempPath("none.npy"), shape_only).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(writeTensorProto(tempPath("none.pb"), shape_only, "x").code(),
            StatusCode::kInvalidArgument);
  Tensor undefined;
  EXPECT_EQ(writeNpy(tempPath("none.npy"), undefined).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(writeNpy("/nonexistent-dir/x.npy", randomTensor(DType::kInt8, {1}, 1)).code(),
            StatusCode::kInvalidArgument);
}

TEST(TensorIoTest, ReadTensorFileDispatchesOnExtension) {
  Status status;
  Tensor t;
  status = readTensorFile("inputs/x.txt", &t);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("inputs/x.txt"), std::string::npos);
  status = readTensorFile("/nonexistent-dir/x.npy", &t);
  EXPECT_EQ(status.code(), StatusCode::kNotFound) << status.toString();
  status = readTensorFile("/nonexistent-dir/x.pb", &t);
  EXPECT_EQ(status.code(), StatusCode::kNotFound) << status.toString();
}

// ---------------------------------------------------------------------------------------
// ONNX backend test data.

// The Debian package's copy and the one in the repository's venv (scripts/setup.sh).
const fs::path kOnnxNodeTestDirs[] = {
    "/usr/share/libonnx-testdata/data/node",
    fs::path(LLMC_TEST_SOURCE_DIR).parent_path() / ".venv" / "lib" / "python3.11" /
        "site-packages" / "onnx" / "backend" / "test" / "data" / "node",
};

TEST(TensorIoTest, ReadsOnnxNodeTestAdd) {
  fs::path dir = kOnnxNodeTestDirs[0] / "test_add" / "test_data_set_0";
  if (!fs::exists(dir / "input_0.pb")) GTEST_SKIP() << "no ONNX test data at " << dir;
  Tensor a, b, sum;
  ASSERT_TRUE(readTensorFile((dir / "input_0.pb").string(), &a).ok());
  ASSERT_TRUE(readTensorFile((dir / "input_1.pb").string(), &b).ok());
  ASSERT_TRUE(readTensorFile((dir / "output_0.pb").string(), &sum).ok());
  ASSERT_EQ(a.shape(), (Shape{3, 4, 5}));
  ASSERT_EQ(a.dtype(), DType::kFloat32);
  ASSERT_EQ(sum.shape(), a.shape());
  for (int64_t i = 0; i < a.numElements(); ++i)
    EXPECT_EQ(sum.data<float>()[i], a.data<float>()[i] + b.data<float>()[i]) << i;
}

// Every tensor file of every node test either loads or names the unsupported feature.
// Sequence and optional tests store SequenceProto/OptionalProto, not TensorProto: skipped.
TEST(TensorIoTest, ReadsEveryOnnxNodeTestTensor) {
  int loaded = 0, unsupported = 0;
  for (const fs::path& root : kOnnxNodeTestDirs) {
    if (!fs::exists(root)) continue;
    for (const auto& test : fs::directory_iterator(root)) {
      std::string test_name = test.path().filename().string();
      if (test_name.find("sequence") != std::string::npos ||
          test_name.find("optional") != std::string::npos ||
          test_name.find("_opt") != std::string::npos ||
          test_name.find("split_to_sequence") != std::string::npos ||
          test_name.find("loop") != std::string::npos || test_name.find("if_") != std::string::npos)
        continue;
      fs::path data_set = test.path() / "test_data_set_0";
      if (!fs::exists(data_set)) continue;
      for (const auto& file : fs::directory_iterator(data_set)) {
        if (file.path().extension() != ".pb") continue;
        Tensor t;
        Status status = readTensorFile(file.path().string(), &t);
        if (status.ok()) {
          ++loaded;
        } else {
          EXPECT_EQ(status.code(), StatusCode::kUnimplemented) << status.toString();
          ++unsupported;
        }
      }
    }
  }
  if (loaded + unsupported == 0) GTEST_SKIP() << "no ONNX node test data";
  std::printf("%d tensor files loaded, %d unsupported\n", loaded, unsupported);
  EXPECT_GT(loaded, 10 * unsupported) << loaded << " loaded, " << unsupported << " unsupported";
}

// ---------------------------------------------------------------------------------------
// Corrupt .npy input.

std::string npyFile(const std::string& dict, const std::string& data, char major = 1) {
  std::string header = dict;
  size_t preamble = major == 1 ? 10 : 12;
  while ((preamble + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string file("\x93NUMPY", 6);
  file += major;
  file += '\0';
  file += static_cast<char>(header.size() & 0xff);
  file += static_cast<char>((header.size() >> 8) & 0xff);
  if (major != 1) file += std::string(2, '\0');
  return file + header + data;
}

Status parseNpyString(const std::string& bytes, Tensor* t) {
  return parseNpy(bytes.data(), bytes.size(), "inputs/x.npy", t);
}

TEST(TensorIoTest, NpyDataSizeMismatchNamesShapeAndSizes) {
  Tensor t;
  std::string file =
      npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", std::string(20, 'a'));
  Status status = parseNpyString(file, &t);
  EXPECT_EQ(status.code(), StatusCode::kDataLoss);
  EXPECT_EQ(status.message(),
            "inputs/x.npy: header says shape (2, 3) but file holds 20 bytes of data, expected 24");
  file =
      npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", std::string(28, 'a'));
  EXPECT_EQ(parseNpyString(file, &t).code(), StatusCode::kDataLoss);
}

TEST(TensorIoTest, NpyHeaderVariantsThatNumpyAccepts) {
  Tensor t;
  // Keys in any order, double quotes, no trailing comma, Python 2 long suffix, version 2.0.
  for (const std::string& dict :
       {std::string("{'shape': (2,), 'fortran_order': False, 'descr': '<i2'}"),
        std::string("{\"descr\": \"<i2\", \"fortran_order\": False, \"shape\": (2L,)}"),
        std::string("{'descr':'=i2','fortran_order':True,'shape':(2 ,)}")}) {
    SCOPED_TRACE(dict);
    Status status = parseNpyString(npyFile(dict, std::string("\x01\x00\x02\x00", 4)), &t);
    ASSERT_TRUE(status.ok()) << status.toString();
    expectValues(t, DType::kInt16, {2}, {1, 2});
  }
  Status status = parseNpyString(
      npyFile("{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }", "abc", 2), &t);
  ASSERT_TRUE(status.ok()) << status.toString();
  expectValues(t, DType::kUInt8, {3}, {'a', 'b', 'c'});
}

TEST(TensorIoTest, NpyCorruptHeadersGiveOneClearError) {
  struct Case {
    std::string dict;
    StatusCode code;
    const char* message;
  };
  const Case cases[] = {
      {"{'descr': '<f4', 'fortran_order': False}", StatusCode::kDataLoss, "missing key 'shape'"},
      {"{'descr': '<f4', 'shape': (1,)}", StatusCode::kDataLoss, "missing key 'fortran_order'"},
      {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}",
       StatusCode::kDataLoss, "duplicate key 'descr'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'extra': 1}", StatusCode::kDataLoss,
       "unexpected key 'extra'"},
      {"{'descr': '<f4', 'fortran_order': false, 'shape': (1,)}", StatusCode::kDataLoss,
       "expected True or False"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3)}", StatusCode::kDataLoss,
       "expected a dimension"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2 3)}", StatusCode::kDataLoss,
       "expected ',' or ')'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}",
       StatusCode::kDataLoss, "dimension too large"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296)}",
       StatusCode::kDataLoss, "is too large"},
      {"{'descr': '<f4, 'fortran_order': False, 'shape': (1,)}", StatusCode::kDataLoss,
       "expected ',' or '}' at offset 17 of \"{'descr': '<f4, 'fortran_order'"},
      {"{'descr' '<f4', 'fortran_order': False, 'shape': (1,)}", StatusCode::kDataLoss,
       "expected ':' after key 'descr'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,)", StatusCode::kDataLoss,
       "expected ',' or '}'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} x", StatusCode::kDataLoss,
       "unexpected text after '}'"},
      {"['descr']", StatusCode::kDataLoss, "expected '{'"},
      {"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,)}",
       StatusCode::kUnimplemented, "structured"},
      {"{'descr': '<U3', 'fortran_order': False, 'shape': (1,)}", StatusCode::kUnimplemented,
       "'<U3' is not supported"},
      {"{'descr': '', 'fortran_order': False, 'shape': (1,)}", StatusCode::kUnimplemented,
       "'' is not supported"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.dict);
    Tensor t;
    Status status = parseNpyString(npyFile(c.dict, std::string(4, '\0')), &t);
    EXPECT_EQ(status.code(), c.code) << status.toString();
    EXPECT_NE(status.message().find(c.message), std::string::npos) << status.message();
    EXPECT_EQ(status.message().rfind("inputs/x.npy: ", 0), 0u) << status.message();
  }
}

TEST(TensorIoTest, NpyCorruptPreambleAndData) {
  Tensor t;
  EXPECT_EQ(parseNpyString("", &t).code(), StatusCode::kDataLoss);
  EXPECT_EQ(parseNpyString("PK\x03\x04 not numpy", &t).code(), StatusCode::kDataLoss);
  std::string good = npyFile("{'descr': '|b1', 'fortran_order': False, 'shape': (2,), }",
                             std::string("\x01\x00", 2));
  ASSERT_TRUE(parseNpyString(good, &t).ok());
  std::string future = good;
  future[6] = 4;
  EXPECT_EQ(parseNpyString(future, &t).code(), StatusCode::kUnimplemented);
  std::string long_header = good;
  long_header[9] = 0x7f;
  Status status = parseNpyString(long_header, &t);
  EXPECT_EQ(status.code(), StatusCode::kDataLoss);
  EXPECT_NE(status.message().find("runs past the end"), std::string::npos) << status.message();
  std::string bad_bool = good;
  bad_bool.back() = 2;
  status = parseNpyString(bad_bool, &t);
  EXPECT_EQ(status.code(), StatusCode::kDataLoss);
  EXPECT_NE(status.message().find("bool element 1 has byte value 2"), std::string::npos)
      << status.message();
  // Every truncation fails cleanly.
  for (size_t size = 0; size < good.size(); ++size) {
    std::vector<char> prefix(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(size));
    EXPECT_FALSE(parseNpy(prefix.data(), prefix.size(), "cut.npy", &t).ok()) << size;
  }
}

// ---------------------------------------------------------------------------------------
// Corrupt TensorProto input.

// Builds protobuf wire bytes by hand.
class Proto {
 public:
  Proto& varint(uint64_t value) {
    while (value >= 0x80) {
      bytes_ += static_cast<char>((value & 0x7f) | 0x80);
      value >>= 7;
    }
    bytes_ += static_cast<char>(value);
    return *this;
  }
  Proto& tag(uint32_t field, uint32_t wire_type) { return varint(field << 3 | wire_type); }
  Proto& varintField(uint32_t field, uint64_t value) { return tag(field, 0).varint(value); }
  Proto& bytesField(uint32_t field, const std::string& payload) {
    tag(field, 2).varint(payload.size());
    bytes_ += payload;
    return *this;
  }
  Proto& fixed32Field(uint32_t field, float value) {
    tag(field, 5);
    char raw[4];
    std::memcpy(raw, &value, 4);
    bytes_.append(raw, 4);
    return *this;
  }
  Proto& raw(const std::string& bytes) {
    bytes_ += bytes;
    return *this;
  }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

std::string packedVarints(const std::vector<uint64_t>& values) {
  Proto p;
  for (uint64_t v : values) p.varint(v);
  return p.bytes();
}

Status parseProto(const Proto& proto, Tensor* t, std::string* name = nullptr) {
  return parseTensorProto(proto.bytes().data(), proto.bytes().size(), "x.pb", t, name);
}

TEST(TensorIoTest, TensorProtoPackedAndUnpackedFields) {
  Tensor t;
  // Unpacked floats, packed dims, unknown fields (doc_string, field 99 of every wire type).
  Proto unpacked;
  unpacked.bytesField(1, packedVarints({2})).varintField(2, 1);
  unpacked.fixed32Field(4, 1.5f).bytesField(12, "doc").fixed32Field(4, -2.0f);
  unpacked.varintField(99, 5).tag(99, 1).raw(std::string(8, 'x')).tag(99, 5).raw("abcd");
  Status status = parseProto(unpacked, &t);
  ASSERT_TRUE(status.ok()) << status.toString();
  expectValues(t, DType::kFloat32, {2}, {1.5, -2.0});

  // int32_data negative values are 10-byte varints; dims split over two fields.
  Proto int8s;
  int8s.varintField(1, 1).varintField(1, 3).varintField(2, 3);
  int8s.bytesField(5, packedVarints({static_cast<uint64_t>(int64_t{-128}), 0, 127}));
  status = parseProto(int8s, &t);
  ASSERT_TRUE(status.ok()) << status.toString();
  expectValues(t, DType::kInt8, {1, 3}, {-128, 0, 127});

  // uint64_data for uint32, int64_data unpacked, double_data packed.
  Proto uint32s;
  uint32s.varintField(1, 2).varintField(2, 12).varintField(11, 4294967295u).varintField(11, 7);
  ASSERT_TRUE(parseProto(uint32s, &t).ok());
  expectValues(t, DType::kUInt32, {2}, {4294967295.0, 7});
  Proto int64s;
  int64s.varintField(1, 2).varintField(2, 7).varintField(7, static_cast<uint64_t>(int64_t{-5}));
  int64s.varintField(7, 1ull << 62);
  ASSERT_TRUE(parseProto(int64s, &t).ok());
  EXPECT_EQ(t.data<int64_t>()[0], -5);
  EXPECT_EQ(t.data<int64_t>()[1], int64_t{1} << 62);
  Proto doubles;
  double values[2] = {0.25, -8.0};
  doubles.varintField(1, 2).varintField(2, 11).bytesField(
      10, std::string(reinterpret_cast<const char*>(values), sizeof(values)));
  ASSERT_TRUE(parseProto(doubles, &t).ok());
  expectValues(t, DType::kFloat64, {2}, {0.25, -8.0});

  // A tensor with no elements needs no data; data_location DEFAULT is fine.
  Proto empty;
  empty.varintField(1, 0).varintField(1, 4).varintField(2, 1).varintField(14, 0);
  ASSERT_TRUE(parseProto(empty, &t).ok());
  expectValues(t, DType::kFloat32, {0, 4}, {});
}

TEST(TensorIoTest, TensorProtoCorruptInputGivesOneClearError) {
  std::string float_raw(8, '\0');
  struct Case {
    const char* description;
    Proto proto;
    StatusCode code;
    const char* message;
  };
  auto base = [] { return Proto().varintField(1, 2).varintField(2, 1); };  // float32 [2]
  std::vector<Case> cases;
  cases.push_back({"empty input", Proto(), StatusCode::kDataLoss, "no data_type"});
  cases.push_back({"varint overflow", Proto().raw(std::string(10, '\xff') + "\x01"),
                   StatusCode::kDataLoss, "varint"});
  cases.push_back({"10th varint byte > 1", Proto().raw(std::string(9, '\xff') + "\x02"),
                   StatusCode::kDataLoss, "varint overflows 64 bits"});
  cases.push_back({"truncated varint", Proto().raw("\x08\x80"), StatusCode::kDataLoss,
                   "truncated varint at byte 1"});
  cases.push_back(
      {"length past end", base().raw("\x4a\x10short"), StatusCode::kDataLoss, "runs past the end"});
  cases.push_back({"group wire type", base().tag(20, 3), StatusCode::kDataLoss, "group"});
  cases.push_back({"wire type 7", base().tag(20, 7), StatusCode::kDataLoss, "invalid wire type 7"});
  cases.push_back(
      {"field number 0", base().raw("\x02"), StatusCode::kDataLoss, "invalid field number 0"});
  cases.push_back({"truncated fixed64", base().tag(10, 1).raw("abc"), StatusCode::kDataLoss,
                   "truncated 64-bit value"});
  cases.push_back({"packed floats not a multiple of 4", base().bytesField(4, "abcdef"),
                   StatusCode::kDataLoss, "not a multiple of 4"});
  cases.push_back({"name with a varint", base().varintField(8, 1), StatusCode::kDataLoss,
                   "field name has wire type 0"});
  cases.push_back({"data_type as bytes", Proto().bytesField(2, "x"), StatusCode::kDataLoss,
                   "field data_type has wire type 2"});
  cases.push_back({"negative dim",
                   Proto().varintField(1, static_cast<uint64_t>(int64_t{-1})).varintField(2, 1),
                   StatusCode::kDataLoss, "negative dimension -1"});
  cases.push_back({"huge dims",
                   Proto().varintField(1, 1ull << 40).varintField(1, 1ull << 40).varintField(2, 1),
                   StatusCode::kDataLoss, "is too large"});
  cases.push_back({"unknown data type", Proto().varintField(2, 99), StatusCode::kDataLoss,
                   "unknown data_type 99"});
  cases.push_back({"float8", base().varintField(2, 17), StatusCode::kUnimplemented,
                   "FLOAT8E4M3FN (17) is not supported"});
  cases.push_back({"raw_data too short", base().bytesField(9, "1234567"), StatusCode::kDataLoss,
                   "raw_data holds 7 bytes, expected 8 for a float32 tensor of shape [2]"});
  cases.push_back({"float_data count", base().fixed32Field(4, 1.0f), StatusCode::kDataLoss,
                   "float_data holds 1 values, expected 2"});
  cases.push_back({"no data", base(), StatusCode::kDataLoss, "holds no data"});
  cases.push_back({"raw and typed", base().bytesField(9, float_raw).fixed32Field(4, 1.0f),
                   StatusCode::kDataLoss, "both raw_data and float_data"});
  cases.push_back({"wrong typed field", base().bytesField(7, packedVarints({1, 2})),
                   StatusCode::kDataLoss, "holds int64_data for a float32 tensor"});
  cases.push_back({"int8 out of range",
                   Proto().varintField(1, 1).varintField(2, 3).varintField(5, 300),
                   StatusCode::kDataLoss, "int32_data[0] = 300 is out of range for int8"});
  cases.push_back({"uint32 out of range",
                   Proto().varintField(1, 1).varintField(2, 12).varintField(11, 1ull << 32),
                   StatusCode::kDataLoss, "out of range for uint32"});
  cases.push_back({"bool raw byte", Proto().varintField(2, 9).bytesField(9, "\x03"),
                   StatusCode::kDataLoss, "bool element 0 has byte value 3"});
  cases.push_back({"external location", base().varintField(14, 1), StatusCode::kUnimplemented,
                   "external data"});
  cases.push_back({"bad location", base().varintField(14, 5), StatusCode::kDataLoss,
                   "unknown data_location 5"});
  cases.push_back({"segment", base().bytesField(3, ""), StatusCode::kUnimplemented, "segment"});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.description);
    Tensor t;
    Status status = parseProto(c.proto, &t);
    EXPECT_EQ(status.code(), c.code) << status.toString();
    EXPECT_NE(status.message().find(c.message), std::string::npos) << status.message();
    EXPECT_EQ(status.message().rfind("x.pb: ", 0), 0u) << status.message();
  }
}

TEST(TensorIoTest, TensorProtoTruncationsFailCleanly) {
  Tensor t = randomTensor(DType::kFloat16, {2, 3}, 9);
  std::string path = tempPath("cut.pb");
  ASSERT_TRUE(writeTensorProto(path, t, "name").ok());
  std::string good = readBytes(path);
  Tensor back;
  ASSERT_TRUE(parseTensorProto(good.data(), good.size(), "cut.pb", &back, nullptr).ok());
  for (size_t size = 0; size < good.size(); ++size) {
    std::vector<char> prefix(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(size));
    EXPECT_FALSE(parseTensorProto(prefix.data(), prefix.size(), "cut.pb", &back, nullptr).ok())
        << size;
  }
}

// Random bytes never crash either parser (the fuzz targets in test/fuzz go much further).
TEST(TensorIoTest, RandomBytesNeverCrash) {
  std::mt19937 rng(42);
  for (int i = 0; i < 2000; ++i) {
    std::vector<uint8_t> bytes(rng() % 200);
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    if (i % 2 == 0 && bytes.size() >= 8) std::memcpy(bytes.data(), "\x93NUMPY\x01\x00", 8);
    Tensor t;
    (void)parseNpy(bytes.data(), bytes.size(), "random", &t);
    (void)parseTensorProto(bytes.data(), bytes.size(), "random", &t, nullptr);
  }
}

}  // namespace
}  // namespace llmc
