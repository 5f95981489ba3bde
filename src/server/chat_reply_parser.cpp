// The reply parser: a small state machine over the reply's text. It releases text only once no
// later text can change what that text is (a possible tag start, or whitespace whose fate depends
// on what follows, is held), so every way of cutting a reply into pieces releases the same whole.
#include "server/chat_reply_parser.h"

#include "core/json_nesting.h"
#include "tokenizer/python_json.h"

namespace tf::server {
namespace {

constexpr std::string_view think_open = "<think>";
constexpr std::string_view think_close = "</think>";
constexpr std::string_view call_open = "<tool_call>";
constexpr std::string_view call_close = "</tool_call>";
constexpr std::string_view function_open = "<function=";
constexpr std::string_view function_close = "</function>";
constexpr std::string_view parameter_open = "<parameter=";
constexpr std::string_view parameter_close = "</parameter>";

std::string_view rstrip_newlines(std::string_view s) {
  while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// Length of the longest suffix of `text` that is a proper prefix of `tag`: text that may yet
// become the tag.
size_t partial_tag_suffix(std::string_view text, std::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n)
    if (tag.starts_with(text.substr(text.size() - n))) return n;
  return 0;
}

bool is_proper_prefix(std::string_view text, std::string_view tag) {
  return text.size() < tag.size() && tag.starts_with(text);
}

size_t skip_space(std::string_view text, size_t from) {
  while (from < text.size() && is_space(text[from])) ++from;
  return from;
}

// The first `tag` outside a JSON string literal (a call's arguments may quote the closing tag).
size_t find_outside_json_strings(std::string_view text, std::string_view tag) {
  JsonStringTracker tracker;
  for (size_t i = 0; i < text.size(); ++i)
    if (tracker.is_outside_strings(text[i]) && text.substr(i).starts_with(tag)) return i;
  return std::string_view::npos;
}

}  // namespace

void ReplyPiece::append(ReplyPiece&& later) {
  reasoning += later.reasoning;
  content += later.content;
  for (ToolCallDelta& delta : later.tool_calls) tool_calls.push_back(std::move(delta));
}

void AssembledReply::add(const ReplyPiece& piece) {
  reasoning += piece.reasoning;
  content += piece.content;
  for (const ToolCallDelta& delta : piece.tool_calls) {
    if (delta.index == int(tool_calls.size())) tool_calls.push_back({delta.id.value_or(""), delta.name.value_or(""), ""});
    tool_calls[size_t(delta.index)].arguments += delta.arguments;
  }
}

ChatReplyParser::ChatReplyParser(ReplyParserOptions options) : options_(std::move(options)) {
  if (!options_.parses_reasoning) {
    mode_ = Mode::content;
  } else if (options_.starts_in_reasoning) {
    mode_ = Mode::reasoning;
    is_skipping_newlines_ = true;
  } else {
    mode_ = Mode::start;
  }
}

ReplyPiece ChatReplyParser::push(std::string_view text) {
  pending_ += text;
  return drain(false);
}

ReplyPiece ChatReplyParser::finish() {
  return drain(true);
}

ReplyPiece ChatReplyParser::drain(bool is_final) {
  ReplyPiece out;
  for (bool is_progressing = true; is_progressing;) {
    switch (mode_) {
      case Mode::start: is_progressing = step_start(is_final, out); break;
      case Mode::reasoning: is_progressing = step_reasoning(is_final, out); break;
      case Mode::content: is_progressing = step_content(is_final, out); break;
      case Mode::json_call: is_progressing = step_json_call(is_final, out); break;
      case Mode::xml_call: is_progressing = step_xml_call(is_final, out); break;
    }
  }
  // Whitespace held at the end is the template's before or after a call; a reply without calls
  // keeps it, as without tools.
  if (is_final && n_tool_calls_ == 0) out.content += held_space_;
  if (is_final) held_space_.clear();
  return out;
}

// Qwen3 writes <think> itself: a reply that opens with it reasons first.
bool ChatReplyParser::step_start(bool is_final, ReplyPiece&) {
  if (pending_.starts_with(think_open)) {
    pending_.erase(0, think_open.size());
    mode_ = Mode::reasoning;
    is_skipping_newlines_ = true;
    return true;
  }
  if (!is_final && is_proper_prefix(pending_, think_open)) return false;
  mode_ = Mode::content;
  return true;
}

bool ChatReplyParser::step_reasoning(bool is_final, ReplyPiece& out) {
  if (is_skipping_newlines_) {
    const size_t n = pending_.find_first_not_of('\n');
    pending_.erase(0, n == std::string::npos ? pending_.size() : n);
    if (pending_.empty()) return false;
    is_skipping_newlines_ = false;
  }
  const size_t close = pending_.find(think_close);
  if (close != std::string::npos) {
    out.reasoning += rstrip_newlines(std::string_view(pending_).substr(0, close));
    pending_.erase(0, close + think_close.size());
    mode_ = Mode::content;
    is_skipping_newlines_ = true;
    return true;
  }
  if (is_final) {
    out.reasoning += pending_;
    pending_.clear();
    return false;
  }
  // Hold a possible "</think>" start and the newlines before it (they are dropped before the tag).
  size_t keep_from = pending_.size() - partial_tag_suffix(pending_, think_close);
  while (keep_from > 0 && pending_[keep_from - 1] == '\n') --keep_from;
  out.reasoning += pending_.substr(0, keep_from);
  pending_.erase(0, keep_from);
  return false;
}

void ChatReplyParser::emit_content(std::string_view text, ReplyPiece& out) {
  if (!options_.parses_tool_calls) {
    out.content += text;
    return;
  }
  held_space_ += text;
  size_t end = held_space_.size();
  while (end > 0 && is_space(held_space_[end - 1])) --end;
  out.content += held_space_.substr(0, end);
  held_space_.erase(0, end);
}

bool ChatReplyParser::step_content(bool is_final, ReplyPiece& out) {
  if (is_skipping_newlines_) {
    const size_t n = pending_.find_first_not_of('\n');
    pending_.erase(0, n == std::string::npos ? pending_.size() : n);
    if (pending_.empty() && !is_final) return false;
    is_skipping_newlines_ = false;
  }
  if (!options_.parses_tool_calls) {
    out.content += pending_;
    pending_.clear();
    return false;
  }
  const size_t open = pending_.find(call_open);
  if (open != std::string::npos) {
    emit_content(std::string_view(pending_).substr(0, open), out);
    space_before_call_ = std::move(held_space_);  // whitespace before a call is the template's, not content
    held_space_.clear();
    pending_.erase(0, open + call_open.size());
    mode_ = options_.family == ChatTemplateFamily::qwen3_5 ? Mode::xml_call : Mode::json_call;
    xml_step_ = XmlStep::function_name;
    xml_call_text_.clear();
    return true;
  }
  const size_t keep = is_final ? 0 : partial_tag_suffix(pending_, call_open);
  emit_content(std::string_view(pending_).substr(0, pending_.size() - keep), out);
  pending_.erase(0, pending_.size() - keep);
  return false;
}

// Qwen3: {"name": ..., "arguments": {...}} inside the tags, released once the block is whole (JSON
// can only be checked complete); a block that is not such an object stays text.
bool ChatReplyParser::step_json_call(bool is_final, ReplyPiece& out) {
  const size_t close = find_outside_json_strings(pending_, call_close);
  if (close == std::string::npos) {
    if (!is_final) return false;
    emit_content(space_before_call_ + std::string(call_open) + pending_, out);  // cut before its end: not a call
    pending_.clear();
    mode_ = Mode::content;
    return true;
  }
  const std::string block = pending_.substr(0, close);
  pending_.erase(0, close + call_close.size());
  mode_ = Mode::content;
  // A reply is the model's text: JSON in it nested past the bound stays text, never a call.
  const auto call = json_nesting_depth(block) > kMaxJsonNesting
                        ? nlohmann::ordered_json(nlohmann::ordered_json::value_t::discarded)
                        : python_json_loads_or_discarded(block);
  const bool is_call = call.is_object() && call.contains("name") && call["name"].is_string() &&
                       call.contains("arguments") && (call["arguments"].is_object() || call["arguments"].is_string());
  if (!is_call) {
    emit_content(space_before_call_ + std::string(call_open) + block + std::string(call_close), out);
    return true;
  }
  const auto& arguments = call["arguments"];
  ToolCallDelta delta;
  delta.index = n_tool_calls_;
  delta.id = options_.tool_call_id_prefix + std::to_string(n_tool_calls_);
  delta.name = call["name"].get<std::string>();
  delta.arguments = arguments.is_string() ? arguments.get<std::string>() : python_json_dumps(arguments);
  out.tool_calls.push_back(std::move(delta));
  ++n_tool_calls_;
  return true;
}

std::string ChatReplyParser::parameter_json(const std::string& key, const std::string& value) const {
  std::string type;
  if (const auto tool = options_.parameter_types.find(xml_function_); tool != options_.parameter_types.end())
    if (const auto parameter = tool->second.find(key); parameter != tool->second.end()) type = parameter->second;
  std::string value_json;
  if (type != "string" && json_nesting_depth(value) <= kMaxJsonNesting) {
    const auto parsed = python_json_loads_or_discarded(value);
    if (!parsed.is_discarded()) value_json = python_json_dumps(parsed);
  }
  if (value_json.empty()) value_json = python_json_dumps(value);
  return python_json_dumps(key) + ": " + value_json;
}

// Qwen3.5-class: <function=NAME> then <parameter=KEY>\nVALUE\n</parameter> pairs. Like a JSON call,
// the call goes out whole, at </function>: a reply cut before it (budget, stop string) released
// no part of a call, so its text is given back as content, streamed or not.
bool ChatReplyParser::step_xml_call(bool is_final, ReplyPiece& out) {
  const auto consume = [&](size_t n) {  // the call's text, kept until the call is whole
    xml_call_text_.append(pending_, 0, n);
    pending_.erase(0, n);
  };
  const auto abandon = [&] {  // the reply ended inside the call: what it wrote is text
    emit_content(space_before_call_ + std::string(call_open) + xml_call_text_ + pending_, out);
    pending_.clear();
    mode_ = Mode::content;
  };
  switch (xml_step_) {
    case XmlStep::function_name: {
      const size_t at = skip_space(pending_, 0);
      const std::string_view rest = std::string_view(pending_).substr(at);
      const size_t end = rest.starts_with(function_open) ? rest.find('>') : std::string_view::npos;
      if (end == std::string_view::npos) {
        const bool may_still_be_call = rest.starts_with(function_open) || is_proper_prefix(rest, function_open);
        if (!is_final && may_still_be_call) return false;
        abandon();  // no <function=...> after <tool_call>: the block is text
        return true;
      }
      xml_function_ = std::string(rest.substr(function_open.size(), end - function_open.size()));
      consume(at + end + 1);
      xml_arguments_.clear();
      xml_seen_parameters_.clear();
      xml_step_ = XmlStep::between_parameters;
      return true;
    }
    case XmlStep::between_parameters: {
      const size_t at = skip_space(pending_, 0);
      const std::string_view rest = std::string_view(pending_).substr(at);
      if (rest.starts_with(parameter_open)) {
        const size_t end = rest.find('>');
        if (end == std::string_view::npos) {
          if (!is_final) return false;
          abandon();
          return true;
        }
        xml_parameter_ = std::string(rest.substr(parameter_open.size(), end - parameter_open.size()));
        consume(at + end + 1);
        xml_step_ = XmlStep::parameter_value;
        return true;
      }
      if (rest.starts_with(function_close)) {
        pending_.erase(0, at + function_close.size());
        out.tool_calls.push_back({n_tool_calls_, options_.tool_call_id_prefix + std::to_string(n_tool_calls_),
                                  xml_function_, xml_arguments_.empty() ? "{}" : xml_arguments_ + "}"});
        ++n_tool_calls_;
        xml_step_ = XmlStep::after_function;
        return true;
      }
      if (!is_final && (rest.empty() || is_proper_prefix(rest, parameter_open) || is_proper_prefix(rest, function_close)))
        return false;
      if (is_final) {
        abandon();
        return true;
      }
      // Stray text between parameters carries nothing the call needs: skip to the next tag.
      const size_t next_tag = rest.find('<', 1);
      consume(next_tag == std::string_view::npos ? pending_.size() : at + next_tag);
      return true;
    }
    case XmlStep::parameter_value: {
      const size_t close = pending_.find(parameter_close);
      if (close == std::string::npos) {
        if (!is_final) return false;
        abandon();
        return true;
      }
      std::string_view value = std::string_view(pending_).substr(0, close);
      if (value.starts_with('\n')) value.remove_prefix(1);  // the template writes "\n" VALUE "\n"
      if (value.ends_with('\n')) value.remove_suffix(1);
      // A parameter written twice keeps its first value: arguments stay a JSON object of unique keys.
      if (xml_seen_parameters_.insert(xml_parameter_).second)
        xml_arguments_ += (xml_arguments_.empty() ? "{" : ", ") + parameter_json(xml_parameter_, std::string(value));
      consume(close + parameter_close.size());
      xml_step_ = XmlStep::between_parameters;
      return true;
    }
    case XmlStep::after_function: {
      const size_t at = skip_space(pending_, 0);
      const std::string_view rest = std::string_view(pending_).substr(at);
      if (rest.starts_with(call_close)) {
        pending_.erase(0, at + call_close.size());
        mode_ = Mode::content;
        return true;
      }
      if (!is_final && (rest.empty() || is_proper_prefix(rest, call_close))) return false;
      mode_ = Mode::content;  // no closing tag: what follows is content
      return true;
    }
  }
  return false;
}

}  // namespace tf::server
