#include "server/served_model.h"

#include <algorithm>
#include <filesystem>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/runtime/backend_factory.h"

namespace jasper::server {

void ServedModel::SetObserver(std::unique_ptr<SchedulerObserver> o) {
  observer = std::move(o);
  if (scheduler != nullptr) scheduler->SetObserver(observer.get());
}

void ServedModel::Shutdown() {
  if (scheduler == nullptr) return;
  scheduler->Shutdown();
  scheduler->SetObserver(nullptr);
}

absl::StatusOr<std::unique_ptr<ServedModel>> LoadServedModel(const std::string& dir,
                                                             const std::string& name,
                                                             const std::string& lm_file,
                                                             const ServerOptions& options) {
  absl::StatusOr<Device> device = ParseDevice(options.device);
  if (!device.ok()) return device.status();
  auto served = std::make_unique<ServedModel>();
  served->dir = dir;
  absl::StatusOr<std::shared_ptr<const Model>> model = Model::Load(dir);
  if (!model.ok()) {
    return absl::Status(model.status().code(),
                        absl::StrCat("loading model from '", dir, "': ", model.status().message()));
  }
  served->model = *std::move(model);
  served->name = name;
  if (served->name.empty()) served->name = served->model->config().name;
  if (served->name.empty()) {
    const std::filesystem::path path = std::filesystem::path(dir).lexically_normal();
    served->name = path.filename().string();
    if (served->name.empty()) served->name = path.parent_path().filename().string();
  }
  if (lm_file == "none") {
    served->lm = nullptr;
  } else if (!lm_file.empty()) {
    absl::StatusOr<std::shared_ptr<const NgramLm>> lm = NgramLm::LoadFile(lm_file);
    if (!lm.ok()) return lm.status();
    served->lm = *std::move(lm);
  } else {
    served->lm = served->model->language_model();  // the model folder's, if it has one
  }

  BackendOptions backend_options;
  backend_options.device = *device;
  // Beam search (the server's default or a request's) reads every label's log-probability.
  backend_options.keep_log_probs = true;
  backend_options.cpu_threads = options.cpu_threads;
  absl::StatusOr<kernels::Precision> precision = ParseGpuPrecision(options.gpu_precision);
  if (!precision.ok()) return precision.status();
  backend_options.gpu_precision = *precision;
  absl::StatusOr<kernels::Precision> cpu_precision = ParseCpuPrecision(options.cpu_precision);
  if (!cpu_precision.ok()) return cpu_precision.status();
  backend_options.cpu_precision = *cpu_precision;
  served->precision = kernels::PrecisionName(*cpu_precision);
  backend_options.cuda_graphs = options.cuda_graphs;
  backend_options.max_batch = options.scheduler.max_batch_size;
  std::vector<std::unique_ptr<Backend>> replicas;
  // The first replica tells which device "auto" chose; num_workers = 0 then means one replica
  // per core on the CPU backend, one on CUDA.
  int num_workers = std::max(1, options.num_workers);
  for (int i = 0; i < num_workers; ++i) {
    absl::StatusOr<std::unique_ptr<Backend>> backend =
        CreateBackend(served->model, backend_options);
    if (!backend.ok()) return backend.status();
    if (i == 0) {
      served->device_name = (*backend)->name();
      if (!absl::StartsWith(served->device_name, "cpu")) {
        served->precision = kernels::PrecisionName(*precision);
      }
      num_workers = options.ResolvedNumWorkers(absl::StartsWith(served->device_name, "cpu"),
                                               std::thread::hardware_concurrency());
    }
    served->backends.push_back(backend->get());
    replicas.push_back(*std::move(backend));
  }
  served->num_workers = num_workers;
  absl::StatusOr<std::unique_ptr<Scheduler>> scheduler =
      Scheduler::Create(std::move(replicas), options.scheduler);
  if (!scheduler.ok()) return scheduler.status();
  served->scheduler = *std::move(scheduler);
  return served;
}

}  // namespace jasper::server
