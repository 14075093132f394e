// The safetensors reader (engine/io/safetensors.h): dtype conversion (F16, BF16, F64 to float;
// I32), one test per malformed file, each checking the error message, the header size limit, and
// random corruption of a real model file through Model::FromParts. Run under ASan+UBSan: no
// malformed input may crash.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/io/safetensors.h"
#include "engine/model/model.h"
#include "engine/model/model_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/model_test_util.h"

namespace jasper {
namespace {

using test_util::Floats;
using test_util::MakeTensors;
using test_util::RawFile;
using test_util::SeparableConfig;
using ::testing::HasSubstr;

TEST(SafetensorsTest, ConvertsFloatTypesAndInts) {
  const uint16_t f16[] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x7c00, 0x8000};
  const uint16_t bf16[] = {0x3f80, 0xc040};
  const double f64[] = {0.1, -1e300};
  const int32_t i32[] = {-3, 7};
  std::string data(reinterpret_cast<const char*>(f16), sizeof(f16));
  data.append(reinterpret_cast<const char*>(bf16), sizeof(bf16));
  data.append(reinterpret_cast<const char*>(f64), sizeof(f64));
  data.append(reinterpret_cast<const char*>(i32), sizeof(i32));
  const std::string header = R"({"h":{"dtype":"F16","shape":[6],"data_offsets":[0,12]},)"
                             R"("b":{"dtype":"BF16","shape":[2],"data_offsets":[12,16]},)"
                             R"("d":{"dtype":"F64","shape":[2,1],"data_offsets":[16,32]},)"
                             R"("i":{"dtype":"I32","shape":[2],"data_offsets":[32,40]},)"
                             R"("__metadata__":{"format":"pt"}})";
  auto parsed = SafetensorsFile::Parse(RawFile(header, data));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  SafetensorsFile file = std::move(*parsed);  // views must survive the move
  EXPECT_EQ(file.metadata().at("format"), "pt");
  auto h = file.GetFloat("h");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ((*h)[0], 1.0f);
  EXPECT_EQ((*h)[1], -2.0f);
  EXPECT_EQ((*h)[2], 65504.0f);
  EXPECT_EQ((*h)[3], std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf((*h)[4]));
  EXPECT_TRUE(std::signbit((*h)[5]));
  EXPECT_EQ(*file.GetFloat("b"), (std::vector<float>{1.0f, -3.0f}));
  auto d = file.GetFloat("d");
  EXPECT_EQ((*d)[0], 0.1f);
  EXPECT_TRUE(std::isinf((*d)[1]));
  EXPECT_EQ(*file.GetInt("i"), (std::vector<int64_t>{-3, 7}));
  EXPECT_THAT(file.GetFloat("i").status().message(), HasSubstr("float"));
  EXPECT_THAT(file.GetFloat("nope").status().message(), HasSubstr("missing tensor nope"));
  EXPECT_EQ(file.Find("d")->shape, (std::vector<int64_t>{2, 1}));
}

struct BadFile {
  const char* name;
  std::string bytes;
  std::vector<std::string> words;
};

TEST(SafetensorsTest, MalformedFilesAreErrors) {
  const std::string f8 = Floats({1, 2});  // 8 bytes of data
  const std::vector<BadFile> cases = {
      {"empty", "", {"shorter than", "truncated"}},
      {"header_len_past_end", std::string("\x64\0\0\0\0\0\0\0{}", 10), {"larger than"}},
      {"header_len_huge", std::string("\xff\xff\xff\xff\xff\xff\xff\x7f{}", 10), {"larger than"}},
      {"not_json", RawFile("{\"a\": [1, 2", ""), {"not valid JSON"}},
      {"not_object", RawFile("[1, 2]", ""), {"not a JSON object"}},
      {"invalid_utf8", RawFile("{\"\xff\": 1}", ""), {"not valid JSON"}},
      {"entry_not_object", RawFile(R"({"a": 3})", ""), {"'a'", "not a JSON object"}},
      {"unknown_dtype",
       RawFile(R"({"a":{"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]}})", f8),
       {"unknown dtype", "F8_E4M3"}},
      {"offsets_past_end",
       RawFile(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", f8),
       {"'a'", "past the end"}},
      {"begin_after_end",
       RawFile(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", f8),
       {"begin > end"}},
      {"size_mismatch",
       RawFile(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", f8),
       {"size mismatch", "[3]", "needs 12 bytes"}},
      {"overlap",
       RawFile(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
               R"("b":{"dtype":"F16","shape":[4],"data_offsets":[2,10]}})",
               f8 + f8),
       {"overlap", "'a'", "'b'"}},
      {"negative_dim",
       RawFile(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", f8),
       {"shape entry -2"}},
      {"float_dim",
       RawFile(R"({"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", f8),
       {"shape entry"}},
      {"overflowing_shape",
       RawFile(R"({"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", f8),
       {"overflows"}},
      {"offset_negative",
       RawFile(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", f8),
       {"data_offsets"}},
      {"offsets_wrong_arity",
       RawFile(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", f8),
       {"[begin, end]"}},
      {"missing_dtype", RawFile(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", f8), {"dtype"}},
      {"extra_field",
       RawFile(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", f8),
       {"unknown header field 'x'"}},
      {"metadata_not_string", RawFile(R"({"__metadata__":{"k":1}})", ""), {"__metadata__", "'k'"}},
  };
  for (const BadFile& c : cases) {
    auto file = SafetensorsFile::Parse(c.bytes);
    ASSERT_FALSE(file.ok()) << c.name;
    for (const std::string& w : c.words) {
      EXPECT_THAT(file.status().message(), HasSubstr(w)) << c.name;
    }
  }
}

TEST(SafetensorsTest, HeaderOverLimitIsRefused) {
  const std::size_t n = 100u * 1024 * 1024 + 1;
  std::string bytes(8 + n, ' ');
  const uint64_t len = n;
  std::memcpy(bytes.data(), &len, 8);
  auto file = SafetensorsFile::Parse(std::move(bytes));
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(file.status().message(), HasSubstr("exceeds"));
}

TEST(SafetensorsTest, DeeplyNestedHeaderDoesNotCrash) {
  const std::string header = std::string(200000, '[') + std::string(200000, ']');
  EXPECT_FALSE(SafetensorsFile::Parse(RawFile(header, "")).ok());
}

TEST(SafetensorsTest, RandomCorruptionNeverCrashes) {
  const ModelConfig config = SeparableConfig();
  const std::string good = SerializeSafetensors(MakeTensors(config, 11));
  std::mt19937 rng(12);
  for (int i = 0; i < 400; ++i) {
    std::string bytes = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      // Mostly in the length and header, where the structure lives.
      const std::size_t at = rng() % std::min<std::size_t>(bytes.size(), 2048);
      bytes[at] = static_cast<char>(rng());
    }
    auto model = Model::FromParts(config, bytes);  // must return, ok or not
    if (!model.ok()) {
      EXPECT_FALSE(model.status().message().empty());
    }
  }
}

}  // namespace
}  // namespace jasper
