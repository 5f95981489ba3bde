// GET /slots and POST /slots/{id}?action=save|restore|erase: the slots requests run in, and saving
// their sequences (tokens and K/V) to files under --slot-save-path and back. A client names a file
// only by a short name from [A-Za-z0-9_-]; the server makes the path, so nothing a client sends
// becomes a path.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace tf {
class Engine;
class ServingStack;
}  // namespace tf

namespace tf::server {

nlohmann::json slots_json(const Engine& engine);

// POST /slots/{id}?action=...: `path` and `target` as sent (the id from the path, the action from
// the query); `save_dir` empty: saving is off. Throws ApiError.
nlohmann::json slot_action(Engine& engine, const ServingStack& stack, const std::string& save_dir,
                           const std::string& path, const std::string& target, const nlohmann::json& body);

}  // namespace tf::server
