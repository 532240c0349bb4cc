#include "engine/model/weight_source.h"

#include <cassert>

#include "absl/strings/str_cat.h"

namespace expertd::engine {

void InMemoryWeightSource::Add(const std::string& name, models::DType dtype,
                               std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  assert(bytes.size() == static_cast<size_t>(numel) * models::DTypeSize(dtype));
  (void)numel;
  tensors_[name] = Tensor{dtype, std::move(shape), std::move(bytes)};
}

absl::StatusOr<models::TensorView> InMemoryWeightSource::Get(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end())
    return absl::NotFoundError(absl::StrCat("no tensor named '", name, "'"));
  models::TensorView v;
  v.name = name;
  v.dtype = it->second.dtype;
  v.shape = it->second.shape;
  v.data = it->second.bytes.data();
  v.nbytes = it->second.bytes.size();
  v.file = "<memory>";
  return v;
}

uint64_t InMemoryWeightSource::total_bytes() const {
  uint64_t n = 0;
  for (const auto& [name, t] : tensors_) n += t.bytes.size();
  return n;
}

}  // namespace expertd::engine
