// Fuzz target: model.json parsing and validation (engine/model/model_config.h). The input is the
// JSON text. A config that parses must validate, serialize, and parse back to the same JSON.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "engine/model/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<jasper::ModelConfig> config = jasper::ParseModelConfig(text);
  if (!config.ok()) return 0;
  if (!config->Validate().ok()) abort();
  (void)config->subsampling_factor();
  (void)jasper::ResidualSources(*config);
  const std::string json = jasper::ModelConfigToJson(*config);
  absl::StatusOr<jasper::ModelConfig> again = jasper::ParseModelConfig(json);
  if (!again.ok()) abort();
  if (jasper::ModelConfigToJson(*again) != json) abort();
  return 0;
}
