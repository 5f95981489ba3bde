// All safetensors files of a model directory (single file or sharded with an index).
#pragma once
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "loader/safetensors.h"

namespace tf {

// Called while loading with (bytes done, bytes total); the CLI draws a progress bar with it.
using LoadProgress = std::function<void(size_t done, size_t total)>;

class Checkpoint {
 public:
  // Opens DIR/model.safetensors, or every shard named by DIR/model.safetensors.index.json.
  // Touches every page once (reporting progress) so the first forward does not stall on I/O.
  static Checkpoint open(const std::string& model_dir, const LoadProgress& progress = {});

  bool has(const std::string& name) const;
  // Throws tf::Error naming the directory and the tensor when it is missing. Marks it used.
  const TensorView& get(const std::string& name) const;
  // get() plus a shape check; the error names the file, the tensor, and both shapes.
  const TensorView& get(const std::string& name, const std::vector<int64_t>& shape) const;
  // The file that holds a tensor (for messages).
  const std::string& file_of(const std::string& name) const;
  const std::string& dir() const { return dir_; }
  std::vector<std::string> names() const;
  // After binding: every tensor must have been used, since a tensor the config does not ask for
  // (an extra layer, an untied head) means the config and the checkpoint disagree. Throws
  // tf::Error naming the first unused tensor, its file, and `why_unused(name)`: the config field
  // (an empty reason: this tensor may go unused, as a vision tower the text model ignores).
  void check_all_used(const std::function<std::string(const std::string& name)>& why_unused) const;

 private:
  std::string dir_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, std::pair<const TensorView*, const SafetensorsFile*>> index_;
  mutable std::set<std::string> used_;  // names get() handed out
};

}  // namespace tf
