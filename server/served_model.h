// ServedModel: one model folder the server serves: its weights, the LM its beam searches use,
// its backend replicas and the scheduler that batches its windows. ServingEngine holds one per
// --model_dir / --extra_model_dirs entry; a request picks one by name (RecognitionConfig.model).
//
// Ownership: owns the scheduler (and through it the backends) and the observer that reports
// its batches to the shared metrics (declared before the scheduler: destroyed after it); shares
// the model and the LM with the sessions.
// Thread-safety: immutable after LoadServedModel, except through the scheduler (thread-safe)
// and the one-time SetObserver before serving.
#ifndef JASPER_SERVER_SERVED_MODEL_H_
#define JASPER_SERVER_SERVED_MODEL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/decoding/ngram_lm.h"
#include "engine/model/model.h"
#include "engine/runtime/backend.h"
#include "engine/streaming/scheduler.h"
#include "server/server_options.h"

namespace jasper::server {

struct ServedModel {
  std::string name;  // what requests name it by
  std::string dir;   // the folder it came from
  std::shared_ptr<const Model> model;
  std::shared_ptr<const NgramLm> lm;            // beam searches' LM; may be null
  std::string device_name;                      // "cpu" or "cuda:N" (the first replica's)
  std::string precision;                        // GEMM operands: "fp32", "bf16", "fp16" or "int8"
  int num_workers = 0;                          // backend replicas
  std::vector<const Backend*> backends;         // [num_workers], owned by the scheduler
  std::unique_ptr<SchedulerObserver> observer;  // may be null; see ownership above
  std::unique_ptr<Scheduler> scheduler;

  int sample_rate_hz() const { return model->config().featurizer.sample_rate; }
  // Audio seconds per feature frame (the featurizer's hop).
  double feature_frame_s() const { return model->config().featurizer.window_stride_s; }
  // Sets the observer (owned from now on) before serving.
  void SetObserver(std::unique_ptr<SchedulerObserver> o);
  // Stops the scheduler (runs what is queued) and detaches the observer. Idempotent.
  void Shutdown();
  ~ServedModel() { Shutdown(); }
};

// Loads the folder `dir`: the model, its LM (`lm_file` when not empty, ARPA text for *.arpa or
// the binary form; "none": no LM; empty: the folder's model.json language_model, if any),
// backend replicas on
// options.device (options.num_workers; 0: one per core on the CPU, one on CUDA), and a
// scheduler with options.scheduler. `name` empty: model.json's name, else the folder's base
// name. Errors: the model's, the LM's and the device's, naming the folder or file.
absl::StatusOr<std::unique_ptr<ServedModel>> LoadServedModel(const std::string& dir,
                                                             const std::string& name,
                                                             const std::string& lm_file,
                                                             const ServerOptions& options);

}  // namespace jasper::server

#endif  // JASPER_SERVER_SERVED_MODEL_H_
