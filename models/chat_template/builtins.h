// The filters, tests, global functions and methods chat templates call, with
// jinja2's (and Python's) semantics. The parser asks the Is* functions at load
// time, so a template naming anything else fails to load.
#ifndef EXPERTD_MODELS_CHAT_TEMPLATE_BUILTINS_H_
#define EXPERTD_MODELS_CHAT_TEMPLATE_BUILTINS_H_

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "models/chat_template/value.h"

namespace expertd::chat_template {

bool IsKnownFilter(absl::string_view name);
bool IsKnownTest(absl::string_view name);
bool IsKnownGlobal(absl::string_view name);
bool IsKnownMethod(absl::string_view name);

// Evaluated call arguments.
struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // The argument at `index`, else the keyword `name`, else nullptr.
  const Value* Get(size_t index, absl::string_view name) const;
};

absl::StatusOr<Value> ApplyFilter(absl::string_view name, const Value& input, const Args& args);
absl::StatusOr<bool> ApplyTest(absl::string_view name, const Value& input, const Args& args);
// `object.name(args)`: str and dict methods, and loop.cycle.
absl::StatusOr<Value> CallMethod(const Value& object, absl::string_view name, const Args& args);
// range, namespace, dict, strftime_now; raise_exception returns its message as
// an InvalidArgument error, verbatim, marked so IsRaisedByTemplate knows it.
absl::StatusOr<Value> CallGlobal(absl::string_view name, const Args& args);
bool IsRaisedByTemplate(const absl::Status& status);

// jinja2's attribute/item lookup: a dict's key, a list's index; Undefined when
// absent; an error on an undefined object (jinja2's UndefinedError).
absl::StatusOr<Value> GetItem(const Value& object, const Value& key);
// Python's len(); an error for values without one.
absl::StatusOr<int64_t> Length(const Value& v);
// Iterates as Python does: a list's items, a dict's keys, a string's characters,
// nothing for undefined; an error otherwise.
absl::StatusOr<List> Iterate(const Value& v);

}  // namespace expertd::chat_template

#endif  // EXPERTD_MODELS_CHAT_TEMPLATE_BUILTINS_H_
