// NumPy .npy and ONNX TensorProto readers and writers. Both parsers treat their input as
// untrusted: every length, count and code is checked before it is used.
#include "llmc/tensor_io.h"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <new>
#include <string_view>
#include <vector>

#include "core/api_guard.h"
#include "core/file_io.h"

namespace llmc {

namespace {

// ---------------------------------------------------------------------------------------
// Shared helpers: writing files, checked sizes, allocation (files are read by core/file_io.h).

Status writeWholeFile(const std::string& path, const std::string& prefix, const void* data,
                      size_t size_bytes) {
  FILE* file = std::fopen(path.c_str(), "wb");
  if (!file) return invalidArgument(path + ": cannot create: " + std::strerror(errno));
  bool ok = std::fwrite(prefix.data(), 1, prefix.size(), file) == prefix.size();
  if (ok && size_bytes > 0) ok = std::fwrite(data, 1, size_bytes, file) == size_bytes;
  int error = errno;
  if (std::fclose(file) != 0 && ok) {
    ok = false;
    error = errno;
  }
  if (!ok) return dataLoss(path + ": write failed: " + std::strerror(error));
  return okStatus();
}

// Element count and byte size of `shape`, refusing any shape whose product of dimensions
// (zeros counted as ones) overflows, so that later shapeNumElements() calls are safe in any
// order of multiplication.
bool checkedShapeSize(const Shape& shape, size_t element_size, int64_t* count, size_t* bytes) {
  int64_t bound = 1;
  int64_t product = 1;
  for (int64_t d : shape) {
    if (d < 0) return false;
    if (__builtin_mul_overflow(bound, d == 0 ? int64_t{1} : d, &bound)) return false;
    product = d == 0 ? 0 : product * d;  // cannot overflow: |product| <= bound
  }
  int64_t total_bytes;
  if (__builtin_mul_overflow(bound, static_cast<int64_t>(element_size), &total_bytes)) return false;
  *count = product;
  *bytes = static_cast<size_t>(product) * element_size;
  return true;
}

Status allocateTensor(DType dtype, const Shape& shape, const std::string& what, Tensor* out) {
  try {
    *out = Tensor::allocate(dtype, shape);
  } catch (const std::bad_alloc&) {
    return resourceExhausted(what + ": cannot allocate a " + dtypeName(dtype) +
                             " tensor of shape " + shapeToString(shape));
  }
  return okStatus();
}

// Bools are bytes 0 or 1; anything else would make `a == b` and `a & b` disagree later.
Status checkBoolBytes(const Tensor& tensor, const std::string& what) {
  if (tensor.dtype() != DType::kBool) return okStatus();
  const uint8_t* bytes = tensor.data<uint8_t>();
  for (int64_t i = 0; i < tensor.numElements(); ++i) {
    if (bytes[i] > 1)
      return dataLoss(what + ": bool element " + std::to_string(i) + " has byte value " +
                      std::to_string(bytes[i]) + ", expected 0 or 1");
  }
  return okStatus();
}

Status checkWritable(const std::string& path, const Tensor& tensor) {
  if (dtypeSize(tensor.dtype()) == 0)
    return invalidArgument(path + ": cannot write a tensor of dtype " +
                           std::to_string(static_cast<int>(tensor.dtype())));
  if (tensor.sizeBytes() > 0 && tensor.data() == nullptr)
    return invalidArgument(path + ": cannot write a shape-only tensor (no data)");
  return okStatus();
}

// Printable excerpt of untrusted text for an error message.
std::string quoted(std::string_view text, size_t max_chars = 80) {
  std::string result = "\"";
  for (size_t i = 0; i < text.size() && i < max_chars; ++i) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '\n') {
      result += "\\n";
    } else if (c == '"' || c == '\\') {
      result += '\\';
      result += static_cast<char>(c);
    } else if (c >= 0x20 && c < 0x7f) {
      result += static_cast<char>(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", c);
      result += hex;
    }
  }
  if (text.size() > max_chars) result += "...";
  return result + "\"";
}

// ---------------------------------------------------------------------------------------
// .npy

constexpr char kNpyMagic[] = "\x93NUMPY";
constexpr size_t kNpyMagicSize = 6;
constexpr size_t kNpyAlignment = 64;  // numpy pads the header so that data starts aligned

struct NpyDType {
  DType dtype;
  const char* descr;  // what writeNpy writes
};
constexpr NpyDType kNpyDTypes[] = {
    {DType::kFloat16, "<f2"},  {DType::kFloat32, "<f4"}, {DType::kFloat64, "<f8"},
    {DType::kInt8, "|i1"},     {DType::kInt16, "<i2"},   {DType::kInt32, "<i4"},
    {DType::kInt64, "<i8"},    {DType::kUInt8, "|u1"},   {DType::kUInt16, "<u2"},
    {DType::kUInt32, "<u4"},   {DType::kUInt64, "<u8"},  {DType::kBool, "|b1"},
    {DType::kBFloat16, "<V2"},
};

const char* npyDescrFor(DType dtype) {
  for (const auto& entry : kNpyDTypes)
    if (entry.dtype == dtype) return entry.descr;
  return nullptr;
}

// "(2, 3)", "(5,)", "()": the shape as numpy prints it.
std::string pythonShape(const Shape& shape) {
  std::string text = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) text += ", ";
    text += std::to_string(shape[i]);
  }
  if (shape.size() == 1) text += ",";
  return text + ")";
}

// Accepts a byte order ('<', '|', '=' or, for one-byte types, '>'), a kind and a size.
Status npyDescrToDType(const std::string& descr, const std::string& what, DType* dtype) {
  auto unsupported = [&]() {
    return unimplemented(what + ": .npy dtype '" + descr + "' is not supported");
  };
  if (descr.size() < 3) return unsupported();
  char order = descr[0];
  std::string type = descr.substr(1);
  if (order != '<' && order != '|' && order != '=' && order != '>') return unsupported();
  struct Code {
    const char* type;
    DType dtype;
  };
  static constexpr Code kCodes[] = {
      {"f2", DType::kFloat16},  {"f4", DType::kFloat32}, {"f8", DType::kFloat64},
      {"i1", DType::kInt8},     {"i2", DType::kInt16},   {"i4", DType::kInt32},
      {"i8", DType::kInt64},    {"u1", DType::kUInt8},   {"u2", DType::kUInt16},
      {"u4", DType::kUInt32},   {"u8", DType::kUInt64},  {"b1", DType::kBool},
      {"V2", DType::kBFloat16},
  };
  for (const auto& code : kCodes) {
    if (type != code.type) continue;
    if (order == '>' && dtypeSize(code.dtype) > 1)
      return unimplemented(what + ": big-endian .npy dtype '" + descr +
                           "' is not supported; save the array as little-endian");
    *dtype = code.dtype;
    return okStatus();
  }
  return unsupported();
}

struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  Shape shape;
};

// Parses the header's Python dict literal, e.g.
// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
class NpyHeaderParser {
 public:
  NpyHeaderParser(std::string_view text, const std::string& what) : text_(text), what_(what) {}

  Status parse(NpyHeader* header) {
    bool seen_descr = false, seen_order = false, seen_shape = false;
    skipSpace();
    if (!consume('{')) return error("expected '{'");
    while (true) {
      skipSpace();
      if (consume('}')) break;
      std::string key;
      LLMC_RETURN_IF_ERROR(parseString(&key));
      skipSpace();
      if (!consume(':')) return error("expected ':' after key '" + key + "'");
      skipSpace();
      if (key == "descr") {
        if (seen_descr) return error("duplicate key 'descr'");
        seen_descr = true;
        if (peek() == '[')
          return unimplemented(what_ + ": structured .npy dtypes are not supported");
        LLMC_RETURN_IF_ERROR(parseString(&header->descr));
      } else if (key == "fortran_order") {
        if (seen_order) return error("duplicate key 'fortran_order'");
        seen_order = true;
        LLMC_RETURN_IF_ERROR(parseBool(&header->fortran_order));
      } else if (key == "shape") {
        if (seen_shape) return error("duplicate key 'shape'");
        seen_shape = true;
        LLMC_RETURN_IF_ERROR(parseShape(&header->shape));
      } else {
        return error("unexpected key '" + key + "'");
      }
      skipSpace();
      if (consume(',')) continue;
      if (consume('}')) break;
      return error("expected ',' or '}'");
    }
    skipSpace();
    if (pos_ != text_.size()) return error("unexpected text after '}'");
    if (!seen_descr) return error("missing key 'descr'");
    if (!seen_order) return error("missing key 'fortran_order'");
    if (!seen_shape) return error("missing key 'shape'");
    return okStatus();
  }

 private:
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  bool consume(char c) {
    if (peek() != c || pos_ >= text_.size()) return false;
    ++pos_;
    return true;
  }
  void skipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }

  Status error(const std::string& message) const {
    std::string_view shown = text_;  // without the padding
    while (!shown.empty() && (shown.back() == ' ' || shown.back() == '\n')) shown.remove_suffix(1);
    return dataLoss(what_ + ": bad .npy header: " + message + " at offset " + std::to_string(pos_) +
                    " of " + quoted(shown));
  }

  Status parseString(std::string* value) {
    char quote = peek();
    if (quote != '\'' && quote != '"') return error("expected a quoted string");
    size_t end = text_.find(quote, pos_ + 1);
    if (end == std::string_view::npos) return error("unterminated string");
    *value = std::string(text_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return okStatus();
  }

  Status parseBool(bool* value) {
    if (text_.substr(pos_, 4) == "True") {
      pos_ += 4;
      *value = true;
      return okStatus();
    }
    if (text_.substr(pos_, 5) == "False") {
      pos_ += 5;
      *value = false;
      return okStatus();
    }
    return error("expected True or False");
  }

  Status parseShape(Shape* shape) {
    if (!consume('(')) return error("expected '(' to start the shape");
    shape->clear();
    while (true) {
      skipSpace();
      if (consume(')')) return okStatus();
      if (peek() < '0' || peek() > '9') return error("expected a dimension");
      int64_t dim = 0;
      while (peek() >= '0' && peek() <= '9') {
        if (__builtin_mul_overflow(dim, int64_t{10}, &dim) ||
            __builtin_add_overflow(dim, int64_t{peek() - '0'}, &dim))
          return error("dimension too large");
        ++pos_;
      }
      consume('L');  // written by Python 2 era numpy
      shape->push_back(dim);
      skipSpace();
      if (consume(',')) continue;
      if (consume(')')) return okStatus();
      return error("expected ',' or ')' in the shape");
    }
  }

  std::string_view text_;
  const std::string& what_;
  size_t pos_ = 0;
};

uint32_t readLittleEndian(const uint8_t* bytes, size_t size) {
  uint32_t value = 0;
  for (size_t i = 0; i < size; ++i) value |= static_cast<uint32_t>(bytes[i]) << (8 * i);
  return value;
}

// Copies a column-major array into row-major order.
void fortranToRowMajor(const uint8_t* source, uint8_t* destination, const Shape& shape,
                       size_t element_size) {
  size_t rank = shape.size();
  int64_t count = shapeNumElements(shape);
  if (rank <= 1 || count == 0) {
    std::memcpy(destination, source, static_cast<size_t>(count) * element_size);
    return;
  }
  std::vector<int64_t> source_strides(rank);  // in elements; the first axis moves fastest
  int64_t stride = 1;
  for (size_t axis = 0; axis < rank; ++axis) {
    source_strides[axis] = stride;
    stride *= shape[axis];
  }
  std::vector<int64_t> index(rank, 0);
  int64_t source_offset = 0;
  for (int64_t i = 0; i < count; ++i) {
    std::memcpy(destination + static_cast<size_t>(i) * element_size,
                source + static_cast<size_t>(source_offset) * element_size, element_size);
    for (size_t axis = rank; axis-- > 0;) {  // advance the row-major index
      source_offset += source_strides[axis];
      if (++index[axis] < shape[axis]) break;
      source_offset -= source_strides[axis] * shape[axis];
      index[axis] = 0;
    }
  }
}

// ---------------------------------------------------------------------------------------
// TensorProto wire format

enum WireType : uint32_t {
  kVarint = 0,
  kFixed64 = 1,
  kLengthDelimited = 2,
  kStartGroup = 3,
  kEndGroup = 4,
  kFixed32 = 5,
};

// Field numbers of onnx.TensorProto.
enum TensorProtoField : uint32_t {
  kDims = 1,
  kDataType = 2,
  kSegment = 3,
  kFloatData = 4,
  kInt32Data = 5,
  kStringData = 6,
  kInt64Data = 7,
  kName = 8,
  kRawData = 9,
  kDoubleData = 10,
  kUInt64Data = 11,
  kDocString = 12,
  kExternalData = 13,
  kDataLocation = 14,
};

const char* fieldName(uint32_t field) {
  switch (field) {
    case kDims: return "dims";
    case kDataType: return "data_type";
    case kSegment: return "segment";
    case kFloatData: return "float_data";
    case kInt32Data: return "int32_data";
    case kStringData: return "string_data";
    case kInt64Data: return "int64_data";
    case kName: return "name";
    case kRawData: return "raw_data";
    case kDoubleData: return "double_data";
    case kUInt64Data: return "uint64_data";
    case kDocString: return "doc_string";
    case kExternalData: return "external_data";
    case kDataLocation: return "data_location";
  }
  return "unknown";
}

// ONNX data types that llmc::DType does not have.
const char* unsupportedOnnxTypeName(int64_t code) {
  switch (code) {
    case 8: return "STRING";
    case 14: return "COMPLEX64";
    case 15: return "COMPLEX128";
    case 17: return "FLOAT8E4M3FN";
    case 18: return "FLOAT8E4M3FNUZ";
    case 19: return "FLOAT8E5M2";
    case 20: return "FLOAT8E5M2FNUZ";
    case 21: return "UINT4";
    case 22: return "INT4";
    case 23: return "FLOAT4E2M1";
    case 24: return "FLOAT8E8M0";
  }
  return nullptr;
}

// A bounded cursor over protobuf bytes; `base` is the offset of `begin` in the whole message
// so that errors point at the right byte.
class WireReader {
 public:
  WireReader(const uint8_t* begin, const uint8_t* end, const uint8_t* message_start,
             const std::string& what)
      : pos_(begin), end_(end), start_(message_start), what_(what) {}

  bool atEnd() const { return pos_ >= end_; }
  size_t offset() const { return static_cast<size_t>(pos_ - start_); }

  Status error(const std::string& message, size_t at) const {
    return dataLoss(what_ + ": bad TensorProto: " + message + " at byte " + std::to_string(at));
  }

  Status readVarint(uint64_t* value) {
    size_t at = offset();
    uint64_t result = 0;
    for (int i = 0; i < 10; ++i) {
      if (pos_ >= end_) return error("truncated varint", at);
      uint8_t byte = *pos_++;
      if (i == 9 && byte > 1) return error("varint overflows 64 bits", at);
      result |= static_cast<uint64_t>(byte & 0x7f) << (7 * i);
      if ((byte & 0x80) == 0) {
        *value = result;
        return okStatus();
      }
    }
    return error("varint longer than 10 bytes", at);
  }

  Status readFixed(size_t size, uint64_t* value) {
    size_t at = offset();
    if (static_cast<size_t>(end_ - pos_) < size)
      return error("truncated " + std::to_string(size * 8) + "-bit value", at);
    uint64_t result = 0;
    for (size_t i = 0; i < size; ++i) result |= static_cast<uint64_t>(pos_[i]) << (8 * i);
    pos_ += size;
    *value = result;
    return okStatus();
  }

  // A length-delimited payload: returns its bounds and moves past it.
  Status readBytes(const uint8_t** begin, const uint8_t** end) {
    size_t at = offset();
    uint64_t length;
    LLMC_RETURN_IF_ERROR(readVarint(&length));
    if (length > static_cast<uint64_t>(end_ - pos_))
      return error("length " + std::to_string(length) + " runs past the end (" +
                       std::to_string(end_ - pos_) + " bytes left)",
                   at);
    *begin = pos_;
    pos_ += length;
    *end = pos_;
    return okStatus();
  }

  Status skip(uint32_t wire_type, size_t at) {
    uint64_t ignored;
    const uint8_t *begin, *end;
    switch (wire_type) {
      case kVarint: return readVarint(&ignored);
      case kFixed64: return readFixed(8, &ignored);
      case kFixed32: return readFixed(4, &ignored);
      case kLengthDelimited: return readBytes(&begin, &end);
      case kStartGroup:
      case kEndGroup: return error("group wire types are not supported", at);
    }
    return error("invalid wire type " + std::to_string(wire_type), at);
  }

 private:
  const uint8_t* pos_;
  const uint8_t* end_;
  const uint8_t* start_;
  const std::string& what_;
};

// The fields of a TensorProto as found on the wire, before any interpretation.
struct TensorProtoFields {
  Shape dims;
  bool has_data_type = false;
  int32_t data_type = 0;
  std::string name;
  bool has_raw_data = false;
  const uint8_t* raw_data = nullptr;
  size_t raw_data_size = 0;
  std::vector<float> float_data;
  std::vector<int32_t> int32_data;
  std::vector<int64_t> int64_data;
  std::vector<double> double_data;
  std::vector<uint64_t> uint64_data;
};

// Reads one occurrence of a repeated scalar field, packed (length-delimited) or not.
// `element_wire_type` is kVarint, kFixed32 or kFixed64; `push` receives the raw 64 bits.
template <typename Push>
Status readRepeated(WireReader& reader, uint32_t field, uint32_t wire_type,
                    uint32_t element_wire_type, size_t at, const uint8_t* message_start,
                    const std::string& what, Push push) {
  auto readOne = [&](WireReader& source) -> Status {
    uint64_t value;
    if (element_wire_type == kVarint) {
      LLMC_RETURN_IF_ERROR(source.readVarint(&value));
    } else {
      LLMC_RETURN_IF_ERROR(source.readFixed(element_wire_type == kFixed32 ? 4 : 8, &value));
    }
    return push(value);
  };
  if (wire_type == element_wire_type) return readOne(reader);
  if (wire_type != kLengthDelimited)
    return reader.error(std::string("field ") + fieldName(field) + " has wire type " +
                            std::to_string(wire_type) + ", expected " +
                            std::to_string(element_wire_type) + " or 2 (packed)",
                        at);
  const uint8_t *begin, *end;
  LLMC_RETURN_IF_ERROR(reader.readBytes(&begin, &end));
  size_t fixed_size = element_wire_type == kFixed32 ? 4 : element_wire_type == kFixed64 ? 8 : 0;
  if (fixed_size != 0 && static_cast<size_t>(end - begin) % fixed_size != 0)
    return reader.error(std::string("packed ") + fieldName(field) + " holds " +
                            std::to_string(end - begin) + " bytes, not a multiple of " +
                            std::to_string(fixed_size),
                        at);
  WireReader packed(begin, end, message_start, what);
  while (!packed.atEnd()) LLMC_RETURN_IF_ERROR(readOne(packed));
  return okStatus();
}

Status expectWireType(const WireReader& reader, uint32_t field, uint32_t wire_type,
                      uint32_t expected, size_t at) {
  if (wire_type == expected) return okStatus();
  return reader.error(std::string("field ") + fieldName(field) + " has wire type " +
                          std::to_string(wire_type) + ", expected " + std::to_string(expected),
                      at);
}

Status readTensorProtoFields(const uint8_t* data, size_t size_bytes, const std::string& what,
                             TensorProtoFields* fields) {
  WireReader reader(data, data + size_bytes, data, what);
  while (!reader.atEnd()) {
    size_t at = reader.offset();
    uint64_t key;
    LLMC_RETURN_IF_ERROR(reader.readVarint(&key));
    if ((key >> 3) == 0 || (key >> 3) > 0x1fffffff)
      return reader.error("invalid field number " + std::to_string(key >> 3), at);
    uint32_t field = static_cast<uint32_t>(key >> 3);
    uint32_t wire_type = static_cast<uint32_t>(key & 7);
    auto unsupported = [&](const std::string& feature) {
      return unimplemented(what + ": TensorProto " + feature + " is not supported");
    };
    switch (field) {
      case kDims:
        LLMC_RETURN_IF_ERROR(readRepeated(
            reader, field, wire_type, kVarint, at, data, what, [&](uint64_t value) -> Status {
              int64_t dim = static_cast<int64_t>(value);
              if (dim < 0) return reader.error("negative dimension " + std::to_string(dim), at);
              fields->dims.push_back(dim);
              return okStatus();
            }));
        break;
      case kDataType: {
        LLMC_RETURN_IF_ERROR(expectWireType(reader, field, wire_type, kVarint, at));
        uint64_t value;
        LLMC_RETURN_IF_ERROR(reader.readVarint(&value));
        fields->has_data_type = true;
        fields->data_type = static_cast<int32_t>(static_cast<uint32_t>(value));
        break;
      }
      case kFloatData:
        LLMC_RETURN_IF_ERROR(readRepeated(reader, field, wire_type, kFixed32, at, data, what,
                                          [&](uint64_t value) -> Status {
                                            uint32_t bits = static_cast<uint32_t>(value);
                                            float f;
                                            std::memcpy(&f, &bits, 4);
                                            fields->float_data.push_back(f);
                                            return okStatus();
                                          }));
        break;
      case kInt32Data:
        LLMC_RETURN_IF_ERROR(readRepeated(
            reader, field, wire_type, kVarint, at, data, what, [&](uint64_t value) -> Status {
              // int32 is sign-extended to 64 bits on the wire; protobuf keeps the low half.
              fields->int32_data.push_back(static_cast<int32_t>(static_cast<uint32_t>(value)));
              return okStatus();
            }));
        break;
      case kInt64Data:
        LLMC_RETURN_IF_ERROR(readRepeated(
            reader, field, wire_type, kVarint, at, data, what, [&](uint64_t value) -> Status {
              fields->int64_data.push_back(static_cast<int64_t>(value));
              return okStatus();
            }));
        break;
      case kDoubleData:
        LLMC_RETURN_IF_ERROR(readRepeated(reader, field, wire_type, kFixed64, at, data, what,
                                          [&](uint64_t value) -> Status {
                                            double d;
                                            std::memcpy(&d, &value, 8);
                                            fields->double_data.push_back(d);
                                            return okStatus();
                                          }));
        break;
      case kUInt64Data:
        LLMC_RETURN_IF_ERROR(readRepeated(reader, field, wire_type, kVarint, at, data, what,
                                          [&](uint64_t value) -> Status {
                                            fields->uint64_data.push_back(value);
                                            return okStatus();
                                          }));
        break;
      case kName: {
        LLMC_RETURN_IF_ERROR(expectWireType(reader, field, wire_type, kLengthDelimited, at));
        const uint8_t *begin, *end;
        LLMC_RETURN_IF_ERROR(reader.readBytes(&begin, &end));
        fields->name.assign(reinterpret_cast<const char*>(begin), static_cast<size_t>(end - begin));
        break;
      }
      case kRawData: {
        LLMC_RETURN_IF_ERROR(expectWireType(reader, field, wire_type, kLengthDelimited, at));
        const uint8_t *begin, *end;
        LLMC_RETURN_IF_ERROR(reader.readBytes(&begin, &end));
        fields->has_raw_data = true;
        fields->raw_data = begin;
        fields->raw_data_size = static_cast<size_t>(end - begin);
        break;
      }
      case kDataLocation: {
        LLMC_RETURN_IF_ERROR(expectWireType(reader, field, wire_type, kVarint, at));
        uint64_t value;
        LLMC_RETURN_IF_ERROR(reader.readVarint(&value));
        if (value == 1) return unsupported("external data (data_location EXTERNAL)");
        if (value != 0) return reader.error("unknown data_location " + std::to_string(value), at);
        break;
      }
      case kSegment: return unsupported("segment");
      case kStringData: return unsupported("string_data");
      case kExternalData: return unsupported("external_data");
      default:  // doc_string, metadata_props and fields added later: not needed here
        LLMC_RETURN_IF_ERROR(reader.skip(wire_type, at));
        break;
    }
  }
  return okStatus();
}

// Which typed field holds the values of each dtype when raw_data is absent.
uint32_t typedFieldFor(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return kFloatData;
    case DType::kFloat64: return kDoubleData;
    case DType::kInt64: return kInt64Data;
    case DType::kUInt32:
    case DType::kUInt64: return kUInt64Data;
    default: return kInt32Data;  // int32 and every type narrower than 32 bits
  }
}

size_t typedFieldSize(const TensorProtoFields& fields, uint32_t field) {
  switch (field) {
    case kFloatData: return fields.float_data.size();
    case kInt32Data: return fields.int32_data.size();
    case kInt64Data: return fields.int64_data.size();
    case kDoubleData: return fields.double_data.size();
    case kUInt64Data: return fields.uint64_data.size();
  }
  return 0;
}

template <typename T>
void storeAll(const std::vector<T>& values, void* destination) {
  if (!values.empty()) std::memcpy(destination, values.data(), values.size() * sizeof(T));
}

// Narrows int32_data into `tensor`, refusing values outside the dtype's range.
Status storeInt32Data(const std::vector<int32_t>& values, const std::string& what, Tensor* tensor) {
  int64_t low = std::numeric_limits<int32_t>::min(), high = std::numeric_limits<int32_t>::max();
  switch (tensor->dtype()) {
    case DType::kBool: low = 0, high = 1; break;
    case DType::kInt8: low = -128, high = 127; break;
    case DType::kUInt8: low = 0, high = 255; break;
    case DType::kInt16: low = -32768, high = 32767; break;
    case DType::kUInt16:
    case DType::kFloat16:
    case DType::kBFloat16: low = 0, high = 65535; break;  // the 16-bit pattern
    default: break;
  }
  size_t element_size = dtypeSize(tensor->dtype());
  uint8_t* destination = static_cast<uint8_t*>(tensor->data());
  for (size_t i = 0; i < values.size(); ++i) {
    int32_t value = values[i];
    if (value < low || value > high)
      return dataLoss(what + ": int32_data[" + std::to_string(i) + "] = " + std::to_string(value) +
                      " is out of range for " + dtypeName(tensor->dtype()));
    uint32_t bits = static_cast<uint32_t>(value);
    std::memcpy(destination + i * element_size, &bits, element_size);  // little-endian host
  }
  return okStatus();
}

}  // namespace

// ---------------------------------------------------------------------------------------

Status parseNpy(const void* data, size_t size_bytes, const std::string& what, Tensor* out) {
  return guardApi("parseNpy", [&]() -> Status {
    const uint8_t* bytes = static_cast<const uint8_t*>(data);
    if (size_bytes < kNpyMagicSize + 2 || std::memcmp(bytes, kNpyMagic, kNpyMagicSize) != 0)
      return dataLoss(what + ": not a .npy file (no \\x93NUMPY magic)");
    uint8_t major = bytes[6], minor = bytes[7];
    if ((major != 1 && major != 2 && major != 3) || minor != 0)
      return unimplemented(what + ": .npy format version " + std::to_string(major) + "." +
                           std::to_string(minor) + " is not supported (1.0, 2.0 and 3.0 are)");
    size_t length_size = major == 1 ? 2 : 4;
    size_t preamble = kNpyMagicSize + 2 + length_size;
    if (size_bytes < preamble) return dataLoss(what + ": truncated .npy header");
    size_t header_size = readLittleEndian(bytes + kNpyMagicSize + 2, length_size);
    if (header_size > size_bytes - preamble)
      return dataLoss(what + ": .npy header length " + std::to_string(header_size) +
                      " runs past the end of the file (" + std::to_string(size_bytes) + " bytes)");
    std::string_view header_text(reinterpret_cast<const char*>(bytes + preamble), header_size);

    NpyHeader header;
    LLMC_RETURN_IF_ERROR(NpyHeaderParser(header_text, what).parse(&header));
    DType dtype = DType::kUndefined;
    LLMC_RETURN_IF_ERROR(npyDescrToDType(header.descr, what, &dtype));
    size_t element_size = dtypeSize(dtype);
    int64_t count;
    size_t expected_bytes;
    if (!checkedShapeSize(header.shape, element_size, &count, &expected_bytes))
      return dataLoss(what + ": .npy shape " + pythonShape(header.shape) + " is too large");
    size_t data_offset = preamble + header_size;
    size_t available = size_bytes - data_offset;
    if (available != expected_bytes)
      return dataLoss(what + ": header says shape " + pythonShape(header.shape) +
                      " but file holds " + std::to_string(available) + " bytes of data, expected " +
                      std::to_string(expected_bytes));

    Tensor tensor;
    LLMC_RETURN_IF_ERROR(allocateTensor(dtype, header.shape, what, &tensor));
    if (header.fortran_order) {
      fortranToRowMajor(bytes + data_offset, tensor.data<uint8_t>(), header.shape, element_size);
    } else if (expected_bytes > 0) {
      std::memcpy(tensor.data(), bytes + data_offset, expected_bytes);
    }
    LLMC_RETURN_IF_ERROR(checkBoolBytes(tensor, what));
    *out = std::move(tensor);
    return okStatus();
  });
}

Status readNpy(const std::string& path, Tensor* out) {
  return guardApi("readNpy", [&]() -> Status {
    std::string bytes;
    LLMC_RETURN_IF_ERROR(readFile(path, "", &bytes));
    return parseNpy(bytes.data(), bytes.size(), path, out);
  });
}

Status writeNpy(const std::string& path, const Tensor& tensor) {
  return guardApi("writeNpy", [&]() -> Status {
    LLMC_RETURN_IF_ERROR(checkWritable(path, tensor));
    const char* descr = npyDescrFor(tensor.dtype());
    if (!descr)
      return unimplemented(path + ": dtype " + dtypeName(tensor.dtype()) + " has no .npy form");
    std::string dict = std::string("{'descr': '") + descr +
                       "', 'fortran_order': False, 'shape': " + pythonShape(tensor.shape()) + ", }";
    // Version 1.0 has a 16-bit header length; longer headers (very high ranks) need 2.0.
    size_t preamble = kNpyMagicSize + 2 + 2;
    size_t padded =
        (preamble + dict.size() + 1 + kNpyAlignment - 1) / kNpyAlignment * kNpyAlignment;
    uint8_t major = 1;
    if (padded - preamble > 0xffff) {
      major = 2;
      preamble += 2;
      padded = (preamble + dict.size() + 1 + kNpyAlignment - 1) / kNpyAlignment * kNpyAlignment;
    }
    size_t header_size = padded - preamble;
    std::string file(kNpyMagic, kNpyMagicSize);
    file += static_cast<char>(major);
    file += '\0';
    for (size_t i = 0; i < preamble - kNpyMagicSize - 2; ++i)
      file += static_cast<char>((header_size >> (8 * i)) & 0xff);
    file += dict;
    file.append(header_size - dict.size() - 1, ' ');
    file += '\n';
    return writeWholeFile(path, file, tensor.data(), tensor.sizeBytes());
  });
}

Status parseTensorProto(const void* data, size_t size_bytes, const std::string& what, Tensor* out,
                        std::string* name) {
  return guardApi("parseTensorProto", [&]() -> Status {
    TensorProtoFields fields;
    LLMC_RETURN_IF_ERROR(
        readTensorProtoFields(static_cast<const uint8_t*>(data), size_bytes, what, &fields));

    if (!fields.has_data_type || fields.data_type == 0)
      return dataLoss(what + ": TensorProto has no data_type");
    if (const char* type_name = unsupportedOnnxTypeName(fields.data_type))
      return unimplemented(what + ": TensorProto data type " + type_name + " (" +
                           std::to_string(fields.data_type) + ") is not supported");
    if (!isValidDType(fields.data_type))
      return dataLoss(what + ": TensorProto has unknown data_type " +
                      std::to_string(fields.data_type));
    DType dtype = static_cast<DType>(fields.data_type);
    size_t element_size = dtypeSize(dtype);
    int64_t count;
    size_t expected_bytes;
    if (!checkedShapeSize(fields.dims, element_size, &count, &expected_bytes))
      return dataLoss(what + ": TensorProto shape " + shapeToString(fields.dims) + " is too large");
    std::string described =
        std::string(dtypeName(dtype)) + " tensor of shape " + shapeToString(fields.dims);

    static constexpr uint32_t kTypedFields[] = {kFloatData, kInt32Data, kInt64Data, kDoubleData,
                                                kUInt64Data};
    uint32_t expected_field = typedFieldFor(dtype);
    for (uint32_t field : kTypedFields) {
      if (typedFieldSize(fields, field) == 0) continue;
      if (fields.has_raw_data)
        return dataLoss(what + ": TensorProto has both raw_data and " + fieldName(field));
      if (field != expected_field)
        return dataLoss(what + ": TensorProto holds " + fieldName(field) + " for a " + described +
                        " (expected raw_data or " + fieldName(expected_field) + ")");
    }

    Tensor tensor;
    if (fields.has_raw_data) {
      if (fields.raw_data_size != expected_bytes)
        return dataLoss(what + ": TensorProto raw_data holds " +
                        std::to_string(fields.raw_data_size) + " bytes, expected " +
                        std::to_string(expected_bytes) + " for a " + described);
      LLMC_RETURN_IF_ERROR(allocateTensor(dtype, fields.dims, what, &tensor));
      if (expected_bytes > 0) std::memcpy(tensor.data(), fields.raw_data, expected_bytes);
      LLMC_RETURN_IF_ERROR(checkBoolBytes(tensor, what));
    } else {
      size_t values = typedFieldSize(fields, expected_field);
      if (values != static_cast<size_t>(count)) {
        if (values == 0)
          return dataLoss(what + ": TensorProto holds no data for a " + described +
                          " (neither raw_data nor " + fieldName(expected_field) + ")");
        return dataLoss(what + ": TensorProto " + fieldName(expected_field) + " holds " +
                        std::to_string(values) + " values, expected " + std::to_string(count) +
                        " for a " + described);
      }
      LLMC_RETURN_IF_ERROR(allocateTensor(dtype, fields.dims, what, &tensor));
      switch (expected_field) {
        case kFloatData: storeAll(fields.float_data, tensor.data()); break;
        case kDoubleData: storeAll(fields.double_data, tensor.data()); break;
        case kInt64Data: storeAll(fields.int64_data, tensor.data()); break;
        case kUInt64Data:
          if (dtype == DType::kUInt64) {
            storeAll(fields.uint64_data, tensor.data());
            break;
          }
          for (size_t i = 0; i < fields.uint64_data.size(); ++i) {
            uint64_t value = fields.uint64_data[i];
            if (value > std::numeric_limits<uint32_t>::max())
              return dataLoss(what + ": uint64_data[" + std::to_string(i) +
                              "] = " + std::to_string(value) + " is out of range for uint32");
            tensor.data<uint32_t>()[i] = static_cast<uint32_t>(value);
          }
          break;
        default: LLMC_RETURN_IF_ERROR(storeInt32Data(fields.int32_data, what, &tensor)); break;
      }
    }
    *out = std::move(tensor);
    if (name) *name = std::move(fields.name);
    return okStatus();
  });
}

Status writeTensorProto(const std::string& path, const Tensor& tensor, const std::string& name) {
  return guardApi("writeTensorProto", [&]() -> Status {
    LLMC_RETURN_IF_ERROR(checkWritable(path, tensor));
    std::string message;
    auto appendVarint = [&](uint64_t value) {
      while (value >= 0x80) {
        message += static_cast<char>((value & 0x7f) | 0x80);
        value >>= 7;
      }
      message += static_cast<char>(value);
    };
    auto appendTag = [&](uint32_t field, uint32_t wire_type) {
      appendVarint(field << 3 | wire_type);
    };
    for (int64_t dim : tensor.shape()) {  // unpacked, as onnx writes them
      appendTag(kDims, kVarint);
      appendVarint(static_cast<uint64_t>(dim));
    }
    appendTag(kDataType, kVarint);
    appendVarint(static_cast<uint64_t>(tensor.dtype()));
    if (!name.empty()) {
      appendTag(kName, kLengthDelimited);
      appendVarint(name.size());
      message += name;
    }
    appendTag(kRawData, kLengthDelimited);
    appendVarint(tensor.sizeBytes());
    return writeWholeFile(path, message, tensor.data(), tensor.sizeBytes());
  });
}

Status readTensorFile(const std::string& path, Tensor* out) {
  return guardApi("readTensorFile", [&]() -> Status {
    auto endsWith = [&](std::string_view suffix) {
      return path.size() >= suffix.size() &&
             std::string_view(path).substr(path.size() - suffix.size()) == suffix;
    };
    bool is_npy = endsWith(".npy"), is_pb = endsWith(".pb");
    if (!is_npy && !is_pb)
      return invalidArgument(path + ": unknown tensor file type (expected a .npy or .pb file)");
    std::string bytes;
    LLMC_RETURN_IF_ERROR(readFile(path, "", &bytes));
    if (is_npy) return parseNpy(bytes.data(), bytes.size(), path, out);
    return parseTensorProto(bytes.data(), bytes.size(), path, out, nullptr);
  });
}

}  // namespace llmc
