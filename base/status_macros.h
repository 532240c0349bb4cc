// Two small error-propagation macros. Abseil 20220623 (Debian 12) has neither.
//
//   RETURN_IF_ERROR(DoThing());                  // returns the status if not ok
//   ASSIGN_OR_RETURN(auto file, OpenFile(path)); // unwraps a StatusOr or returns
#ifndef EXPERTD_BASE_STATUS_MACROS_H_
#define EXPERTD_BASE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define EXPERTD_CONCAT_INNER_(a, b) a##b
#define EXPERTD_CONCAT_(a, b) EXPERTD_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                          \
  do {                                                 \
    ::absl::Status expertd_status_ = (expr);           \
    if (!expertd_status_.ok()) return expertd_status_; \
  } while (0)

#define ASSIGN_OR_RETURN(lhs, expr) \
  EXPERTD_ASSIGN_OR_RETURN_IMPL_(EXPERTD_CONCAT_(expertd_statusor_, __LINE__), lhs, expr)

#define EXPERTD_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) return std::move(tmp).status();       \
  lhs = std::move(tmp).value()

#endif  // EXPERTD_BASE_STATUS_MACROS_H_
