// JSON Schema to GBNF: one rule per schema node, shared rules for JSON's lexical parts. Output is
// compact JSON with bounded optional whitespace, so a reply cannot pad forever.
#include "server/json_schema_grammar.h"

#include <array>
#include <cmath>
#include <map>
#include <set>

#include "grammar/grammar.h"
#include "grammar/grammar_matcher.h"
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

// A schema no value satisfies: an anyOf branch that is one is left out, anywhere else it is a 400.
struct Unsatisfiable : ApiError {
  Unsatisfiable(const std::string& path, const std::string& what)
      : ApiError(unsupported(path, what + ": nothing can match")), why("'" + path + "': " + what) {}
  std::string why;
};

// Keywords that change nothing a value may be.
const std::set<std::string> kAnnotations = {"title", "description", "default", "examples", "$schema", "$id", "$comment",
                                            "$defs", "definitions", "readOnly", "writeOnly", "deprecated"};
const std::set<std::string> kKeywords = {"type", "properties", "required", "additionalProperties", "items", "minItems",
                                         "maxItems", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "pattern",
                                         "minLength", "maxLength"};
// Keywords that bind only the values of one type, by that type.
const std::vector<std::pair<const char*, std::vector<const char*>>> kTypeKeywords = {
    {"object", {"properties", "required", "additionalProperties"}},
    {"array", {"items", "minItems", "maxItems"}},
    {"string", {"pattern", "minLength", "maxLength"}}};

// The schema's keywords that constrain a value, but `except`.
json constraints_except(const json& schema, const std::string& except) {
  json out = json::object();
  if (schema.is_object())
    for (const auto& [key, value] : schema.items())
      if (key != except && !kAnnotations.count(key)) out[key] = value;
  return out;
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
  // The same for a root that must be an object (a tool's arguments), whatever its 'type' says.
  std::string object_value() { return visit(intersect(root_, json{{"type", "object"}}, root_path_), root_path_); }
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
    if (!has_properties(root_, root_path_)) {
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

  // Counts a visit or merge in progress, refusing past kMaxSchemaDepth: the body's nesting bound
  // does not bound the walk, as a chain of $defs, each a $ref to the next, recurses once per link.
  struct DepthGuard {
    int& depth;
    DepthGuard(int& depth_in_progress, const std::string& path) : depth(++depth_in_progress) {
      if (depth <= kMaxSchemaDepth) return;
      --depth;
      throw unsupported(path, "the schema nests (through $ref too) deeper than " + std::to_string(kMaxSchemaDepth) + " levels");
    }
    ~DepthGuard() { --depth; }
  };

  static void check_keywords(const json& schema, const std::string& path) {
    if (schema.is_boolean()) {
      if (!schema.get<bool>()) throw Unsatisfiable(path, "the schema is 'false'");
      return;
    }
    if (!schema.is_object()) throw unsupported(path, "a schema must be an object or a boolean");
    for (const auto& [key, value] : schema.items())
      if (!kAnnotations.count(key) && !kKeywords.count(key))
        throw unsupported(path + "." + key, "the JSON Schema keyword '" + key + "' is not supported");
  }

  std::string visit(const json& schema, const std::string& path) {
    DepthGuard depth(depth_, path);
    check_keywords(schema, path);
    if (schema.is_boolean()) return "json-value";
    if (schema.contains("enum") || schema.contains("const")) return literals(schema, path);
    if (auto ref = schema.find("$ref"); ref != schema.end()) {
      const json others = constraints_except(schema, "$ref");
      if (others.empty()) return reference(*ref, path + ".$ref");
      // One rule per (target, siblings), so a definition whose members lead back here is finite.
      return named_rule(ref->dump() + " & " + others.dump(), intersect(*definition(*ref, path + ".$ref").first, others, path), path);
    }
    for (const char* key : {"anyOf", "oneOf"})
      if (schema.contains(key)) return alternatives(schema, key, path);
    if (auto conjuncts = schema.find("allOf"); conjuncts != schema.end()) {
      if (!conjuncts->is_array() || conjuncts->empty())
        throw unsupported(path + ".allOf", "expected a non-empty array of schemas");
      json merged = constraints_except(schema, "allOf");
      for (size_t i = 0; i < conjuncts->size(); ++i)
        merged = intersect(merged, (*conjuncts)[i], path + ".allOf[" + std::to_string(i) + "]");
      return visit(merged, path);
    }
    const auto type = schema.find("type");
    if (type == schema.end()) return untyped(schema, path);
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

  // anyOf / oneOf (both as alternatives): each branch with the schema's other keywords merged in.
  // A branch nothing can match is left out, with the rules it made.
  std::string alternatives(const json& schema, const char* key, const std::string& path) {
    const json& branches = schema[key];
    if (!branches.is_array() || branches.empty())
      throw unsupported(path + "." + key, "expected a non-empty array of schemas");
    const json others = constraints_except(schema, key);
    std::vector<std::string> items;
    std::string first_failure;
    for (size_t i = 0; i < branches.size(); ++i) {
      const std::string branch_path = path + "." + key + "[" + std::to_string(i) + "]";
      const size_t n_rules = rules_.size();
      const auto refs = refs_;
      try {
        items.push_back(visit(others.empty() ? branches[i] : intersect(others, branches[i], branch_path), branch_path));
      } catch (const Unsatisfiable& e) {
        rules_.resize(n_rules);
        refs_ = refs;
        if (first_failure.empty()) first_failure = e.why;
      }
    }
    if (items.empty())
      throw Unsatisfiable(path + "." + key, std::string("no branch can match") +
                                                (others.empty() ? "" : " beside the schema's other keywords") +
                                                " (" + first_failure + ")");
    return "(" + join(items, " | ") + ")";
  }

  // A schema without 'type': the types its keywords speak of (properties: an object, minLength: a
  // string...), any value when none do. JSON Schema lets other types through too; a reply needs to be
  // a valid instance, not any one, and a client writing {"properties": ...} means an object (llama.cpp
  // and xgrammar read it so).
  // Checking an enum's values against their siblings takes JSON Schema's own reading instead
  // (is_validating_): a listed 7 beside maxLength is valid, and kept.
  std::string untyped(const json& schema, const std::string& path) {
    std::vector<std::string> items;
    bool is_bound = false;
    for (const auto& [type, keywords] : kTypeKeywords) {
      bool is_named = false;
      for (const char* keyword : keywords) is_named = is_named || schema.contains(keyword);
      is_bound = is_bound || is_named;
      if (is_named && !is_validating_) items.push_back(typed(schema, type, path));
    }
    if (!is_bound) return "json-value";
    if (is_validating_)
      for (const char* type : {"object", "array", "string", "number", "boolean", "null"})
        items.push_back(typed(schema, type, path));
    return items.size() == 1 ? items[0] : "(" + join(items, " | ") + ")";
  }

  // enum / const: the listed values that the schema's other keywords allow, each written exactly.
  std::string literals(const json& schema, const std::string& path) {
    std::vector<std::string> texts;
    for (const json& value : allowed_values(schema, path)) texts.push_back(value.dump());
    std::sort(texts.begin(), texts.end());
    texts.erase(std::unique(texts.begin(), texts.end()), texts.end());
    return "(" + trie_gbnf(texts, 0, texts.size(), 0) + ")";
  }

  // Sorted distinct texts[begin, end), which share their first `depth` bytes, as their trie: a rule
  // per point where they part, so however many there are one parse is alive at a time (thousands of
  // alternatives side by side were too ambiguous for the matcher). They part only between UTF-8
  // characters, since a literal holds whole characters.
  std::string trie_gbnf(const std::vector<std::string>& texts, size_t begin, size_t end, size_t depth) {
    const auto char_at = [&](const std::string& text, size_t at) {
      const unsigned char lead = static_cast<unsigned char>(text[at]);
      return text.substr(at, lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2);
    };
    const std::string& first = texts[begin];
    if (end - begin == 1) return first.size() == depth ? "\"\"" : gbnf_literal(first.substr(depth));
    const std::string& last = texts[end - 1];  // sorted: the range shares what its first and last share
    size_t common = depth;
    while (common < first.size() && common < last.size() && first[common] == last[common]) ++common;
    while (common > depth && common < first.size() && (static_cast<unsigned char>(first[common]) & 0xC0) == 0x80) --common;
    std::vector<std::string> branches;
    size_t i = begin;
    if (first.size() == common) {  // one text ends here
      branches.push_back("\"\"");
      ++i;
    }
    while (i < end) {
      size_t j = i + 1;
      while (j < end && char_at(texts[j], common) == char_at(texts[i], common)) ++j;
      branches.push_back(trie_gbnf(texts, i, j, common));
      i = j;
    }
    const std::string prefix = common > depth ? gbnf_literal(first.substr(depth, common - depth)) + " " : "";
    return prefix + new_rule(join(branches, " | "));
  }

  // The values of enum (and/or const) that the schema's other keywords allow: the type by
  // value_has_type (2.0 is an integer), the rest by matching each value's JSON text against their
  // grammar (an object value with its members in the order of 'properties').
  std::vector<json> allowed_values(const json& schema, const std::string& path) {
    std::vector<json> values;
    const char* key = schema.contains("const") ? "const" : "enum";
    if (auto list = schema.find("enum"); list != schema.end()) {
      if (!list->is_array() || list->empty()) throw unsupported(path + ".enum", "expected a non-empty array");
      values.assign(list->begin(), list->end());
    }
    if (auto value = schema.find("const"); value != schema.end()) {
      if (values.empty()) values.push_back(*value);
      else std::erase_if(values, [&](const json& v) { return v != *value; });
      if (values.empty()) throw Unsatisfiable(path + ".const", "the value is not one of 'enum'");
    }
    json others = constraints_except(schema, "enum");
    others.erase("const");
    const json type = others.contains("type") ? others["type"] : json();
    others.erase("type");
    std::erase_if(values, [&](const json& v) { return !type.is_null() && !value_has_type(v, type); });
    if (values.empty()) throw Unsatisfiable(path + "." + key, "no value is of the schema's 'type'");
    if (others.empty()) return values;
    SchemaConverter checker(root_, root_path_, "c");
    checker.is_validating_ = true;
    checker.depth_ = depth_;  // a value's check may lead back here through $ref
    const std::string root = checker.visit(others, path);  // before rules(): it makes them
    auto grammar = Grammar::parse("root ::= " + root + "\n" + kCommonRules + checker.rules());
    GrammarMatcher matcher(grammar, std::make_shared<TokenVocabulary>(std::vector<std::string>{}));
    const GrammarState start = matcher.start();
    std::erase_if(values, [&](const json& v) { return !matcher.advance_bytes(start, v.dump()).is_complete; });
    if (values.empty()) {
      std::string names;
      for (const auto& [name, value] : others.items()) names += (names.empty() ? "" : ", ") + name;
      throw Unsatisfiable(path + "." + key, "no value satisfies the schema's other keywords (" + names + ")");
    }
    return values;
  }

  // A schema for the values valid against both `a` and `b`: allOf, and the keywords beside a $ref
  // or an anyOf branch merged into it. Throws Unsatisfiable where no value is both, a 400 where
  // this converter cannot write the result (two different patterns).
  json intersect(const json& a, const json& b, const std::string& path) {
    DepthGuard depth(depth_, path);  // a $ref among the merged may lead back to itself
    check_keywords(a, path);
    check_keywords(b, path);
    if (constraints_except(a, "").empty()) return b.is_boolean() ? json::object() : b;
    if (constraints_except(b, "").empty()) return a;
    for (const auto& [one, other] : {std::pair{&a, &b}, std::pair{&b, &a}})
      if (auto ref = one->find("$ref"); ref != one->end())
        return intersect(intersect(*definition(*ref, path + ".$ref").first, constraints_except(*one, "$ref"), path), *other, path);
    json out = constraints_except(a, "");
    const json b_constraints = constraints_except(b, "");
    for (const auto& [key, value] : b_constraints.items()) {
      auto mine = out.find(key);
      if (mine == out.end()) {
        out[key] = value;
      } else if (key == "type") {
        *mine = type_intersection(*mine, value, path + ".type");
      } else if (key == "minLength" || key == "minItems") {
        *mine = std::max(count(out, key.c_str(), path, 0), count(b, key.c_str(), path, 0));
      } else if (key == "maxLength" || key == "maxItems") {
        *mine = std::min(count(out, key.c_str(), path, 0), count(b, key.c_str(), path, 0));
      } else if (key == "required") {
        if (!mine->is_array() || !value.is_array()) throw unsupported(path + ".required", "expected an array of names");
        for (const json& name : value)
          if (std::find(mine->begin(), mine->end(), name) == mine->end()) mine->push_back(name);
      } else if (key == "items") {
        *mine = intersect(*mine, value, path + ".items");
      } else if (key == "enum") {
        if (!mine->is_array() || !value.is_array()) throw unsupported(path + ".enum", "expected a non-empty array");
        json common = json::array();
        for (const json& v : *mine)
          if (std::find(value.begin(), value.end(), v) != value.end()) common.push_back(v);
        if (common.empty()) throw Unsatisfiable(path + ".enum", "the merged 'enum' lists share no value");
        *mine = common;
      } else if (key == "const") {
        if (*mine != value) throw Unsatisfiable(path + ".const", "the merged schemas have different 'const' values");
      } else if (key == "pattern") {
        if (*mine != value)
          throw unsupported(path + ".pattern", "two different patterns (" + mine->dump() + " and " + value.dump() +
                                                   ") on one string cannot be combined");
      } else if (key == "anyOf" || key == "oneOf") {
        // Both sides choose: the second choice waits in allOf until the first is distributed.
        if (!out.contains("allOf")) out["allOf"] = json::array();
        out["allOf"].push_back(json{{key, value}});
      } else if (key == "allOf") {
        if (!mine->is_array() || !value.is_array()) throw unsupported(path + ".allOf", "expected a non-empty array of schemas");
        mine->insert(mine->end(), value.begin(), value.end());
      }
    }
    intersect_members(a, b, &out, path);
    return out;
  }

  // properties and additionalProperties of two merged object schemas: a member both list is both
  // schemas', a member one lists and the other closes (additionalProperties false) is left out
  // (nothing matches if it is required), and one side's additionalProperties schema binds the
  // other side's members it does not list.
  void intersect_members(const json& a, const json& b, json* out, const std::string& path) {
    const auto properties_of = [&](const json& schema) {
      auto it = schema.find("properties");
      if (it == schema.end()) return json::object();
      if (!it->is_object()) throw unsupported(path + ".properties", "expected an object");
      return *it;
    };
    const auto additional_of = [](const json& schema) { return schema.value("additionalProperties", json(true)); };
    bool is_object_bound = false;
    for (const char* key : {"properties", "additionalProperties"}) is_object_bound = is_object_bound || a.contains(key) || b.contains(key);
    if (!is_object_bound) return;
    const json& required = out->contains("required") ? (*out)["required"] : json::array();
    json properties = json::object();
    const auto merge_side = [&](const json& mine, const json& theirs, const json& their_additional) {
      for (const auto& [name, schema] : mine.items()) {
        const std::string member_path = path + ".properties." + name;
        if (properties.contains(name)) continue;
        if (theirs.contains(name)) {
          properties[name] = intersect(schema, theirs.at(name), member_path);
        } else if (their_additional == false) {
          if (std::find(required.begin(), required.end(), name) != required.end())
            throw Unsatisfiable(member_path, "'" + name + "' is required, but one merged schema allows no such member");
        } else {
          properties[name] = their_additional == true ? schema : intersect(schema, their_additional, member_path);
        }
      }
    };
    const json properties_a = properties_of(a), properties_b = properties_of(b);
    const json additional_a = additional_of(a), additional_b = additional_of(b);
    merge_side(properties_a, properties_b, additional_b);
    merge_side(properties_b, properties_a, additional_a);
    if (a.contains("properties") || b.contains("properties")) (*out)["properties"] = properties;
    if (additional_a == false || additional_b == false) (*out)["additionalProperties"] = false;
    else if (additional_a == true || additional_b == true) (*out)["additionalProperties"] = additional_a == true ? additional_b : additional_a;
    else (*out)["additionalProperties"] = intersect(additional_a, additional_b, path + ".additionalProperties");
    if ((*out)["additionalProperties"] == true) out->erase("additionalProperties");
  }

  // The types both allow ("integer" within "number").
  static json type_intersection(const json& a, const json& b, const std::string& path) {
    const auto names = [&](const json& type) {
      std::vector<std::string> out;
      for (const json& name : type.is_array() ? type : json::array({type})) {
        if (!name.is_string()) throw unsupported(path, "expected a type name or a list of them");
        out.push_back(name.get<std::string>());
      }
      return out;
    };
    std::vector<std::string> common;
    for (const std::string& x : names(a))
      for (const std::string& y : names(b)) {
        const bool is_integer_in_number = (x == "integer" && y == "number") || (x == "number" && y == "integer");
        const std::string type = x == y ? x : is_integer_in_number ? "integer" : "";
        if (!type.empty() && std::find(common.begin(), common.end(), type) == common.end()) common.push_back(type);
      }
    if (common.empty()) throw Unsatisfiable(path, "the merged schemas share no type (" + a.dump() + " and " + b.dump() + ")");
    return common.size() == 1 ? json(common[0]) : json(common);
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
    const int64_t min = count(schema, "minLength", path, 0);
    const int64_t max = count(schema, "maxLength", path, -1);
    if (max >= 0 && max < min) throw Unsatisfiable(path + ".maxLength", "maxLength is below minLength");
    if (auto pattern = schema.find("pattern"); pattern != schema.end()) {
      if (!pattern->is_string()) throw unsupported(path + ".pattern", "expected a string");
      if (min == 0 && max < 0)
        return new_rule("\"\\\"\" " + pattern_gbnf(pattern->get<std::string>(), path + ".pattern") + " \"\\\"\"");
      // The pattern's rules take the name the next rule would have, with a suffix no other rule has.
      const std::string name = prefix_ + std::to_string(rules_.size()) + "-length";
      const std::string rules = pattern_with_length_gbnf(pattern->get<std::string>(), min, max, name, path + ".pattern");
      if (rules.empty()) throw Unsatisfiable(path + ".pattern", "no string within minLength/maxLength matches the pattern");
      rules_.push_back(rules.substr(0, rules.size() - 1));  // rules() ends each entry with a newline
      return new_rule("\"\\\"\" " + name + "-0 \"\\\"\"");
    }
    if (min == 0 && max < 0) return "json-string";
    return new_rule("\"\\\"\" " + repeat("json-char", min, max) + " \"\\\"\"");
  }

  std::string array(const json& schema, const std::string& path) {
    const std::string item = schema.contains("items") ? visit(schema["items"], path + ".items") : "json-value";
    const int64_t min = count(schema, "minItems", path, 0);
    const int64_t max = count(schema, "maxItems", path, -1);
    if (max >= 0 && max < min) throw Unsatisfiable(path + ".maxItems", "maxItems is below minItems");
    if (!schema.contains("items") && min == 0 && max < 0) return "json-array";
    if (max == 0) return "\"[\" ws \"]\"";
    const std::string first = item + " ws";
    const std::string rest = repeat("\",\" ws " + item + " ws", std::max<int64_t>(min - 1, 0), max < 0 ? -1 : max - 1);
    const std::string items = first + " " + rest;
    return new_rule("\"[\" ws " + (min == 0 ? "(" + items + ")?" : items) + " \"]\"");
  }

  std::string object(const json& schema, const std::string& path) {
    auto additional = schema.find("additionalProperties");
    if (!has_properties(schema, path)) {
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

  // Whether an object schema lists members: 'properties' is a non-empty object ([] or null is no
  // empty list, but a mistake named like any other).
  static bool has_properties(const json& schema, const std::string& path) {
    auto properties = schema.find("properties");
    if (properties == schema.end()) return false;
    if (!properties->is_object()) throw unsupported(path + ".properties", "expected an object");
    return !properties->empty();
  }

  // The members of an object schema with 'properties', in the order the client gave them (no
  // others are written); an optional one may be left out. `member` writes one, `separator` goes
  // between two. tail[i][after]: the members from i on, `after` = a member precedes (so the next
  // needs the separator).
  template <typename MemberWriter>
  std::string members(const json& schema, const std::string& path, const std::string& separator,
                      const MemberWriter& member) {
    const json& properties = schema.at("properties");
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
    if (schema.contains("enum") || schema.contains("const")) values = allowed_values(schema, path);
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

  // The definition a local $ref names, and its path.
  std::pair<const json*, std::string> definition(const json& ref, const std::string& path) const {
    if (!ref.is_string()) throw unsupported(path, "expected a string");
    const std::string target = ref.get<std::string>();
    for (const std::string container : {"$defs", "definitions"}) {
      const std::string prefix = "#/" + container + "/";
      if (target.rfind(prefix, 0) != 0) continue;
      const std::string name = target.substr(prefix.size());
      if (!root_.is_object() || !root_.contains(container) || !root_.at(container).contains(name))
        throw unsupported(path, "the reference '" + target + "' names no definition");
      return {&root_.at(container).at(name), root_path_ + "." + container + "." + name};
    }
    throw unsupported(path, "only references into '#/$defs/' or '#/definitions/' are supported");
  }

  std::string reference(const json& ref, const std::string& path) {
    const auto [schema, schema_path] = definition(ref, path);
    return named_rule(ref.dump(), *schema, schema_path);
  }

  // The rule for `schema`, made once per `key`: named before it is visited, so a recursive
  // definition refers to itself.
  std::string named_rule(const std::string& key, const json& schema, const std::string& path) {
    if (auto found = refs_.find(key); found != refs_.end()) return found->second;
    const std::string rule = prefix_ + std::to_string(rules_.size());
    rules_.push_back("");
    refs_[key] = rule;
    const size_t slot = rules_.size() - 1;
    const std::string body = visit(schema, path);
    rules_[slot] = rule + " ::= " + body;
    return rule;
  }

  const json& root_;
  std::string root_path_;
  int depth_ = 0;  // visit()s in progress
  bool is_validating_ = false;  // checking values (JSON Schema's reading), not writing replies
  std::string prefix_;
  std::vector<std::string> rules_;
  std::map<std::string, std::string> refs_;  // a $ref (with its siblings, if any) -> its rule
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
      const std::string arguments = converter.object_value();
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
