// A saved slot's file as read_slot_file reads it (restore after a restart): the header's JSON,
// the sizes that must fit together, the body. Input: the file without its closing SHA-256, which
// the target appends, so the fuzzer explores past the checksum into the header and the sizes.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/sha256.h"
#include "engine/slot_file.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const tf::ModelIdentity identity{"fixture", {{"config.json", "0123"}}};
  std::string bytes(reinterpret_cast<const char*>(data), size);
  tf::Sha256 hasher;
  hasher.update(bytes);
  const auto digest = hasher.digest();
  bytes.append(reinterpret_cast<const char*>(digest.data()), digest.size());
  const std::string path = tf::fuzz::scratch_dir() + "/slot.tfslot";
  tf::fuzz::write_file(path, bytes);
  tf::fuzz::expect_only_user_errors([&] {
    const tf::SlotSnapshot s = tf::read_slot_file(path, identity);
    if (s.n_blocks < 0 || s.block_size < 1 || uint64_t(s.n_blocks) * uint64_t(s.block_size) > s.tokens.size())
      tf::fuzz::broken("a slot file whose blocks exceed its tokens was accepted");
    if (s.taps.size() != size_t(s.n_blocks * s.block_size * s.tap_width))
      tf::fuzz::broken("a slot file whose taps do not fit its blocks was accepted");
    if (s.n_prompt < 0 || size_t(s.n_prompt) > s.tokens.size())
      tf::fuzz::broken("a slot file whose prompt exceeds its tokens was accepted");
    for (size_t i = 0; i < s.recurrent.size(); ++i)
      if (s.recurrent[i].n_blocks < 1 || s.recurrent[i].n_blocks > s.n_blocks ||
          (i > 0 && s.recurrent[i].n_blocks <= s.recurrent[i - 1].n_blocks) ||
          s.recurrent[i].bytes.size() != s.recurrent[0].bytes.size())
        tf::fuzz::broken("a slot file whose states lie outside its blocks, out of order or of two sizes was accepted");
  });
  return 0;
}
