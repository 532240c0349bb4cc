// Builds or reuses the expert pack of a model (expert_pack_format.h) from its
// WeightSource: derives the pack layout from the config and the tensors,
// fingerprints the source (so a changed checkpoint makes the pack stale), and
// finds a valid pack or writes one.
//
// Where: `pack_dir` if given; else DIR/.expertd/ beside the checkpoint (when
// the weights come from a checkpoint directory) and, when that is not
// writable, cache_dir/<fingerprint>/. A missing, truncated, corrupt or stale
// pack is rebuilt; when no location can be written the error lists each
// location tried and why.
#ifndef EXPERTD_ENGINE_EXPERTS_PACK_PACK_BUILDER_H_
#define EXPERTD_ENGINE_EXPERTS_PACK_PACK_BUILDER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/experts/pack/expert_pack_reader.h"
#include "engine/experts/pack/expert_pack_writer.h"
#include "engine/model/weight_source.h"

namespace expertd::engine {

// The routed experts' layout: MoE layers from the config, shapes and dtypes
// from layer-first-expert-0's tensors (the writer checks every other expert),
// stored as `storage` says. InvalidArgument when the model has no routed
// experts, a tensor is missing, or the storage does not fit the shapes.
absl::StatusOr<PackLayout> ExpertPackLayoutFor(const WeightSource& weights,
                                               const ExpertStorage& storage = {});

// A stable 64-bit fingerprint of the experts' source: names, dtypes, shapes,
// and for file-backed tensors the file path, offset, size and mtime (cheap);
// for in-memory tensors their bytes' CRC32C.
uint64_t ExpertSourceFingerprint(const WeightSource& weights, const PackLayout& layout);

// Reads each expert's three tensors from `weights` (must outlive the source).
PackSource MakePackSource(const WeightSource& weights);

struct PackLocationOptions {
  std::string pack_dir;   // explicit directory (only this one is used)
  std::string model_dir;  // checkpoint directory, "" when unknown
  std::string cache_dir;  // "" = DefaultExpertCacheDir()
};

// Candidate pack paths, in the order they are tried. The file is
// experts.pack for the checkpoint's own dtypes, experts-<storage name>.pack
// otherwise (so packs of several formats coexist and switching formats does
// not rebuild back and forth).
std::vector<std::string> ExpertPackCandidates(const PackLocationOptions& options,
                                              uint64_t fingerprint,
                                              const ExpertStorage& storage = {});

// $XDG_CACHE_HOME/expertd, else $HOME/.cache/expertd, else /tmp/expertd-cache.
std::string DefaultExpertCacheDir();

struct OpenedPack {
  std::unique_ptr<ExpertPackReader> reader;
  bool built = false;  // written by this call (else reused)
};

// A pack of another storage format (or version, or source) at a candidate
// path is rebuilt.
absl::StatusOr<OpenedPack> OpenOrBuildExpertPack(const WeightSource& weights,
                                                 const PackLocationOptions& where,
                                                 const ExpertPackReader::Options& read_options,
                                                 const ExpertStorage& storage = {});

}  // namespace expertd::engine

#endif  // EXPERTD_ENGINE_EXPERTS_PACK_PACK_BUILDER_H_
