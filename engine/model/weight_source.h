// WeightSource: where the model's tensors come from, by Hugging Face name.
//
// CheckpointWeightSource reads a models::Checkpoint (memory-mapped
// safetensors); InMemoryWeightSource holds tensors built in memory (tests and
// benchmarks with synthetic weights). The tensors are HOST memory, valid for
// the source's lifetime; the model uploads them to the backend (or, on a
// backend whose host memory is device memory, uses them in place).
//
// Thread safety: const methods are safe to call concurrently.
#ifndef EXPERTD_ENGINE_MODEL_WEIGHT_SOURCE_H_
#define EXPERTD_ENGINE_MODEL_WEIGHT_SOURCE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/checkpoint/checkpoint.h"
#include "models/config/model_config.h"

namespace expertd::engine {

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual const models::ModelConfig& config() const = 0;
  virtual bool Has(const std::string& name) const = 0;
  // NotFound naming the tensor if absent.
  virtual absl::StatusOr<models::TensorView> Get(const std::string& name) const = 0;
};

// Shares ownership of the checkpoint (its mappings back every TensorView).
class CheckpointWeightSource : public WeightSource {
 public:
  explicit CheckpointWeightSource(std::shared_ptr<const models::Checkpoint> checkpoint)
      : checkpoint_(std::move(checkpoint)) {}
  const models::ModelConfig& config() const override { return checkpoint_->config(); }
  bool Has(const std::string& name) const override { return checkpoint_->Has(name); }
  absl::StatusOr<models::TensorView> Get(const std::string& name) const override {
    return checkpoint_->Get(name);
  }
  const models::Checkpoint& checkpoint() const { return *checkpoint_; }

 private:
  std::shared_ptr<const models::Checkpoint> checkpoint_;
};

// Tensors owned in memory. Not thread-safe while being filled (Add).
class InMemoryWeightSource : public WeightSource {
 public:
  explicit InMemoryWeightSource(models::ModelConfig config) : config_(std::move(config)) {}
  // Adds (or replaces) a tensor; `bytes` must hold numel(shape) * DTypeSize.
  void Add(const std::string& name, models::DType dtype, std::vector<int64_t> shape,
           std::vector<uint8_t> bytes);
  const models::ModelConfig& config() const override { return config_; }
  bool Has(const std::string& name) const override { return tensors_.count(name) > 0; }
  absl::StatusOr<models::TensorView> Get(const std::string& name) const override;
  uint64_t total_bytes() const;

 private:
  struct Tensor {
    models::DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  models::ModelConfig config_;
  std::map<std::string, Tensor> tensors_;
};

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_MODEL_WEIGHT_SOURCE_H_
