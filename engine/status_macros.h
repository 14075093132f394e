// The project's status macros (engine/ and server/; kernels/ knows no Status).
//
//   JASPER_RETURN_IF_ERROR(expr);            returns expr's absl::Status when not OK
//   JASPER_ASSIGN_OR_RETURN(auto x, expr);   x = expr's value, or returns its status
//
// `expr` is evaluated once. Thread-safety: not applicable (macros).
#ifndef JASPER_ENGINE_STATUS_MACROS_H_
#define JASPER_ENGINE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define JASPER_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::absl::Status jasper_status_ = (expr);          \
    if (!jasper_status_.ok()) return jasper_status_; \
  } while (0)

#define JASPER_STATUS_CONCAT_INNER_(a, b) a##b
#define JASPER_STATUS_CONCAT_(a, b) JASPER_STATUS_CONCAT_INNER_(a, b)

// The declaration is the whole left-hand side, e.g. `auto x` or `std::vector<int> v`.
#define JASPER_ASSIGN_OR_RETURN(lhs, expr) \
  JASPER_ASSIGN_OR_RETURN_IMPL_(JASPER_STATUS_CONCAT_(jasper_statusor_, __LINE__), lhs, expr)

#define JASPER_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) return statusor.status();            \
  lhs = std::move(statusor).value()

#endif  // JASPER_ENGINE_STATUS_MACROS_H_
