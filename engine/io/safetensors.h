// A validating reader for the safetensors format: 8-byte little-endian header length N, N bytes
// of JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then
// the data. Every offset, size and dtype is checked against the file before any tensor is used;
// a file that lies about its sizes is an error, never an out-of-bounds read.
//
// Ownership: SafetensorsFile owns the file bytes; Tensor views point into them.
// Thread-safety: immutable after Parse(); const methods are safe to call concurrently.
#ifndef JASPER_ENGINE_IO_SAFETENSORS_H_
#define JASPER_ENGINE_IO_SAFETENSORS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace jasper {

enum class DType { kF32, kF16, kBF16, kF64, kI64, kI32, kI16, kI8, kU8, kBool };

// Bytes per element; the safetensors name ("F32", ...).
int DTypeSize(DType dtype);
// An IEEE half (F16) as float, exactly (subnormals, infinities and NaN included).
float HalfToFloat(uint16_t h);
const char* DTypeName(DType dtype);

struct TensorView {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // points into the owning SafetensorsFile
  std::size_t num_bytes = 0;
  int64_t num_elements() const;
};

class SafetensorsFile {
 public:
  // Takes ownership of the bytes. Errors name the tensor and the inconsistency.
  static absl::StatusOr<SafetensorsFile> Parse(std::string bytes);
  static absl::StatusOr<SafetensorsFile> ReadFile(const std::string& path);

  // nullptr when absent.
  const TensorView* Find(const std::string& name) const;
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // The tensor converted to FP32 (from F32, F16, BF16 or F64); errors for other dtypes or a
  // missing name.
  absl::StatusOr<std::vector<float>> GetFloat(const std::string& name) const;
  // I32/I64 tensors as int64.
  absl::StatusOr<std::vector<int64_t>> GetInt(const std::string& name) const;

  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

 private:
  SafetensorsFile() = default;
  // Heap-held so that TensorView pointers stay valid when the SafetensorsFile is moved.
  std::unique_ptr<const std::string> bytes_;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Writes a safetensors file from FP32 tensors (tests and tools). Writes exactly what it is given
// (the header is padded with spaces to a multiple of 8 bytes); it does not check that a shape
// matches its data, so tests can also build inconsistent files with it.
std::string SerializeSafetensors(
    const std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>>& tensors);

}  // namespace jasper

#endif  // JASPER_ENGINE_IO_SAFETENSORS_H_
