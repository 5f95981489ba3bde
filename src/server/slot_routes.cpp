#include "server/slot_routes.h"

#include <chrono>
#include <filesystem>
#include <regex>

#include "app/serving_stack.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/slot_file.h"
#include "server/openai_protocol.h"

namespace tf::server {
namespace {

ApiError invalid(const std::string& param, const std::string& message) {
  return ApiError(400, message, "invalid_request_error", param);
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// A saved slot's file is NAME.tfslot, NAME of the client's choosing.
constexpr char kNamePattern[] = "[A-Za-z0-9_-]{1,64}";
constexpr char kExtension[] = ".tfslot";

// The file a name maps to; the name is the whole of what the client chooses.
std::string slot_path(const std::string& save_dir, const nlohmann::json& body) {
  const auto name = body.find("name");
  if (name == body.end()) throw invalid("name", "Missing required parameter: 'name'.");
  static const std::regex allowed(kNamePattern);
  if (!name->is_string() || !std::regex_match(name->get<std::string>(), allowed))
    throw invalid("name", "Invalid 'name': use 1 to 64 letters, digits, '_' or '-'.");
  return save_dir + "/" + name->get<std::string>() + kExtension;
}

// The names of the saved slots in the folder (files named NAME.tfslot; temporaries and anything else aside).
std::set<std::string> saved_slot_names(const std::string& save_dir) {
  std::set<std::string> names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(save_dir, ec))
    if (entry.path().extension() == kExtension) names.insert(entry.path().stem().string());
  return names;
}

// A save's hold on its name from its count to its rename: a new name passes only while the saved
// slots and the names other saves hold number fewer than max_files, checked and taken under one lock.
class NameReservation {
 public:
  NameReservation(SlotStore& store, const std::string& name) : store_(store), name_(name) {
    std::lock_guard<std::mutex> lock(store_.mutex);
    std::set<std::string> names = saved_slot_names(store_.dir);
    names.insert(store_.names_being_saved.begin(), store_.names_being_saved.end());
    if (names.count(name_) == 0 && int64_t(names.size()) >= store_.max_files)
      throw invalid("name", "This server keeps at most " + std::to_string(store_.max_files) +
                                " saved slots (--slot-save-max); save under a name already used, or ask its "
                                "operator to remove some.");
    store_.names_being_saved.insert(name_);
  }
  ~NameReservation() {
    std::lock_guard<std::mutex> lock(store_.mutex);
    store_.names_being_saved.erase(store_.names_being_saved.find(name_));
  }
  NameReservation(const NameReservation&) = delete;
  NameReservation& operator=(const NameReservation&) = delete;

 private:
  SlotStore& store_;
  std::string name_;
};

}  // namespace

int64_t remove_interrupted_saves(const std::string& save_dir) {
  if (save_dir.empty()) return 0;
  return remove_stale_slot_temporaries(save_dir, std::string(kNamePattern) + "\\" + kExtension);  // the dot escaped
}

nlohmann::json slots_json(const Engine& engine) {
  nlohmann::json out = nlohmann::json::array();
  for (const SlotInfo& slot : engine.slots()) {
    out.push_back({{"id", slot.id},
                   {"state", slot.is_processing ? "processing" : "idle"},
                   {"id_task", slot.request_id},
                   {"n_prompt_tokens", slot.n_prompt},
                   {"n_prompt_tokens_cached", slot.n_prompt_cached},
                   {"n_tokens", slot.n_tokens},
                   {"n_waiting", slot.n_waiting},
                   {"timings", timings_json(slot.timings)}});
  }
  return out;
}

// The value of `name` in the target's query ("" when absent); slot actions are plain words.
std::string query_value(const std::string& target, const std::string& name) {
  const size_t query = target.find('?');
  if (query == std::string::npos) return "";
  std::string rest = target.substr(query + 1);
  for (size_t at = 0; at <= rest.size();) {
    const size_t end = std::min(rest.find('&', at), rest.size());
    const std::string pair = rest.substr(at, end - at);
    if (pair.compare(0, name.size() + 1, name + "=") == 0) return pair.substr(name.size() + 1);
    at = end + 1;
  }
  return "";
}

nlohmann::json slot_action(Engine& engine, const ServingStack& stack, SlotStore& store, const std::string& path,
                           const std::string& target, const nlohmann::json& body) {
  const std::string& save_dir = store.dir;
  const std::string id_text = path.substr(path.rfind('/') + 1);
  const std::string action = query_value(target, "action");
  static const std::regex digits("[0-9]{1,9}");
  if (!std::regex_match(id_text, digits)) throw invalid("id_slot", "Invalid slot id '" + id_text + "'.");
  const int32_t id = int32_t(std::stoi(id_text));
  if (id >= int32_t(engine.options().n_parallel))
    throw invalid("id_slot", "There is no slot " + id_text + " (slots are 0.." +
                                 std::to_string(engine.options().n_parallel - 1) + ").");
  if (!body.is_object()) throw invalid("", "The request body must be a JSON object.");
  const auto start = std::chrono::steady_clock::now();
  try {
    if (action == "erase") return {{"id_slot", id}, {"n_erased", engine.erase_slot(id)}};
    if (action != "save" && action != "restore")
      throw invalid("action", "Invalid 'action': expected save, restore or erase, got '" + action + "'.");
    if (save_dir.empty())
      throw invalid("action", "Saving slots is off on this server: start it with --slot-save-path DIR.");
    const std::string path = slot_path(save_dir, body);
    const std::string name = body["name"].get<std::string>();
    if (action == "save") {
      const NameReservation reservation(store, name);
      SlotSnapshot snapshot;
      try {
        snapshot = engine.save_slot(id);
      } catch (const Error& error) {  // a busy or empty slot: the slot is at fault, not the name
        throw invalid("id_slot", error.what());
      }
      const int64_t n_bytes = write_slot_file(path, snapshot, stack.identity());
      return {{"id_slot", id},
              {"name", name},
              {"n_saved", snapshot.tokens.size()},
              {"n_saved_kv", snapshot.n_blocks * snapshot.block_size},
              {"n_written", n_bytes},
              {"timings", {{"save_ms", ms_since(start)}}}};
    }
    int64_t n_bytes = 0;
    SlotSnapshot snapshot = read_slot_file(path, stack.identity(), &n_bytes);
    const int64_t n_tokens = int64_t(snapshot.tokens.size());
    int64_t n_restored = 0;
    try {
      n_restored = engine.restore_slot(id, std::move(snapshot));
    } catch (const Error& error) {  // a busy slot
      throw invalid("id_slot", error.what());
    }
    return {{"id_slot", id},
            {"name", name},
            {"n_restored", n_tokens},
            {"n_restored_kv", n_restored},
            {"n_read", n_bytes},
            {"timings", {{"restore_ms", ms_since(start)}}}};
  } catch (const Error& error) {  // a busy slot, a missing or refused file: the client's to fix
    std::string message = error.what();
    const std::string dir = save_dir + "/";  // the client named the file; the server's folder is its own
    for (size_t at = message.find(dir); !save_dir.empty() && at != std::string::npos; at = message.find(dir))
      message.erase(at, dir.size());
    throw ApiError(400, message, "invalid_request_error", action == "erase" ? "id_slot" : "name");
  }
}

}  // namespace tf::server
