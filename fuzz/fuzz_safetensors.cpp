// A .safetensors file: its header (JSON: dtypes, shapes, offsets, metadata) checked against its
// size, then every tensor's bytes read and scanned for non-finite values. Input: the header JSON,
// a NUL byte, then the data region (the 8-byte length is written for it); an input that does not
// start with '{' is the whole file as is, length field included.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_support.h"
#include "loader/safetensors.h"
#include "loader/weight_scan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  std::string file;
  if (input.starts_with("{")) {
    const auto [header, region] = tf::fuzz::split_once(input, std::string_view("\0", 1));
    for (int i = 0; i < 8; i++) file.push_back(char(uint64_t(header.size()) >> (8 * i)));
    file.append(header);
    file.append(region);
  } else {
    file.assign(input);
  }
  const std::string path = tf::fuzz::scratch_dir() + "/model.safetensors";
  tf::fuzz::write_file(path, file);
  tf::fuzz::expect_only_user_errors([&] {
    const auto opened = tf::SafetensorsFile::open(path);
    const uint8_t* begin = opened->bytes();
    const uint8_t* end = begin + opened->n_bytes();
    for (const auto& [name, tensor] : opened->tensors()) {
      if (tensor.n_bytes && (tensor.data < begin || tensor.data + tensor.n_bytes > end))
        tf::fuzz::broken("tensor " + name + " lies outside its file");
      // Consumers index with int64 element counts; an accepted shape must not overflow them.
      if (tensor.n_elements() * int64_t(tf::dtype_size(tensor.dtype)) != int64_t(tensor.n_bytes))
        tf::fuzz::broken("tensor " + name + " has an element count that disagrees with its bytes");
      (void)tf::find_non_finite(tensor);  // reads every byte: ASan sees any overrun
    }
  });
  return 0;
}
