// A chat reply's text split into what OpenAI clients read: reasoning_content (the <think> block),
// content, and tool_calls (Qwen3's JSON in <tool_call>, or the Qwen3.5-class
// <function=NAME><parameter=KEY> XML). Incremental: text may arrive in pieces cut anywhere, even
// inside a tag, and what it releases does not depend on the cuts (a whole reply is one push).
// Tool calls are released only whole, never a call the reply did not finish.
#pragma once
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/chat_template.h"

namespace tf::server {

// One OpenAI tool-call delta: id and name come once, with the call's first piece; arguments are
// fragments of the arguments' JSON text, in order.
struct ToolCallDelta {
  int index = 0;
  std::optional<std::string> id;
  std::optional<std::string> name;
  std::string arguments;
};

// What a piece of reply text releases.
struct ReplyPiece {
  std::string reasoning;
  std::string content;
  std::vector<ToolCallDelta> tool_calls;
  bool is_empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
  void append(ReplyPiece&& later);  // later's text after this one's; tool-call deltas in order
};

// A whole reply's tool call, deltas assembled.
struct AssembledToolCall {
  std::string id;
  std::string name;
  std::string arguments;
};

struct ReplyParserOptions {
  ChatTemplateFamily family = ChatTemplateFamily::none;
  bool starts_in_reasoning = false;  // the prompt opened <think> (Qwen3.5-class, thinking on)
  bool parses_reasoning = false;     // split <think> blocks into reasoning (templates with thinking)
  bool parses_tool_calls = false;    // tools were offered and tool_choice is not "none"
  std::string tool_call_id_prefix = "call_";  // call i gets prefix + i
  // Each tool's parameter types (tool name -> parameter name -> JSON schema "type"), so that an XML
  // parameter the schema calls a string stays a string and the others are read as JSON.
  std::map<std::string, std::map<std::string, std::string>> parameter_types;
};

class ChatReplyParser {
 public:
  explicit ChatReplyParser(ReplyParserOptions options);
  ReplyPiece push(std::string_view text);
  // The reply ended (by itself, a stop string or its budget): whatever was held back is released as
  // what it is. A call goes out only whole (Qwen3's at </tool_call>, the XML one at </function>), so
  // a call the reply did not finish is text, content, in a stream as in a whole reply.
  ReplyPiece finish();
  int n_tool_calls() const { return n_tool_calls_; }
  bool is_inside_tool_call() const { return mode_ == Mode::json_call || mode_ == Mode::xml_call; }

 private:
  enum class Mode { start, reasoning, content, json_call, xml_call };
  enum class XmlStep { function_name, between_parameters, parameter_value, after_function };

  ReplyPiece drain(bool is_final);
  bool step_start(bool is_final, ReplyPiece& out);
  bool step_reasoning(bool is_final, ReplyPiece& out);
  bool step_content(bool is_final, ReplyPiece& out);
  bool step_json_call(bool is_final, ReplyPiece& out);
  bool step_xml_call(bool is_final, ReplyPiece& out);
  void emit_content(std::string_view text, ReplyPiece& out);
  std::string parameter_json(const std::string& key, const std::string& value) const;

  ReplyParserOptions options_;
  Mode mode_;
  std::string pending_;          // text not yet released
  bool is_skipping_newlines_ = false;  // drop '\n' at the start of a block (after <think>, </think>)
  std::string held_space_;       // content whitespace held while tools are parsed (dropped before a call)
  std::string space_before_call_;  // that whitespace, given back if the "call" turns out to be text
  int n_tool_calls_ = 0;
  // The XML call in progress, held until </function>.
  XmlStep xml_step_ = XmlStep::function_name;
  std::string xml_call_text_;  // the text read after <tool_call>: content again if the call is cut
  std::string xml_function_;
  std::string xml_parameter_;
  std::string xml_arguments_;  // the arguments' JSON so far, without its closing brace
  std::set<std::string> xml_seen_parameters_;  // this call's parameter names so far
};

// Folds a reply's pieces into its whole: (reasoning, content, tool calls).
struct AssembledReply {
  std::string reasoning;
  std::string content;
  std::vector<AssembledToolCall> tool_calls;
  void add(const ReplyPiece& piece);
};

}  // namespace tf::server
