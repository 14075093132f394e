// Fuzz target: the safetensors reader (engine/io/safetensors.h: 8-byte header length, JSON
// header, offsets and dtypes checked against the file) and, for files that parse, the model
// builder (engine/model/model.h: every tensor of the fixture model's config validated and folded).
// The input is the file.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "engine/io/safetensors.h"
#include "engine/model/model.h"
#include "engine/model/model_config.h"

namespace {

// A small config (two blocks, 8 channels) so that valid-looking weight files stay small.
const jasper::ModelConfig& TinyConfig() {
  static const jasper::ModelConfig* config = [] {
    auto* c = new jasper::ModelConfig();
    c->name = "fuzz";
    c->featurizer.features = 8;
    c->feat_in = 8;
    jasper::BlockConfig b1;
    b1.filters = 8;
    b1.kernel = 3;
    b1.stride = 2;
    b1.separable = true;
    jasper::BlockConfig b2;
    b2.filters = 8;
    b2.kernel = 1;
    b2.residual = true;
    c->blocks = {b1, b2};
    c->decoder_feat_in = 8;
    c->labels = {" ", "a", "b"};
    if (!c->Validate().ok()) abort();
    return c;
  }();
  return *config;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<jasper::SafetensorsFile> file = jasper::SafetensorsFile::Parse(bytes);
  if (file.ok()) {
    for (const auto& [name, view] : file->tensors()) {
      if (view.num_bytes !=
          static_cast<size_t>(view.num_elements()) * jasper::DTypeSize(view.dtype)) {
        abort();
      }
      (void)file->GetFloat(name);
      (void)file->GetInt(name);
    }
    (void)file->Find("missing");
  }
  absl::StatusOr<std::shared_ptr<const jasper::Model>> model =
      jasper::Model::FromParts(TinyConfig(), bytes);
  static const bool verbose = std::getenv("JASPER_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "model: %s\n", model.status().ToString().c_str());
  return 0;
}
