// ShippedModelServerTest: a test suite's one jasper-server on the shipped model (loopback, a
// picked port, no warm-up) with a stub for each recognition API, started once per suite.
//
// Ownership: the suite owns the server and stubs (created in SetUpTestSuite, deleted in
// TearDownTestSuite). Thread-safety: the stubs may be used from any thread.
#ifndef JASPER_TESTS_SHIPPED_MODEL_SERVER_H_
#define JASPER_TESTS_SHIPPED_MODEL_SERVER_H_

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "jasper/asr/v1/asr.grpc.pb.h"
#include "riva/proto/riva_asr.grpc.pb.h"
#include "server/jasper_server.h"

namespace jasper::test_util {

class ShippedModelServerTest : public ::testing::Test {
 protected:
  static std::filesystem::path ShippedModelDir() {
    return std::filesystem::path(JASPER_SOURCE_DIR) / "models/quartznet_en_tts_small";
  }
  // The suite's server options: the shipped model on loopback, no warm-up.
  static server::ServerOptions ShippedOptions() {
    server::ServerOptions o;
    o.listen_address = "127.0.0.1:0";
    o.model_dir = ShippedModelDir().string();
    o.warmup = false;
    return o;
  }
  static void SetUpTestSuite() { StartServer(ShippedOptions()); }
  // A suite that needs other options calls this from its own SetUpTestSuite.
  static void StartServer(const server::ServerOptions& o) {
    auto server = server::JasperServer::Start(o);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
    auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                       grpc::InsecureChannelCredentials());
    asr_ = jasper::asr::v1::Asr::NewStub(channel).release();
    riva_ = nvidia::riva::asr::RivaSpeechRecognition::NewStub(channel).release();
  }
  static void TearDownTestSuite() {
    delete asr_;
    delete riva_;
    delete server_;
  }

  static inline server::JasperServer* server_ = nullptr;
  static inline jasper::asr::v1::Asr::Stub* asr_ = nullptr;
  static inline nvidia::riva::asr::RivaSpeechRecognition::Stub* riva_ = nullptr;
};

}  // namespace jasper::test_util

#endif  // JASPER_TESTS_SHIPPED_MODEL_SERVER_H_
