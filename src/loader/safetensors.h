// One .safetensors file, memory-mapped, with its header checked against the file.
#pragma once
#include <map>
#include <memory>
#include <string>

#include "core/tensor.h"

namespace tf {

// Maps the file read-only. The header must be valid JSON, every tensor must have a known dtype,
// a shape whose byte size equals its data_offsets span, and offsets inside the file that do not
// overlap; otherwise open() throws tf::Error naming the file and the tensor.
class SafetensorsFile {
 public:
  static std::unique_ptr<SafetensorsFile> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  size_t n_bytes() const { return size_; }
  const uint8_t* bytes() const { return base_; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Writes tensors to a .safetensors file (used by `tensorfold quantize` and tests).
struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const void* data;
  size_t n_bytes;
};
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace tf
