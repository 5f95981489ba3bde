// Opens the safetensors files of a model directory and indexes their tensors by name.
#include "loader/checkpoint.h"

#include <sys/mman.h>

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "loader/file_helpers.h"
#include "loader/weight_scan.h"

namespace tf {

namespace {

// Reads every float tensor whole, refusing NaN and Inf, and one byte of every other page, so a
// corrupt weight is named at load and the first forward does not stall on page faults.
void scan_and_touch(const std::vector<std::shared_ptr<SafetensorsFile>>& files, const LoadProgress& progress) {
  constexpr size_t kPage = 4096;
  constexpr size_t kReportEvery = size_t(64) << 20;
  size_t total = 0;
  for (const auto& file : files) total += file->n_bytes();
  size_t done = 0, last_report = 0;
  if (progress) progress(0, total);
  volatile uint8_t sink = 0;
  for (const auto& file : files) {
    const uint8_t* bytes = file->bytes();
    madvise(const_cast<uint8_t*>(bytes), file->n_bytes(), MADV_WILLNEED);  // a hint; failure is harmless
    std::vector<const TensorView*> by_offset;
    for (const auto& [name, tensor] : file->tensors()) by_offset.push_back(&tensor);
    std::sort(by_offset.begin(), by_offset.end(),
              [](const TensorView* a, const TensorView* b) { return a->data < b->data; });
    for (const TensorView* tensor : by_offset) {
      check_finite(*tensor, file->path());  // the scan reads (so faults in) every page it covers
      if (!find_non_finite_applies(tensor->dtype))
        for (size_t offset = 0; offset < tensor->n_bytes; offset += kPage) sink = sink + tensor->data[offset];
      if (progress && done + size_t(tensor->data + tensor->n_bytes - bytes) - last_report >= kReportEvery) {
        last_report = done + size_t(tensor->data + tensor->n_bytes - bytes);
        progress(last_report, total);
      }
    }
    done += file->n_bytes();
    if (progress) progress(done, total);
  }
}

}  // namespace

Checkpoint Checkpoint::open(const std::string& model_dir, const LoadProgress& progress) {
  Checkpoint checkpoint;
  checkpoint.dir_ = model_dir;
  const std::string single_path = model_dir + "/model.safetensors";
  const std::string index_path = model_dir + "/model.safetensors.index.json";

  if (file_exists(index_path)) {
    const auto index = read_json_file(index_path);
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
      fail(index_path + " has no \"weight_map\" object");
    std::map<std::string, std::shared_ptr<SafetensorsFile>> shards;  // each file opened once
    for (const auto& [name, shard_name] : index["weight_map"].items()) {
      if (!shard_name.is_string())
        fail("weight_map entry \"" + name + "\" in " + index_path + " is not a file name");
      const std::string shard_file = shard_name.get<std::string>();
      auto it = shards.find(shard_file);
      if (it == shards.end()) {
        // The name comes from the index; keep it inside the model directory.
        if (shard_file.find('/') != std::string::npos)
          fail("shard \"" + shard_file + "\" named by " + index_path + " is not a plain file name");
        const std::string shard_path = model_dir + "/" + shard_file;
        if (!file_exists(shard_path))
          fail("shard " + shard_path + " named by " + index_path + " (tensor \"" + name + "\") is missing");
        std::shared_ptr<SafetensorsFile> shard = SafetensorsFile::open(shard_path);
        checkpoint.files_.push_back(shard);
        it = shards.emplace(shard_file, shard).first;
      }
      const SafetensorsFile& shard = *it->second;
      auto tensor = shard.tensors().find(name);
      if (tensor == shard.tensors().end())
        fail("tensor \"" + name + "\" named by " + index_path + " is not in its shard " + shard.path());
      checkpoint.index_[name] = {&tensor->second, &shard};
    }
    // A single file beside an index that does not name it: a stale copy of one or the other, and
    // transformers would load the single file where this reads the shards.
    if (file_exists(single_path) && !shards.count("model.safetensors"))
      fail("model directory " + model_dir + " holds both model.safetensors and model.safetensors.index.json "
           "(whose shards are other files): one of them is stale; remove it");
    // A tensor the index does not list would be neither bound nor reported as unused.
    for (const auto& shard : checkpoint.files_)
      for (const auto& [name, tensor] : shard->tensors()) {
        auto listed = checkpoint.index_.find(name);
        if (listed == checkpoint.index_.end() || listed->second.second != shard.get())
          fail("tensor \"" + name + "\" in shard " + shard->path() + " is not listed for that shard in " + index_path);
      }
  } else if (file_exists(single_path)) {
    checkpoint.files_.push_back(SafetensorsFile::open(single_path));
    const SafetensorsFile& file = *checkpoint.files_.back();
    for (const auto& [name, tensor] : file.tensors()) checkpoint.index_[name] = {&tensor, &file};
  } else {
    std::error_code error;
    if (!std::filesystem::is_directory(model_dir, error))
      fail("model directory " + model_dir + " does not exist");
    fail("no model.safetensors or model.safetensors.index.json in model directory " + model_dir);
  }
  scan_and_touch(checkpoint.files_, progress);
  return checkpoint;
}

bool Checkpoint::has(const std::string& name) const { return index_.count(name) != 0; }

const TensorView& Checkpoint::get(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) {
    const std::string where = files_.size() == 1 ? files_[0]->path()
                                                 : dir_ + "/model.safetensors.index.json";
    fail("tensor \"" + name + "\" is missing from " + where);
  }
  used_.insert(name);
  return *it->second.first;
}

const TensorView& Checkpoint::get(const std::string& name, const std::vector<int64_t>& shape) const {
  const TensorView& tensor = get(name);
  if (tensor.shape != shape)
    fail("tensor \"" + name + "\" in " + file_of(name) + " has shape " + shape_text(tensor.shape) +
         ", expected " + shape_text(shape));
  return tensor;
}

const std::string& Checkpoint::file_of(const std::string& name) const {
  get(name);  // the error for a missing tensor
  return index_.at(name).second->path();
}

void Checkpoint::check_all_used(const std::function<std::string(const std::string& name)>& why_unused) const {
  std::vector<std::pair<std::string, std::string>> unused;  // name, why
  for (const auto& [name, entry] : index_) {
    if (used_.count(name)) continue;
    std::string why = why_unused(name);
    if (!why.empty()) unused.emplace_back(name, std::move(why));
  }
  if (unused.empty()) return;
  const std::string more =
      unused.size() == 1 ? "" : " (" + std::to_string(unused.size() - 1) + " more tensors are unused too)";
  fail("tensor \"" + unused[0].first + "\" in " + index_.at(unused[0].first).second->path() + " is not used: " +
       unused[0].second + more);
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> names;
  for (const auto& [name, entry] : index_) names.push_back(name);
  return names;
}

}  // namespace tf
