// FuzzInput: reads typed values off the front of a libFuzzer input (a tiny
// FuzzedDataProvider, which Debian's clang ships only as a libFuzzer-internal header). Reads
// past the end give zeros, so every input decodes to some valid sequence of operations.
//
// Ownership: borrows the input bytes. Thread-safety: none (one per fuzz call).
#ifndef JASPER_FUZZ_FUZZ_INPUT_H_
#define JASPER_FUZZ_FUZZ_INPUT_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace jasper::fuzz {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  size_t remaining() const { return size_ - pos_; }
  bool empty() const { return pos_ >= size_; }

  uint8_t U8() {
    if (pos_ >= size_) return 0;
    return data_[pos_++];
  }
  uint16_t U16() { return static_cast<uint16_t>(U8() | (U8() << 8)); }
  uint32_t U32() { return static_cast<uint32_t>(U16()) | (static_cast<uint32_t>(U16()) << 16); }

  // A value in [lo, hi] (inclusive).
  int Range(int lo, int hi) {
    const uint32_t span = static_cast<uint32_t>(hi - lo) + 1;
    return lo + static_cast<int>(U32() % span);
  }

  // Picks one of `n` items.
  template <typename T, size_t N>
  const T& Pick(const T (&items)[N]) {
    return items[U8() % N];
  }

  // Up to `n` bytes (fewer at the end of the input).
  std::vector<uint8_t> Bytes(size_t n) {
    n = std::min(n, remaining());
    std::vector<uint8_t> out(data_ + pos_, data_ + pos_ + n);
    pos_ += n;
    return out;
  }
  std::vector<uint8_t> Rest() { return Bytes(remaining()); }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace jasper::fuzz

#endif  // JASPER_FUZZ_FUZZ_INPUT_H_
