// JSON Schema to GBNF: one rule per schema node, shared rules for JSON's lexical parts. Output is
// compact JSON with bounded optional whitespace, so a reply cannot pad forever.
#include "server/json_schema_grammar.h"

#include <array>
#include <cmath>
#include <map>
#include <set>

#include "grammar/grammar.h"
#include "server/json_schema_pattern.h"
#include "server/openai_protocol.h"

namespace tf::server {
namespace {

using json = nlohmann::ordered_json;

// The lexical rules every schema grammar shares.
constexpr const char* kCommonRules = R"(ws ::= | " " | "\n" [ \t]{0,20}
json-char ::= [^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
json-string ::= "\"" json-char* "\""
json-integer ::= "-"? ("0" | [1-9] [0-9]{0,15})
json-number ::= json-integer ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?
json-boolean ::= "true" | "false"
json-null ::= "null"
json-value ::= json-object | json-array | json-string | json-number | json-boolean | json-null
json-object ::= "{" ws (json-member ("," ws json-member)*)? "}"
json-member ::= json-string ws ":" ws json-value ws
json-array ::= "[" ws (json-value ws ("," ws json-value ws)*)? "]"
)";

constexpr int64_t kMaxCount = 1000;  // the grammar's repetition bound
constexpr int kMaxSchemaDepth = 128;       // schemas nest, $ref chains included, at most this deep (visit recurses)

ApiError unsupported(const std::string& path, const std::string& what) {
  return ApiError(400, "Invalid '" + path + "': " + what, "invalid_request_error", path);
}

// Rules NAME-0 ... for text that never holds `word` (whose first byte is not repeated in it), as
// a deterministic automaton: NAME-k has just read the word's first k bytes, and may end anywhere.
std::string text_without_gbnf(const std::string& name, std::string_view word) {
  const auto rule = [&](size_t k) { return name + "-" + std::to_string(k); };
  const std::string first = gbnf_literal(word.substr(0, 1));
  std::string out;
  for (size_t k = 0; k < word.size(); ++k) {
    out += rule(k) + " ::= \"\" | " + first + " " + rule(1);
    if (k > 0 && k + 1 < word.size()) out += " | " + gbnf_literal(word.substr(k, 1)) + " " + rule(k + 1);
    // Any other byte starts over: the class leaves out the word's first byte and, past it, the
    // byte that would continue the word (at the last, the one that would complete it).
    out += " | [^" + std::string(1, word[0]) + (k > 0 ? std::string(1, word[k]) : "") + "] " + rule(0) + "\n";
  }
  return out;
}

// A prefix of rule names that `grammar` does not use (rule names are words of letters, digits and '-').
std::string unused_rule_prefix(const std::string& grammar, std::string prefix) {
  while (grammar.find(prefix) != std::string::npos) prefix += "-x";
  return prefix;
}

class SchemaConverter {
 public:
  // Rules are named prefix + a number, so several converters can share one grammar.
  SchemaConverter(const json& root, std::string root_path, std::string prefix)
      : root_(root), root_path_(std::move(root_path)), prefix_(std::move(prefix)) {}

  // The expression for the root value; rules() holds the rules it uses.
  std::string value() { return visit(root_, root_path_); }
  // A Qwen3.5-class call's parameters (the root must be an object schema): per property, in the
  // order of 'properties', <parameter=KEY>\nVALUE\n</parameter>\n. Without properties, any
  // parameters with raw values (none with additionalProperties false).
  std::string xml_parameters() {
    static const std::set<std::string> allowed = {"type", "properties", "required", "additionalProperties", "title",
                                                  "description", "$schema", "$id", "$comment", "$defs", "definitions"};
    if (!root_.is_object()) throw unsupported(root_path_, "a tool's parameters must be an object schema");
    for (const auto& [key, value] : root_.items())
      if (!allowed.count(key))
        throw unsupported(root_path_ + "." + key, "'" + key + "' is not supported at the top of a tool's parameters "
                                                  "with this chat template (its calls write one <parameter> per property)");
    if (auto type = root_.find("type"); type != root_.end() && *type != "object")
      throw unsupported(root_path_ + ".type", "a tool's parameters must be an object schema");
    auto properties = root_.find("properties");
    if (properties == root_.end() || properties->empty()) {
      auto additional = root_.find("additionalProperties");
      if (additional == root_.end() || *additional == true)
        return "(\"<parameter=\" xml-name \">\\n\" xml-text-0 \"\\n</parameter>\\n\")*";
      if (*additional == false) return "\"\"";
      throw unsupported(root_path_ + ".additionalProperties", "a schema for additional parameters is not supported "
                                                              "with this chat template; list them in 'properties'");
    }
    const auto member = [&](const std::string& name, const json& sub, const std::string& sub_path) {
      if (name.empty() || name.find_first_of("<>\n") != std::string::npos)
        throw unsupported(sub_path, "a parameter name must be non-empty, without '<', '>' or a newline");
      return gbnf_literal("<parameter=" + name + ">\n") + " " + xml_value(sub, sub_path) + " " +
             gbnf_literal("\n</parameter>\n");
    };
    return members(root_, root_path_, "", member);
  }

  std::string rules() const {
    std::string out;
    for (const std::string& rule : rules_) out += rule + "\n";
    return out;
  }

 private:
  std::string new_rule(const std::string& body) {
    const std::string name = prefix_ + std::to_string(rules_.size());
    rules_.push_back(name + " ::= " + body);
    return name;
  }

  static std::string join(const std::vector<std::string>& items, const char* separator) {
    std::string out;
    for (const std::string& item : items) out += (out.empty() ? "" : separator) + item;
    return out;
  }

  // Whether `value` is of the JSON Schema type (a name or a list of names) `type`.
  static bool value_has_type(const json& value, const json& type) {
    if (type.is_array()) {
      for (const json& t : type)
        if (value_has_type(value, t)) return true;
      return false;
    }
    if (!type.is_string()) return true;  // the type's own check names the fault
    const std::string& name = type.get_ref<const std::string&>();
    if (name == "integer")
      return value.is_number_integer() || (value.is_number_float() && std::trunc(value.get<double>()) == value.get<double>());
    return (name == "string" && value.is_string()) || (name == "number" && value.is_number()) ||
           (name == "boolean" && value.is_boolean()) || (name == "null" && value.is_null()) ||
           (name == "object" && value.is_object()) || (name == "array" && value.is_array());
  }

  // One JSON value's exact text (enum, const).
  static std::string value_literal(const json& value) { return gbnf_literal(value.dump()); }

  static int64_t count(const json& schema, const char* key, const std::string& path, int64_t fallback) {
    auto it = schema.find(key);
    if (it == schema.end()) return fallback;
    if (!it->is_number_integer() || it->get<int64_t>() < 0) throw unsupported(path + "." + key, "expected a non-negative integer");
    if (it->get<int64_t>() > kMaxCount)
      throw unsupported(path + "." + key, "values above " + std::to_string(kMaxCount) + " are not supported");
    return it->get<int64_t>();
  }

  // item{min,max} as GBNF (max -1: unbounded).
  static std::string repeat(const std::string& item, int64_t min, int64_t max) {
    if (max < 0) return min == 0 ? "(" + item + ")*" : "(" + item + "){" + std::to_string(min) + ",}";
    return "(" + item + "){" + std::to_string(min) + "," + std::to_string(max) + "}";
  }

  std::string visit(const json& schema, const std::string& path) {
    // The body's nesting bound does not bound this walk: a chain of $defs, each a $ref to the next,
    // is shallow JSON but recurses once per link.
    struct Depth {
      int& depth;
      explicit Depth(int& d) : depth(++d) {}
      ~Depth() { --depth; }
    } depth(depth_);
    if (depth_ > kMaxSchemaDepth)
      throw unsupported(path, "the schema nests (through $ref too) deeper than " + std::to_string(kMaxSchemaDepth) + " levels");
    if (schema.is_boolean()) {
      if (schema.get<bool>()) return "json-value";
      throw unsupported(path, "the schema 'false' matches nothing");
    }
    if (!schema.is_object()) throw unsupported(path, "a schema must be an object or a boolean");
    static const std::set<std::string> annotations = {"title", "description", "default", "examples", "$schema",
                                                      "$id", "$comment", "$defs", "definitions", "readOnly",
                                                      "writeOnly", "deprecated"};
    static const std::set<std::string> known = {"type", "properties", "required", "additionalProperties", "items",
                                                "minItems", "maxItems", "enum", "const", "anyOf", "oneOf", "$ref",
                                                "pattern", "minLength", "maxLength"};
    for (const auto& [key, value] : schema.items())
      if (!annotations.count(key) && !known.count(key))
        throw unsupported(path + "." + key, "the JSON Schema keyword '" + key + "' is not supported");

    if (auto ref = schema.find("$ref"); ref != schema.end()) return reference(*ref, path + ".$ref");
    // enum and const beside a type: only the values of that type (the schema allows no others).
    const auto type = schema.find("type");
    const auto is_of_type = [&](const json& value) { return type == schema.end() || value_has_type(value, *type); };
    if (auto values = schema.find("enum"); values != schema.end()) {
      if (!values->is_array() || values->empty()) throw unsupported(path + ".enum", "expected a non-empty array");
      std::vector<std::string> items;
      for (const json& v : *values)
        if (is_of_type(v)) items.push_back(value_literal(v));
      if (items.empty()) throw unsupported(path + ".enum", "no value is of the schema's 'type': nothing can match");
      return "(" + join(items, " | ") + ")";
    }
    if (auto value = schema.find("const"); value != schema.end()) {
      if (!is_of_type(*value)) throw unsupported(path + ".const", "the value is not of the schema's 'type': nothing can match");
      return value_literal(*value);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      auto branches = schema.find(key);
      if (branches == schema.end()) continue;
      if (!branches->is_array() || branches->empty())
        throw unsupported(path + "." + key, "expected a non-empty array of schemas");
      std::vector<std::string> items;
      for (size_t i = 0; i < branches->size(); ++i)
        items.push_back(visit((*branches)[i], path + "." + key + "[" + std::to_string(i) + "]"));
      return "(" + join(items, " | ") + ")";
    }
    if (type == schema.end()) {
      if (schema.contains("properties")) return object(schema, path);
      if (schema.contains("items")) return array(schema, path);
      return "json-value";
    }
    if (type->is_array()) {
      std::vector<std::string> items;
      for (const json& t : *type) {
        if (!t.is_string()) throw unsupported(path + ".type", "expected type names");
        items.push_back(typed(schema, t.get<std::string>(), path));
      }
      if (items.empty()) throw unsupported(path + ".type", "expected at least one type");
      return "(" + join(items, " | ") + ")";
    }
    if (!type->is_string()) throw unsupported(path + ".type", "expected a type name or a list of them");
    return typed(schema, type->get<std::string>(), path);
  }

  std::string typed(const json& schema, const std::string& type, const std::string& path) {
    if (type == "object") return object(schema, path);
    if (type == "array") return array(schema, path);
    if (type == "string") return string(schema, path);
    if (type == "number") return "json-number";
    if (type == "integer") return "json-integer";
    if (type == "boolean") return "json-boolean";
    if (type == "null") return "json-null";
    throw unsupported(path + ".type", "unknown type '" + type + "'");
  }

  std::string string(const json& schema, const std::string& path) {
    if (auto pattern = schema.find("pattern"); pattern != schema.end()) {
      if (!pattern->is_string()) throw unsupported(path + ".pattern", "expected a string");
      if (schema.contains("minLength") || schema.contains("maxLength"))
        throw unsupported(path + ".pattern", "pattern together with minLength/maxLength is not supported");
      return new_rule("\"\\\"\" " + pattern_gbnf(pattern->get<std::string>(), path + ".pattern") + " \"\\\"\"");
    }
    const int64_t min = count(schema, "minLength", path, 0);
    const int64_t max = count(schema, "maxLength", path, -1);
    if (max >= 0 && max < min) throw unsupported(path + ".maxLength", "maxLength is below minLength");
    if (min == 0 && max < 0) return "json-string";
    return new_rule("\"\\\"\" " + repeat("json-char", min, max) + " \"\\\"\"");
  }

  std::string array(const json& schema, const std::string& path) {
    const std::string item = schema.contains("items") ? visit(schema["items"], path + ".items") : "json-value";
    const int64_t min = count(schema, "minItems", path, 0);
    const int64_t max = count(schema, "maxItems", path, -1);
    if (max >= 0 && max < min) throw unsupported(path + ".maxItems", "maxItems is below minItems");
    if (max == 0) return "\"[\" ws \"]\"";
    const std::string first = item + " ws";
    const std::string rest = repeat("\",\" ws " + item + " ws", std::max<int64_t>(min - 1, 0), max < 0 ? -1 : max - 1);
    const std::string items = first + " " + rest;
    return new_rule("\"[\" ws " + (min == 0 ? "(" + items + ")?" : items) + " \"]\"");
  }

  std::string object(const json& schema, const std::string& path) {
    auto properties = schema.find("properties");
    auto additional = schema.find("additionalProperties");
    if (properties == schema.end() || properties->empty()) {
      // Members are written only from 'properties': a required one without them could never be.
      if (auto required = schema.find("required"); required != schema.end() && !required->empty())
        throw unsupported(path + ".required", "every required name must be one of 'properties'");
      if (additional == schema.end() || additional->is_boolean()) {
        if (additional != schema.end() && !additional->get<bool>()) return "\"{\" ws \"}\"";
        return "json-object";
      }
      const std::string value = visit(*additional, path + ".additionalProperties");
      const std::string member = "json-string ws \":\" ws " + value + " ws";
      return new_rule("\"{\" ws (" + member + " (\",\" ws " + member + ")*)? \"}\"");
    }
    const auto member = [&](const std::string& name, const json& sub, const std::string& sub_path) {
      return gbnf_literal(json(name).dump()) + " ws \":\" ws " + visit(sub, sub_path) + " ws";
    };
    return new_rule("\"{\" ws " + members(schema, path, "\",\" ws ", member) + " \"}\"");
  }

  // The members of an object schema with 'properties', in the order the client gave them (no
  // others are written); an optional one may be left out. `member` writes one, `separator` goes
  // between two. tail[i][after]: the members from i on, `after` = a member precedes (so the next
  // needs the separator).
  template <typename MemberWriter>
  std::string members(const json& schema, const std::string& path, const std::string& separator,
                      const MemberWriter& member) {
    const json& properties = schema.at("properties");
    if (!properties.is_object()) throw unsupported(path + ".properties", "expected an object");
    auto additional = schema.find("additionalProperties");
    if (additional != schema.end() && !additional->is_boolean())
      throw unsupported(path + ".additionalProperties", "a schema for additional properties beside 'properties' is not supported");
    std::set<std::string> required;
    if (auto list = schema.find("required"); list != schema.end()) {
      if (!list->is_array()) throw unsupported(path + ".required", "expected an array of names");
      for (const json& name : *list) {
        if (!name.is_string() || !properties.contains(name.get<std::string>()))
          throw unsupported(path + ".required", "every required name must be one of 'properties'");
        required.insert(name.get<std::string>());
      }
    }
    std::vector<std::string> written, names;
    for (const auto& [name, sub] : properties.items()) {
      written.push_back(member(name, sub, path + ".properties." + name));
      names.push_back(name);
    }
    const size_t n = written.size();
    const int n_variants = separator.empty() ? 1 : 2;
    std::vector<std::array<std::string, 2>> tail(n + 1, {"\"\"", "\"\""});
    for (size_t i = n; i-- > 0;) {
      for (int after = 0; after < n_variants; ++after) {
        const std::string present = (after ? separator : "") + written[i] + " " + tail[i + 1][n_variants - 1];
        tail[i][after] = new_rule(required.count(names[i]) ? present : present + " | " + tail[i + 1][after]);
      }
    }
    return tail[0][0];
  }

  // One parameter's value as the template writes it and the reply parser reads it back: a
  // property of type "string" raw (its pattern or length bounds, written for JSON strings, are
  // refused); strings of an untyped enum or const raw where the parser would not read them as JSON;
  // any other value as JSON.
  std::string xml_value(const json& schema, const std::string& path) {
    const std::string json_form = visit(schema, path);  // also checks the schema's keywords
    if (!schema.is_object()) return json_form;
    const bool is_string = schema.contains("type") && schema["type"] == "string";  // the parser's test
    std::vector<json> values;
    if (auto list = schema.find("enum"); list != schema.end()) values.assign(list->begin(), list->end());
    else if (auto value = schema.find("const"); value != schema.end()) values.push_back(*value);
    else if (!is_string) return json_form;
    if (values.empty()) {
      for (const char* key : {"pattern", "minLength", "maxLength"})
        if (schema.contains(key))
          throw unsupported(path + "." + key, std::string("'") + key + "' is not supported for a string parameter with "
                                              "this chat template (its calls write strings raw)");
      return "xml-text-0";
    }
    std::vector<std::string> items;
    for (const json& value : values) {
      const bool is_raw = value.is_string() && (is_string || !json::accept(value.get<std::string>()));
      if (is_string && !value.is_string()) throw unsupported(path, "a string parameter's values must be strings");
      if (is_raw && value.get<std::string>().find("</parameter>") != std::string::npos)
        throw unsupported(path, "a parameter's value may not hold '</parameter>'");
      items.push_back(is_raw ? gbnf_literal(value.get<std::string>()) : value_literal(value));
    }
    return "(" + join(items, " | ") + ")";
  }

  std::string reference(const json& ref, const std::string& path) {
    if (!ref.is_string()) throw unsupported(path, "expected a string");
    const std::string target = ref.get<std::string>();
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      const std::string p = prefix;
      if (target.rfind(p, 0) != 0) continue;
      const std::string name = target.substr(p.size());
      auto found = refs_.find(target);
      if (found != refs_.end()) return found->second;
      const std::string container = p == "#/$defs/" ? "$defs" : "definitions";
      if (!root_.is_object() || !root_.contains(container) || !root_[container].contains(name))
        throw unsupported(path, "the reference '" + target + "' names no definition");
      // Named before it is visited, so a recursive definition refers to itself.
      const std::string rule = prefix_ + std::to_string(rules_.size());
      rules_.push_back("");
      refs_[target] = rule;
      const size_t slot = rules_.size() - 1;
      const std::string body = visit(root_[container][name], root_path_ + "." + container + "." + name);
      rules_[slot] = rule + " ::= " + body;
      return rule;
    }
    throw unsupported(path, "only references into '#/$defs/' or '#/definitions/' are supported");
  }

  const json& root_;
  std::string root_path_;
  int depth_ = 0;  // visit()s in progress
  std::string prefix_;
  std::vector<std::string> rules_;
  std::map<std::string, std::string> refs_;
};

}  // namespace

std::string json_schema_gbnf(const nlohmann::ordered_json& schema, const std::string& param) {
  SchemaConverter converter(schema, param, "s");
  const std::string value = converter.value();
  return "root ::= " + value + "\n" + kCommonRules + converter.rules();
}

std::string tool_call_gbnf(const std::vector<ToolSchema>& tools, const ToolCallForm& form) {
  if (tools.empty()) throw ApiError(400, "tool_choice needs at least one tool in 'tools'.", "invalid_request_error", "tools");
  std::string rules;
  std::vector<std::string> calls;
  for (size_t i = 0; i < tools.size(); ++i) {
    SchemaConverter converter(tools[i].parameters, tools[i].param, "t" + std::to_string(i) + "-");
    const std::string& name = tools[i].name;
    if (form.syntax == ToolCallSyntax::qwen3_5_xml) {
      if (name.find_first_of("<>\n") != std::string::npos)
        throw ApiError(400, "Invalid 'tools': a function name may not hold '<', '>' or a newline with this chat template.",
                       "invalid_request_error", "tools");
      // <tool_call>\n<function=NAME>\n, the parameters, </function>\n</tool_call>: as the template writes a call.
      const std::string parameters = converter.xml_parameters();
      calls.push_back(gbnf_literal("<tool_call>\n<function=" + name + ">\n") + " " + parameters + " " +
                      gbnf_literal("</function>\n</tool_call>"));
    } else {
      // The Qwen3 form: JSON with "name" then "arguments" inside the tags, one call per block.
      const std::string arguments = converter.value();
      calls.push_back("\"<tool_call>\\n{\\\"name\\\": \" " + gbnf_literal(nlohmann::json(name).dump()) +
                      " \", \\\"arguments\\\": \" " + arguments + " \"}\\n</tool_call>\"");
    }
    rules += converter.rules();
  }
  std::string call = "tool-call ::= " + calls[0];
  for (size_t i = 1; i < calls.size(); ++i) call += " | " + calls[i];
  const std::string calls_rule = form.is_parallel ? "tool-call (\"\\n\" tool-call)*" : "tool-call";
  std::string grammar = "root ::= " + calls_rule + "\n" + call + "\n" + kCommonRules + rules;
  if (form.syntax == ToolCallSyntax::qwen3_5_xml)
    grammar += "xml-name ::= [^<>\\n]+\n" + text_without_gbnf("xml-text", "</parameter>");
  return grammar;
}

StartedGbnf after_reasoning_gbnf(StartedGbnf answer) {
  const std::string prefix = unused_rule_prefix(answer.text, "reasoning");
  StartedGbnf grammar{std::move(answer.text), prefix + "-then-answer"};
  grammar.text += "\n" + grammar.start + " ::= " + prefix + "-text-0 \"</think>\\n\\n\" " + answer.start + "\n" +
                  text_without_gbnf(prefix + "-text", "</think>");
  return grammar;
}

StartedGbnf optional_calls_gbnf(std::string calls) {
  const std::string prefix = unused_rule_prefix(calls, "free");
  StartedGbnf grammar{std::move(calls), prefix + "-then-calls"};
  // The <think> block may hold "<tool_call>" (reasoning quotes it); the text after it may not.
  grammar.text += "\n" + grammar.start + " ::= (\"<think>\" " + prefix + "-thought-0 \"</think>\")? " + prefix +
                  "-text-0 root?\n" + text_without_gbnf(prefix + "-thought", "</think>") +
                  text_without_gbnf(prefix + "-text", "<tool_call>");
  return grammar;
}

std::string json_object_gbnf() { return std::string("root ::= json-object\n") + kCommonRules; }

}  // namespace tf::server
