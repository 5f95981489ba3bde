// Layout: "TFSLOT\n", a u64 header length, the header (JSON), the tokens (i32), the K/V bytes, the
// taps (f32), a recurrent model's states one after another (the header's recurrent_blocks says
// where each lies; version 2 had one, at the last block), then the SHA-256 of every byte before it.
// Numbers little-endian.
#include "engine/slot_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <stdexcept>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/regular_file.h"
#include "core/sha256.h"

namespace tf {
namespace {

using json = nlohmann::json;
constexpr char kMagic[] = "TFSLOT\n";
constexpr size_t kMagicSize = sizeof kMagic - 1;
// A slot file's temporary: its path and mkstemp's template, whose X's become six letters and digits.
constexpr char kTemporarySuffix[] = ".tmp-XXXXXX";
constexpr char kTemporarySuffixPattern[] = "\\.tmp-[A-Za-z0-9]{6}";

void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(char((v >> (8 * i)) & 0xff));
}

uint64_t get_u64(const std::string& in, size_t at) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(uint8_t(in[at + size_t(i)])) << (8 * i);
  return v;
}

template <class T>
void put_array(std::string& out, const std::vector<T>& values) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 4);
  const size_t at = out.size();
  out.resize(at + values.size() * sizeof(T));
  if (values.empty()) return;  // data() may be null: no memcpy from it, even of nothing
  std::memcpy(out.data() + at, values.data(), values.size() * sizeof(T));  // the host is little-endian (x86, arm)
}

json files_json(const ModelIdentity& model) {
  json files = json::object();
  for (const auto& [name, digest] : model.files) files[name] = digest;
  return files;
}

}  // namespace

int64_t write_slot_file(const std::string& path, const SlotSnapshot& s, const ModelIdentity& model) {
  json recurrent_blocks = json::array();
  size_t recurrent_bytes = 0;
  for (const SlotRecurrentState& state : s.recurrent) {
    if (state.bytes.size() != s.recurrent.front().bytes.size()) fail_internal("a slot's states differ in size");
    recurrent_blocks.push_back(state.n_blocks);
    recurrent_bytes += state.bytes.size();
  }
  const json header = {{"format", "tensorfold-slot"},
                       {"version", kSlotFileVersion},
                       {"model", model.model},
                       {"model_files", files_json(model)},
                       {"kv_format", s.kv_format},
                       {"block_size", s.block_size},
                       {"n_tokens", s.tokens.size()},
                       {"n_prompt", s.n_prompt},
                       {"n_blocks", s.n_blocks},
                       {"kv_bytes", s.kv.size()},
                       {"tap_width", s.tap_width},
                       {"recurrent_format", s.recurrent_format},
                       {"recurrent_blocks", recurrent_blocks},
                       {"recurrent_bytes", recurrent_bytes},
                       {"cache_salt", s.cache_salt}};
  const std::string header_text = header.dump();
  std::string bytes(kMagic, kMagicSize);
  put_u64(bytes, header_text.size());
  bytes += header_text;
  put_array(bytes, s.tokens);
  put_array(bytes, s.kv);
  put_array(bytes, s.taps);
  for (const SlotRecurrentState& state : s.recurrent) put_array(bytes, state.bytes);
  Sha256 hasher;
  hasher.update(bytes);
  const auto digest = hasher.digest();
  bytes.append(reinterpret_cast<const char*>(digest.data()), digest.size());

  std::error_code ec;
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec))
    fail("the slot file " + path + " is taken by something that is not a file (choose another name)");
  // A temporary file of this writer's own: two saves to one name at once must not write into one
  // file (one would rename the other's bytes); the last rename wins whole. mkstemp's mode, 0600,
  // stays: a slot holds a conversation.
  std::string temporary = path + kTemporarySuffix;
  const int fd = ::mkstemp(temporary.data());
  if (fd < 0)
    throw std::runtime_error("cannot create a temporary file beside the slot file " + path + ": " + std::strerror(errno));
  bool is_written = true;
  for (size_t at = 0; at < bytes.size() && is_written;) {
    const ssize_t n = ::write(fd, bytes.data() + at, bytes.size() - at);
    if (n < 0 && errno == EINTR) continue;
    is_written = n > 0;
    if (is_written) at += size_t(n);
  }
  is_written = ::close(fd) == 0 && is_written;
  if (!is_written) {
    std::filesystem::remove(temporary, ec);  // no half-written file left behind
    throw std::runtime_error("cannot write the slot file " + temporary + " (is the disk full?)");
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::filesystem::remove(temporary, ec);
    throw std::runtime_error("cannot rename " + temporary + " to " + path + ": " + std::strerror(errno));
  }
  return int64_t(bytes.size());
}

int64_t remove_stale_slot_temporaries(const std::string& dir, const std::string& slot_file_name) {
  const std::regex temporary("(" + slot_file_name + ")" + kTemporarySuffixPattern);
  int64_t n_removed = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    // mkstemp makes regular files: a folder or a link of that name is not one of ours.
    const bool is_file = entry.symlink_status(ec).type() == std::filesystem::file_type::regular;
    if (is_file && std::regex_match(entry.path().filename().string(), temporary))
      n_removed += std::filesystem::remove(entry.path(), ec);
  }
  return n_removed;
}

SlotSnapshot read_slot_file(const std::string& path, const ModelIdentity& model, int64_t* n_bytes) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) fail("there is no saved slot " + path);
  require_regular_file(path, "the saved slot");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read the saved slot " + path + ": " + std::strerror(errno));
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (n_bytes) *n_bytes = int64_t(bytes.size());
  auto refuse = [&](const std::string& why) -> void { fail("the saved slot " + path + " " + why); };
  if (bytes.size() < kMagicSize + 8 || bytes.compare(0, kMagicSize, kMagic) != 0)
    refuse("is not a TensorFold slot file");
  const uint64_t header_size = get_u64(bytes, kMagicSize);
  const size_t header_at = kMagicSize + 8;
  if (header_size > bytes.size() - header_at) refuse("is truncated (its header is cut short)");
  json header;
  try {
    header = json::parse(bytes.substr(header_at, size_t(header_size)));
    if (!header.is_object()) throw std::runtime_error("not an object");
  } catch (const std::exception&) {
    refuse("has a corrupt header");
  }
  auto number = [&](const char* field) -> uint64_t {
    const json& v = header.value(field, json());
    if (!v.is_number_unsigned()) refuse(std::string("has a corrupt header (field '") + field + "')");
    return v.get<uint64_t>();
  };
  auto text = [&](const char* field) -> std::string {
    const json& v = header.value(field, json());
    if (!v.is_string()) refuse(std::string("has a corrupt header (field '") + field + "')");
    return v.get<std::string>();
  };
  if (header.value("format", json()) != "tensorfold-slot") refuse("is not a TensorFold slot file");
  const uint64_t version = number("version");
  if (version < uint64_t(kOldestSlotFileVersion) || version > uint64_t(kSlotFileVersion))
    refuse("has format version " + std::to_string(version) + "; this server reads versions " +
           std::to_string(kOldestSlotFileVersion) + " to " + std::to_string(kSlotFileVersion));
  if (header.value("model_files", json()) != files_json(model))
    refuse("was saved for another model (" + text("model") + "), not " + model.model +
           " (the model files' SHA-256 differ)");
  SlotSnapshot s;
  s.kv_format = text("kv_format");
  s.cache_salt = text("cache_salt");
  s.recurrent_format = text("recurrent_format");
  const uint64_t n_tokens = number("n_tokens"), kv_bytes = number("kv_bytes");
  const uint64_t recurrent_bytes = number("recurrent_bytes");
  const uint64_t block_size = number("block_size"), n_blocks = number("n_blocks"), tap_width = number("tap_width");
  // Each size bounded alone before any product, so no product wraps (a wrapped one once passed).
  constexpr uint64_t kMostTokens = uint64_t(1) << 30;
  if (n_tokens > kMostTokens || block_size < 1 || block_size > kMostTokens || n_blocks > kMostTokens ||
      tap_width > (uint64_t(1) << 20) || n_blocks * block_size > n_tokens || kv_bytes > (uint64_t(1) << 40) ||
      recurrent_bytes > (uint64_t(1) << 40) || (n_blocks > 0 && kv_bytes % n_blocks != 0) ||
      (n_blocks == 0 && kv_bytes != 0) || n_blocks * block_size * tap_width > (uint64_t(1) << 36))
    refuse("has a corrupt header (sizes that do not fit together)");
  s.block_size = int64_t(block_size);
  s.n_blocks = int64_t(n_blocks);
  s.tap_width = int64_t(tap_width);
  // Where each state lies: version 2 held one, at the last block, and no prompt length.
  std::vector<int64_t> state_blocks;
  if (version == 2) {
    s.n_prompt = int64_t(n_tokens);
    if (recurrent_bytes > 0 && n_blocks == 0) refuse("has a corrupt header (a state without blocks)");
    if (recurrent_bytes > 0) state_blocks.push_back(int64_t(n_blocks));
  } else {
    const uint64_t n_prompt = number("n_prompt");
    if (n_prompt > n_tokens) refuse("has a corrupt header (sizes that do not fit together)");
    s.n_prompt = int64_t(n_prompt);
    const json& blocks = header.value("recurrent_blocks", json());
    if (!blocks.is_array() || blocks.size() > 64) refuse("has a corrupt header (field 'recurrent_blocks')");
    for (const json& b : blocks) {
      if (!b.is_number_unsigned() || b.get<uint64_t>() < 1 || b.get<uint64_t>() > n_blocks ||
          (!state_blocks.empty() && b.get<int64_t>() <= state_blocks.back()))
        refuse("has a corrupt header (field 'recurrent_blocks')");
      state_blocks.push_back(b.get<int64_t>());
    }
    if (state_blocks.empty() ? recurrent_bytes != 0 : recurrent_bytes % state_blocks.size() != 0)
      refuse("has a corrupt header (sizes that do not fit together)");
  }
  const uint64_t n_taps = n_blocks * block_size * tap_width;
  const uint64_t body = 4 * n_tokens + kv_bytes + 4 * n_taps + recurrent_bytes;
  const size_t body_at = header_at + size_t(header_size);
  if (bytes.size() != body_at + body + 32)
    refuse(bytes.size() < body_at + body + 32 ? "is truncated" : "has bytes past its end");
  Sha256 hasher;
  hasher.update(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size() - 32);
  const auto digest = hasher.digest();
  if (std::memcmp(digest.data(), bytes.data() + bytes.size() - 32, 32) != 0)
    refuse("is corrupt (its checksum does not match)");
  size_t at = body_at;
  // memcpy into an empty vector's null data() is undefined even for 0 bytes: guarded.
  s.tokens.resize(size_t(n_tokens));
  if (n_tokens > 0) std::memcpy(s.tokens.data(), bytes.data() + at, 4 * n_tokens);
  at += 4 * n_tokens;
  s.kv.assign(bytes.begin() + int64_t(at), bytes.begin() + int64_t(at + kv_bytes));
  at += kv_bytes;
  s.taps.resize(size_t(n_taps));
  if (n_taps > 0) std::memcpy(s.taps.data(), bytes.data() + at, 4 * n_taps);
  at += 4 * n_taps;
  const uint64_t state_bytes = state_blocks.empty() ? 0 : recurrent_bytes / state_blocks.size();
  for (int64_t b : state_blocks) {
    const auto first = bytes.begin() + int64_t(at);
    s.recurrent.push_back({b, std::vector<uint8_t>(first, first + int64_t(state_bytes))});
    at += state_bytes;
  }
  return s;
}

}  // namespace tf
