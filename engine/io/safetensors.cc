// Validating safetensors reader and a minimal FP32 writer. See safetensors.h.
//
// Every number in the header is checked before it is used: the header length against the file,
// each tensor's byte range against the data section, the byte count against shape x dtype size
// (overflow-checked), and the ranges against each other (no overlaps). Holes between tensors
// and trailing bytes are allowed. nlohmann::json is used without exceptions escaping: parsing
// uses the non-throwing overload and every value's type is checked before it is read.
#include "engine/io/safetensors.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <system_error>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace jasper {
namespace {

using json = nlohmann::json;

// A larger header is certainly not a model: refuse before parsing it.
constexpr uint64_t kMaxHeaderBytes = 100ull * 1024 * 1024;

struct DTypeInfo {
  DType dtype;
  const char* name;
  int size;
};

constexpr DTypeInfo kDTypes[] = {
    {DType::kF32, "F32", 4},   {DType::kF16, "F16", 2}, {DType::kBF16, "BF16", 2},
    {DType::kF64, "F64", 8},   {DType::kI64, "I64", 8}, {DType::kI32, "I32", 4},
    {DType::kI16, "I16", 2},   {DType::kI8, "I8", 1},   {DType::kU8, "U8", 1},
    {DType::kBool, "BOOL", 1},
};

bool DTypeFromName(const std::string& name, DType* dtype) {
  for (const DTypeInfo& info : kDTypes) {
    if (name == info.name) {
      *dtype = info.dtype;
      return true;
    }
  }
  return false;
}

// Little-endian loads from possibly unaligned memory (the format is little-endian; so are the
// hosts we build for, x86-64 and aarch64).
template <typename T>
T Load(const uint8_t* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

float BFloat16ToFloat(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

// Reads a non-negative integer that fits in uint64. JSON floats (1.0) and negatives are refused.
bool GetUint64(const json& value, uint64_t* out) {
  if (value.is_number_unsigned()) {
    *out = value.get<uint64_t>();
    return true;
  }
  if (value.is_number_integer()) {
    const int64_t v = value.get<int64_t>();
    if (v < 0) return false;
    *out = static_cast<uint64_t>(v);
    return true;
  }
  return false;
}

// A scalar JSON value for an error message; arrays and objects by type only (dump() recurses,
// and a hostile header may nest deeply).
std::string Describe(const json& value) {
  if (value.is_structured()) return value.is_array() ? "(an array)" : "(an object)";
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  return text.size() > 40 ? "(a long value)" : text;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

absl::Status ParseEntry(const std::string& name, const json& entry, uint64_t data_size,
                        const uint8_t* data, TensorView* view, uint64_t* begin_out,
                        uint64_t* end_out) {
  auto error = [&name](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("safetensors: tensor '", name, "': ", what));
  };
  if (!entry.is_object()) return error("header entry is not a JSON object");
  for (auto it = entry.begin(); it != entry.end(); ++it) {
    if (it.key() != "dtype" && it.key() != "shape" && it.key() != "data_offsets") {
      return error(absl::StrCat("unknown header field '", it.key(), "'"));
    }
  }
  auto dtype_it = entry.find("dtype");
  auto shape_it = entry.find("shape");
  auto offsets_it = entry.find("data_offsets");
  if (dtype_it == entry.end() || !dtype_it->is_string()) return error("missing string 'dtype'");
  if (shape_it == entry.end() || !shape_it->is_array()) return error("missing array 'shape'");
  if (offsets_it == entry.end() || !offsets_it->is_array()) {
    return error("missing array 'data_offsets'");
  }

  const std::string dtype_name = dtype_it->get<std::string>();
  if (!DTypeFromName(dtype_name, &view->dtype)) {
    return error(absl::StrCat("unknown dtype '", dtype_name,
                              "' (known: F32, F16, BF16, F64, I64, I32, I16, I8, U8, BOOL)"));
  }

  // Element count, overflow-checked: any product past 2^62 cannot fit in a real file anyway.
  constexpr uint64_t kMaxElements = uint64_t{1} << 62;
  uint64_t elements = 1;
  view->shape.clear();
  for (const json& dim : *shape_it) {
    uint64_t d = 0;
    if (!GetUint64(dim, &d) || d > kMaxElements) {
      return error(absl::StrCat("shape entry ", Describe(dim), " is not a non-negative integer"));
    }
    view->shape.push_back(static_cast<int64_t>(d));
    if (d != 0 && elements > kMaxElements / d) {
      return error(absl::StrCat("shape ", ShapeString(view->shape), "... overflows"));
    }
    elements *= d;
  }
  const uint64_t element_size = static_cast<uint64_t>(DTypeSize(view->dtype));
  if (elements > kMaxElements / element_size) {
    return error(absl::StrCat("shape ", ShapeString(view->shape), " overflows"));
  }
  const uint64_t expected_bytes = elements * element_size;

  if (offsets_it->size() != 2) return error("'data_offsets' must be [begin, end]");
  uint64_t begin = 0;
  uint64_t end = 0;
  if (!GetUint64((*offsets_it)[0], &begin) || !GetUint64((*offsets_it)[1], &end)) {
    return error(absl::StrCat("data_offsets [", Describe((*offsets_it)[0]), ", ",
                              Describe((*offsets_it)[1]), "] are not non-negative integers"));
  }
  if (begin > end) {
    return error(absl::StrCat("data_offsets [", begin, ", ", end, "]: begin > end"));
  }
  if (end > data_size) {
    return error(absl::StrCat("data_offsets [", begin, ", ", end, "] run past the end of the ",
                              data_size, "-byte data section (truncated file?)"));
  }
  if (end - begin != expected_bytes) {
    return error(absl::StrCat("size mismatch: shape ", ShapeString(view->shape), " of ", dtype_name,
                              " needs ", expected_bytes, " bytes, data_offsets [", begin, ", ", end,
                              "] hold ", end - begin));
  }
  view->data = data + begin;
  view->num_bytes = static_cast<std::size_t>(end - begin);
  *begin_out = begin;
  *end_out = end;
  return absl::OkStatus();
}

}  // namespace

float HalfToFloat(uint16_t h) {
  const bool negative = (h & 0x8000u) != 0;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  float value;
  if (exponent == 0) {
    value = std::ldexp(static_cast<float>(mantissa), -24);  // zero or subnormal
  } else if (exponent == 31) {
    value = mantissa == 0 ? std::numeric_limits<float>::infinity()
                          : std::numeric_limits<float>::quiet_NaN();
  } else {
    const uint32_t bits = ((exponent + 112u) << 23) | (mantissa << 13);
    std::memcpy(&value, &bits, sizeof(value));
  }
  return negative ? -value : value;
}

int DTypeSize(DType dtype) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.dtype == dtype) return info.size;
  }
  return 1;
}

const char* DTypeName(DType dtype) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.dtype == dtype) return info.name;
  }
  return "?";
}

int64_t TensorView::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // validated on parse: cannot overflow
  return n;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;
SafetensorsFile::~SafetensorsFile() = default;

absl::StatusOr<SafetensorsFile> SafetensorsFile::Parse(std::string bytes) {
  SafetensorsFile file;
  file.bytes_ = std::make_unique<const std::string>(std::move(bytes));
  const std::string& all = *file.bytes_;
  const uint64_t file_size = all.size();
  if (file_size < 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors: file is ", file_size,
                     " bytes, shorter than the 8-byte header length (truncated file?)"));
  }
  const uint8_t* base = reinterpret_cast<const uint8_t*>(all.data());
  const uint64_t header_size = Load<uint64_t>(base);
  if (header_size > file_size - 8) {
    return absl::InvalidArgumentError(absl::StrCat("safetensors: header length ", header_size,
                                                   " is larger than the ", file_size - 8,
                                                   " bytes that follow it (truncated file?)"));
  }
  if (header_size > kMaxHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat("safetensors: header length ", header_size,
                                                   " exceeds the ", kMaxHeaderBytes,
                                                   "-byte limit"));
  }
  const char* header_begin = all.data() + 8;
  const json header = json::parse(header_begin, header_begin + header_size, /*cb=*/nullptr,
                                  /*allow_exceptions=*/false);
  if (header.is_discarded()) {
    return absl::InvalidArgumentError("safetensors: header is not valid JSON");
  }
  if (!header.is_object()) {
    return absl::InvalidArgumentError("safetensors: header is not a JSON object");
  }

  const uint8_t* data = base + 8 + header_size;
  const uint64_t data_size = file_size - 8 - header_size;
  struct Range {
    uint64_t begin, end;
    const std::string* name;
  };
  std::vector<Range> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") {
      if (!it->is_object()) {
        return absl::InvalidArgumentError("safetensors: __metadata__ is not a JSON object");
      }
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) {
          return absl::InvalidArgumentError(
              absl::StrCat("safetensors: __metadata__ value '", m.key(), "' is not a string"));
        }
        file.metadata_[m.key()] = m->get<std::string>();
      }
      continue;
    }
    TensorView view;
    uint64_t begin = 0;
    uint64_t end = 0;
    absl::Status status = ParseEntry(name, *it, data_size, data, &view, &begin, &end);
    if (!status.ok()) return status;
    auto inserted = file.tensors_.emplace(name, std::move(view));
    if (begin != end) ranges.push_back({begin, end, &inserted.first->first});
  }

  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (std::size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].begin < ranges[i - 1].end) {
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors: tensors '", *ranges[i - 1].name, "' [", ranges[i - 1].begin,
                       ", ", ranges[i - 1].end, ") and '", *ranges[i].name, "' [", ranges[i].begin,
                       ", ", ranges[i].end, ") overlap"));
    }
  }
  return file;
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::ReadFile(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) {
    return absl::NotFoundError(absl::StrCat("safetensors: file not found: ", path));
  }
  if (!std::filesystem::is_regular_file(status)) {
    return absl::InvalidArgumentError(absl::StrCat("safetensors: not a regular file: ", path));
  }
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) return absl::NotFoundError(absl::StrCat("safetensors: cannot stat ", path));
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("safetensors: cannot open ", path));
  std::string bytes(static_cast<std::size_t>(size), '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(size));
  if (static_cast<std::uintmax_t>(in.gcount()) != size) {
    return absl::DataLossError(absl::StrCat("safetensors: error reading ", path));
  }
  absl::StatusOr<SafetensorsFile> file = Parse(std::move(bytes));
  if (!file.ok()) {
    return absl::Status(file.status().code(), absl::StrCat(path, ": ", file.status().message()));
  }
  return file;
}

const TensorView* SafetensorsFile::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

absl::StatusOr<std::vector<float>> SafetensorsFile::GetFloat(const std::string& name) const {
  const TensorView* view = Find(name);
  if (view == nullptr) return absl::NotFoundError(absl::StrCat("missing tensor ", name));
  const std::size_t n = static_cast<std::size_t>(view->num_elements());
  std::vector<float> out(n);
  const uint8_t* p = view->data;
  switch (view->dtype) {
    case DType::kF32:
      if (n != 0) std::memcpy(out.data(), p, n * sizeof(float));
      break;
    case DType::kF16:
      for (std::size_t i = 0; i < n; ++i) out[i] = HalfToFloat(Load<uint16_t>(p + 2 * i));
      break;
    case DType::kBF16:
      for (std::size_t i = 0; i < n; ++i) out[i] = BFloat16ToFloat(Load<uint16_t>(p + 2 * i));
      break;
    case DType::kF64:
      for (std::size_t i = 0; i < n; ++i) {
        // Out-of-range doubles become +-inf (well defined here, unlike a plain cast).
        const double d = Load<double>(p + 8 * i);
        constexpr double kMax = std::numeric_limits<float>::max();
        out[i] = std::isnan(d) ? std::numeric_limits<float>::quiet_NaN()
                 : d > kMax    ? std::numeric_limits<float>::infinity()
                 : d < -kMax   ? -std::numeric_limits<float>::infinity()
                               : static_cast<float>(d);
      }
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("tensor ", name, " has dtype ",
                                                     DTypeName(view->dtype),
                                                     ", expected a float type (F32/F16/BF16/F64)"));
  }
  return out;
}

absl::StatusOr<std::vector<int64_t>> SafetensorsFile::GetInt(const std::string& name) const {
  const TensorView* view = Find(name);
  if (view == nullptr) return absl::NotFoundError(absl::StrCat("missing tensor ", name));
  const std::size_t n = static_cast<std::size_t>(view->num_elements());
  std::vector<int64_t> out(n);
  const uint8_t* p = view->data;
  switch (view->dtype) {
    case DType::kI64:
      for (std::size_t i = 0; i < n; ++i) out[i] = Load<int64_t>(p + 8 * i);
      break;
    case DType::kI32:
      for (std::size_t i = 0; i < n; ++i) out[i] = Load<int32_t>(p + 4 * i);
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", name, " has dtype ", DTypeName(view->dtype), ", expected I32 or I64"));
  }
  return out;
}

std::string SerializeSafetensors(
    const std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>>& tensors) {
  json header = json::object();
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    const uint64_t bytes = tensor.second.size() * sizeof(float);
    header[name] = {
        {"dtype", "F32"}, {"shape", tensor.first}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  // Tensor names are ours (ASCII); `replace` keeps dump() from throwing on anything else.
  std::string text = header.dump(-1, ' ', false, json::error_handler_t::replace);
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out;
  out.reserve(8 + text.size() + offset);
  const uint64_t header_size = text.size();
  char length[8];
  std::memcpy(length, &header_size, sizeof(length));
  out.append(length, sizeof(length));
  out += text;
  for (const auto& entry : tensors) {
    const std::vector<float>& values = entry.second.second;
    out.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  }
  return out;
}

}  // namespace jasper
