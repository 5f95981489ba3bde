// GET /slots and POST /slots/{id}?action=save|restore|erase: the slots requests run in, and saving
// their sequences (tokens and K/V) to files under --slot-save-path and back. A client names a file
// only by a short name from [A-Za-z0-9_-]; the server makes the path, so nothing a client sends
// becomes a path.
#pragma once
#include <cstdint>
#include <mutex>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

namespace tf {
class Engine;
class ServingStack;
}  // namespace tf

namespace tf::server {

nlohmann::json slots_json(const Engine& engine);

// Where saved slots go: `dir` empty: saving is off. At most `max_files` of them, so clients cannot
// fill the disk; saving over an existing name is always allowed. One store serves every request.
struct SlotStore {
  std::string dir;
  int64_t max_files = 256;
  // The names saves in flight hold from their count to their rename, counted with the files there, so
  // saves under new names at once cannot pass max_files together; guarded by mutex.
  std::mutex mutex;
  std::multiset<std::string> names_being_saved;
};

// Removes the temporary files that saves cut short (a killed server) left in `save_dir`, nothing else
// (they never count as saved slots either); returns how many. For start-up, before any save.
int64_t remove_interrupted_saves(const std::string& save_dir);

// POST /slots/{id}?action=...: `path` and `target` as sent (the id from the path, the action from
// the query). Throws ApiError for the request's faults; a disk that fails throws std::runtime_error
// (a 500, logged).
nlohmann::json slot_action(Engine& engine, const ServingStack& stack, SlotStore& store, const std::string& path,
                           const std::string& target, const nlohmann::json& body);

}  // namespace tf::server
