// Memory-mapped .safetensors reading with every header field checked, and writing.
#include "loader/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "loader/file_helpers.h"

namespace tf {

namespace {

using Json = nlohmann::json;

// Reads a JSON integer as a non-negative count; false for anything else (floats, negatives, ...).
bool read_count(const Json& value, uint64_t* out) {
  if (value.is_number_unsigned()) {
    *out = value.get<uint64_t>();
    return true;
  }
  if (value.is_number_integer() && value.get<int64_t>() >= 0) {
    *out = uint64_t(value.get<int64_t>());
    return true;
  }
  return false;
}

// Element count times element size, or false on overflow.
bool byte_size_of(const std::vector<int64_t>& shape, DType dtype, uint64_t* out) {
  uint64_t n = dtype_size(dtype);
  for (int64_t d : shape)
    if (__builtin_mul_overflow(n, uint64_t(d), &n)) return false;
  *out = n;
  return true;
}

TensorView parse_tensor_entry(const std::string& path, const std::string& name, const Json& entry,
                              const uint8_t* data, uint64_t data_size) {
  auto bad = [&](const std::string& problem) {
    fail("safetensors file " + path + ": tensor \"" + name + "\" " + problem);
  };
  if (!entry.is_object()) bad("is not a JSON object");
  TensorView view;
  view.name = name;

  auto dtype = entry.find("dtype");
  if (dtype == entry.end() || !dtype->is_string()) bad("has no dtype string");
  if (!dtype_from_safetensors(dtype->get<std::string>(), &view.dtype))
    bad("has unknown dtype " + dtype->dump());

  auto shape = entry.find("shape");
  if (shape == entry.end() || !shape->is_array()) bad("has no shape list");
  int64_t n_elements = 1;
  for (const Json& dim : *shape) {
    uint64_t n;
    // int64_t is what every consumer indexes with, so larger dimensions are rejected too.
    if (!read_count(dim, &n) || n > uint64_t(INT64_MAX))
      bad("has a shape that is not a list of non-negative integers: " + shape->dump());
    // Every partial product too: TensorView::n_elements multiplies left to right, so [2^62, 3, 0]
    // (zero bytes) would overflow there.
    if (__builtin_mul_overflow(n_elements, int64_t(n), &n_elements))
      bad("has a shape whose element count overflows 64-bit integers: " + shape->dump());
    view.shape.push_back(int64_t(n));
  }

  auto offsets = entry.find("data_offsets");
  uint64_t begin = 0, end = 0;
  if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2 ||
      !read_count((*offsets)[0], &begin) || !read_count((*offsets)[1], &end))
    bad("has data_offsets that are not two non-negative integers");
  if (begin > end)
    bad("has data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
        "] with begin after end");
  if (end > data_size)
    bad("ends at byte " + std::to_string(end) + " of a data region of " + std::to_string(data_size) +
        " bytes (file truncated?)");

  uint64_t expected;
  if (!byte_size_of(view.shape, view.dtype, &expected) || expected != end - begin)
    bad("has shape " + shape_text(view.shape) + " of " + dtype_name(view.dtype) + " but " +
        std::to_string(end - begin) + " bytes of data");
  view.data = data + begin;
  view.n_bytes = size_t(end - begin);
  return view;
}

}  // namespace

SafetensorsFile::~SafetensorsFile() {
  if (base_) munmap(const_cast<uint8_t*>(base_), size_);
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  // Constructed first so that every failure below unmaps through the destructor.
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;

  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open safetensors file " + path);
  struct stat info;
  if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    fail("safetensors file " + path + " is not a regular file");
  }
  const uint64_t file_size = uint64_t(info.st_size);
  if (file_size < 8) {
    ::close(fd);
    fail("safetensors file " + path + " is " + std::to_string(file_size) +
         " bytes, shorter than its 8-byte header length");
  }
  void* mapped = mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);  // the mapping keeps the file alive
  if (mapped == MAP_FAILED) fail("cannot map safetensors file " + path);
  file->base_ = static_cast<const uint8_t*>(mapped);
  file->size_ = file_size;

  uint64_t header_size = 0;
  for (int i = 0; i < 8; i++) header_size |= uint64_t(file->base_[i]) << (8 * i);
  if (header_size > file_size - 8)
    fail("safetensors file " + path + " declares a " + std::to_string(header_size) +
         "-byte header but has only " + std::to_string(file_size - 8) + " bytes after the length");

  const char* header_text = reinterpret_cast<const char*>(file->base_ + 8);
  // A JSON object keeps the last of two equal keys, so a tensor named twice would silently be the second.
  std::set<std::string> names;
  std::string duplicate;
  const Json::parser_callback_t note_duplicate = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (depth == 1 && event == Json::parse_event_t::key && !names.insert(parsed.get<std::string>()).second &&
        duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  Json header = Json::parse(header_text, header_text + header_size, note_duplicate, /*allow_exceptions=*/false);
  if (header.is_discarded()) fail("safetensors file " + path + " has a header that is not valid JSON");
  if (!duplicate.empty()) fail("safetensors file " + path + ": tensor \"" + duplicate + "\" appears twice in the header");
  if (!header.is_object()) fail("safetensors file " + path + " has a header that is not a JSON object");

  const uint8_t* data = file->base_ + 8 + header_size;
  const uint64_t data_size = file_size - 8 - header_size;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) fail("safetensors file " + path + ": __metadata__ is not a JSON object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string())
          fail("safetensors file " + path + ": __metadata__ value \"" + key + "\" is not a string");
        file->metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    file->tensors_[name] = parse_tensor_entry(path, name, entry, data, data_size);
  }

  // Overlapping tensors would let a write through one view corrupt another; reject them.
  std::vector<const TensorView*> by_offset;
  for (const auto& [name, view] : file->tensors_) by_offset.push_back(&view);
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorView* a, const TensorView* b) {
    return a->data != b->data ? a->data < b->data : a->n_bytes < b->n_bytes;
  });
  for (size_t i = 1; i < by_offset.size(); i++) {
    const TensorView* previous = by_offset[i - 1];
    if (by_offset[i]->data < previous->data + previous->n_bytes)
      fail("safetensors file " + path + ": tensor \"" + by_offset[i]->name + "\" overlaps tensor \"" +
           previous->name + "\"");
  }
  return file;
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // Larger element types first keeps every tensor aligned to its element size without gaps,
  // which the reference reader rejects.
  std::vector<const TensorToWrite*> order;
  for (const TensorToWrite& tensor : tensors) order.push_back(&tensor);
  std::stable_sort(order.begin(), order.end(), [](const TensorToWrite* a, const TensorToWrite* b) {
    return dtype_size(a->dtype) > dtype_size(b->dtype);
  });

  Json header = Json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const TensorToWrite* tensor : order) {
    uint64_t expected;
    if (!byte_size_of(tensor->shape, tensor->dtype, &expected) || expected != tensor->n_bytes)
      fail("cannot write " + path + ": tensor \"" + tensor->name + "\" has shape " +
           shape_text(tensor->shape) + " of " + dtype_name(tensor->dtype) + " but " +
           std::to_string(tensor->n_bytes) + " bytes");
    if (header.contains(tensor->name))
      fail("cannot write " + path + ": tensor \"" + tensor->name + "\" appears twice");
    header[tensor->name] = {{"dtype", dtype_safetensors_name(tensor->dtype)},
                            {"shape", tensor->shape},
                            {"data_offsets", {offset, offset + tensor->n_bytes}}};
    offset += tensor->n_bytes;
  }
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');  // the data region starts 8-aligned

  // Written beside the target and renamed, so an interrupted run never leaves a half file.
  const std::string temporary = path + ".partial";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) fail("cannot create " + temporary);
    uint8_t length[8];
    for (int i = 0; i < 8; i++) length[i] = uint8_t(uint64_t(header_text.size()) >> (8 * i));
    out.write(reinterpret_cast<const char*>(length), 8);
    out.write(header_text.data(), std::streamsize(header_text.size()));
    for (const TensorToWrite* tensor : order)
      out.write(static_cast<const char*>(tensor->data), std::streamsize(tensor->n_bytes));
    out.close();
    if (!out) {
      std::remove(temporary.c_str());
      fail("cannot write " + temporary + " (disk full?)");
    }
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
    fail("cannot rename " + temporary + " to " + path);
  }
}

}  // namespace tf
