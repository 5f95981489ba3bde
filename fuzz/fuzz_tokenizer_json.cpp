// tokenizer.json itself: any bytes either load as a tokenizer or are refused with a tf::Error that
// names the file (and, for a JSON type error, the field); a loaded tokenizer encodes and decodes.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_support.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = tf::fuzz::scratch_dir() + "/tokenizer.json";
  tf::fuzz::write_file(path, std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    const auto tokenizer = tf::Tokenizer::from_file(path);
    for (const char* text : {"ab ba", "<s>x</s>", "h\xc3\xa9 \xff"}) {
      for (int32_t id : tokenizer->encode(text))
        if (id < 0 || id >= tokenizer->n_tokens()) tf::fuzz::broken("encode made an id outside the tokenizer");
    }
    tf::StreamDecoder decoder(*tokenizer);
    for (int32_t id = 0; id < int32_t(std::min<int64_t>(tokenizer->n_tokens(), 64)); ++id) (void)decoder.push(id);
    (void)decoder.flush();
  } catch (const tf::Error& error) {
    if (std::string_view(error.what()).find(path) == std::string_view::npos)
      tf::fuzz::broken(std::string("a tokenizer.json error does not name the file: ") + error.what());
  } catch (const std::exception& error) {
    tf::fuzz::broken(std::string("a tokenizer.json escaped as a non-user error: ") + error.what());
  }
  return 0;
}
