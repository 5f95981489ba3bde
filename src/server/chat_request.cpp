// Chat fields: messages with tool calls and tool results, tools, tool_choice and the reasoning
// switches, each checked against what the model's chat template can render.
#include "server/chat_request.h"

#include <set>

#include "core/json_error_text.h"
#include "core/json_nesting.h"
#include "tokenizer/python_json.h"

namespace tf::server {
namespace {

std::string message_content(const json& message, const std::string& param, const std::string& role) {
  auto it = message.find("content");
  if (it == message.end() || it->is_null()) {
    if (role == "assistant") return "";  // e.g. a tool-call turn
    throw invalid(param + ".content", "Missing required parameter: '" + param + ".content'.");
  }
  if (it->is_string()) return it->get<std::string>();
  if (!it->is_array())
    throw invalid(param + ".content", "Invalid type for '" + param +
                                          ".content': expected a string or an array of "
                                          "content parts, but got " +
                                          it->type_name() + " instead.");
  std::string text;
  for (size_t i = 0; i < it->size(); ++i) {
    const json& part = (*it)[i];
    const std::string part_param = param + ".content[" + std::to_string(i) + "]";
    if (!part.is_object() || part.value("type", json()) != "text" ||
        !part.contains("text") || !part["text"].is_string())
      throw invalid(part_param, "Invalid '" + part_param +
                                    "': only content parts of the form {\"type\": \"text\", "
                                    "\"text\": \"...\"} are supported.");
    text += part["text"].get<std::string>();
  }
  return text;
}

// An assistant message's tool_calls. Qwen3 writes a string of arguments as it is; a Qwen3.5-class
// template writes one <parameter> per key, so there the string must hold a JSON object.
std::vector<ChatToolCall> parse_tool_calls(const json& calls, const std::string& param, ChatTemplateFamily family) {
  std::vector<ChatToolCall> parsed;
  for (size_t j = 0; j < calls.size(); ++j) {
    const std::string call_param = param + "[" + std::to_string(j) + "]";
    if (!calls[j].is_object())
      throw invalid(call_param, "Invalid type for '" + call_param + "': expected an object.");
    const FieldReader call_fields(calls[j], call_param + ".");
    if (auto type = call_fields.string("type"); type && *type != "function")
      throw invalid(call_param + ".type", "Invalid value for '" + call_param + ".type': only 'function' is supported.");
    const json* function = call_fields.object("function");
    if (!function) throw invalid(call_param + ".function", "Missing required parameter: '" + call_param + ".function'.");
    const FieldReader function_fields(*function, call_param + ".function.");
    ChatToolCall call;
    call.id = call_fields.string("id").value_or("");
    const std::optional<std::string> name = function_fields.string("name");
    if (!name || name->empty())
      throw invalid(call_param + ".function.name", "Missing required parameter: '" + call_param + ".function.name'.");
    call.name = *name;
    const std::string arguments_param = call_param + ".function.arguments";
    const json* arguments = function_fields.find("arguments");
    if (!arguments) throw invalid(arguments_param, "Missing required parameter: '" + arguments_param + "'.");
    if (!arguments->is_string() && !arguments->is_object())
      function_fields.wrong_type("arguments", "a JSON string (or an object)");
    call.arguments = *arguments;
    if (family == ChatTemplateFamily::qwen3_5 && arguments->is_string()) {
      const std::string& text = arguments->get_ref<const std::string&>();
      if (json_nesting_depth(text) > kMaxJsonNesting)
        throw invalid(arguments_param, "Invalid '" + arguments_param + "': the arguments nest deeper than " +
                                           std::to_string(kMaxJsonNesting) + " levels.");
      try {
        call.arguments = python_json_loads(text);  // read as the reference reads them: big integers whole
      } catch (const std::exception& error) {  // say why (a number past a double's range, say)
        throw invalid(arguments_param, "Invalid '" + arguments_param + "': the arguments are not valid JSON (" +
                                           json_error_text(error.what()) + ").");
      }
      if (!call.arguments.is_object())
        throw invalid(arguments_param, "Invalid '" + arguments_param + "': this model's chat template writes "
                                       "each argument as a parameter, so the arguments must be a JSON object.");
    }
    parsed.push_back(std::move(call));
  }
  return parsed;
}

std::vector<ChatMessage> parse_messages(const FieldReader& fields, ChatTemplateFamily family) {
  const json* messages = fields.find("messages");
  if (!messages) throw invalid("messages", "Missing required parameter: 'messages'.");
  if (!messages->is_array()) fields.wrong_type("messages", "an array");
  if (messages->empty())
    throw invalid("messages", "Invalid 'messages': empty array. Expected an array with "
                              "minimum length 1, but got an empty array instead.");
  std::vector<ChatMessage> parsed;
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& message = (*messages)[i];
    const std::string param = "messages[" + std::to_string(i) + "]";
    if (!message.is_object())
      throw invalid(param, "Invalid type for '" + param + "': expected an object, but got " +
                               message.type_name() + " instead.");
    const FieldReader message_fields(message, param + ".");
    std::optional<std::string> role = message_fields.string("role");
    if (!role) throw invalid(param + ".role", "Missing required parameter: '" + param + ".role'.");
    // Current OpenAI clients send the system prompt as "developer"; the templates know it as system.
    if (*role == "developer") role = "system";
    if (*role != "system" && *role != "user" && *role != "assistant" && *role != "tool")
      throw invalid(param + ".role", "Invalid value: '" + *role + "'. Supported values are: "
                                     "'system', 'developer', 'user', 'assistant' and 'tool'.");
    ChatMessage chat_message;
    chat_message.role = *role;
    chat_message.content = message_content(message, param, *role);
    if (*role == "assistant") {
      chat_message.reasoning_content = message_fields.string("reasoning_content");
      if (const json* calls = message_fields.array("tool_calls"))
        chat_message.tool_calls = parse_tool_calls(*calls, param + ".tool_calls", family);
    } else if (message_fields.find("tool_calls")) {
      throw invalid(param + ".tool_calls", "Invalid '" + param + ".tool_calls': only assistant messages carry tool calls.");
    }
    if (*role == "tool") message_fields.string("tool_call_id");  // checked for type; templates do not write it
    parsed.push_back(std::move(chat_message));
  }
  return parsed;
}

// tools: [{"type": "function", "function": {"name", "description"?, "parameters"?, "strict"?}}],
// kept as sent: the template writes each tool object as JSON.
std::vector<json> parse_tools(const FieldReader& fields) {
  const json* tools = fields.array("tools");
  if (!tools) return {};
  std::vector<json> parsed;
  std::set<std::string> names;
  for (size_t i = 0; i < tools->size(); ++i) {
    const std::string param = "tools[" + std::to_string(i) + "]";
    const json& tool = (*tools)[i];
    if (!tool.is_object()) throw invalid(param, "Invalid type for '" + param + "': expected an object.");
    const FieldReader tool_fields(tool, param + ".");
    const std::optional<std::string> type = tool_fields.string("type");
    if (type != "function")
      throw invalid(param + ".type", "Invalid value for '" + param + ".type': only 'function' tools are supported.");
    const json* function = tool_fields.object("function");
    if (!function) throw invalid(param + ".function", "Missing required parameter: '" + param + ".function'.");
    const FieldReader function_fields(*function, param + ".function.");
    const std::optional<std::string> name = function_fields.string("name");
    if (!name || name->empty())
      throw invalid(param + ".function.name", "Missing required parameter: '" + param + ".function.name'.");
    if (!names.insert(*name).second)
      throw invalid(param + ".function.name", "Invalid '" + param + ".function.name': '" + *name + "' names two tools.");
    function_fields.string("description");
    function_fields.object("parameters");
    function_fields.boolean("strict");
    parsed.push_back(tool);
  }
  return parsed;
}

ToolChoice parse_tool_choice(const FieldReader& fields, const std::vector<json>& tools) {
  const json* choice = fields.find("tool_choice");
  if (!choice) return {};
  ToolChoice parsed;
  if (choice->is_string()) {
    const std::string mode = choice->get<std::string>();
    if (mode == "auto") parsed.mode = ToolChoiceMode::automatic;
    else if (mode == "none") parsed.mode = ToolChoiceMode::none;
    else if (mode == "required") parsed.mode = ToolChoiceMode::required;
    else
      throw invalid("tool_choice", "Invalid value for 'tool_choice': '" + mode +
                                       "'. Supported values are: 'none', 'auto', 'required' or a named function.");
  } else if (choice->is_object()) {
    const FieldReader choice_fields(*choice, "tool_choice.");
    if (choice_fields.string("type") != "function")
      throw invalid("tool_choice.type", "Invalid value for 'tool_choice.type': only 'function' is supported.");
    const json* function = choice_fields.object("function");
    const std::optional<std::string> name = function ? FieldReader(*function, "tool_choice.function.").string("name") : std::nullopt;
    if (!name) throw invalid("tool_choice.function.name", "Missing required parameter: 'tool_choice.function.name'.");
    parsed.mode = ToolChoiceMode::function;
    parsed.function_name = *name;
    bool is_offered = false;
    for (const json& tool : tools) is_offered = is_offered || tool["function"]["name"] == *name;
    if (!is_offered)
      throw invalid("tool_choice.function.name", "Invalid 'tool_choice.function.name': '" + *name + "' is not in 'tools'.");
  } else {
    fields.wrong_type("tool_choice", "a string or an object");
  }
  if ((parsed.mode == ToolChoiceMode::required || parsed.mode == ToolChoiceMode::function) && tools.empty())
    throw invalid("tool_choice", "Invalid 'tool_choice': it asks for a tool call, but 'tools' is empty or missing.");
  return parsed;
}

// chat_template_kwargs and reasoning_effort: both end in the template's enable_thinking.
void parse_reasoning_switches(const FieldReader& fields, const ProtocolLimits& limits, CompletionRequest& request) {
  ChatOptions& options = request.chat_options;
  if (const json* kwargs = fields.object("chat_template_kwargs")) {
    const FieldReader template_fields(*kwargs, "chat_template_kwargs.");
    for (const auto& [key, value] : kwargs->items())
      if (key != "enable_thinking" && key != "preserve_thinking")
        throw invalid("chat_template_kwargs." + key, "Invalid 'chat_template_kwargs': '" + key +
                                                         "' is not a variable of the chat templates this server renders "
                                                         "(it knows 'enable_thinking' and 'preserve_thinking').");
    options.enable_thinking = template_fields.boolean("enable_thinking");
    options.preserve_thinking = template_fields.boolean("preserve_thinking");
  }
  request.reasoning_effort = fields.string("reasoning_effort");
  if (!request.reasoning_effort) return;
  const std::string& effort = *request.reasoning_effort;
  if (effort != "none" && effort != "minimal" && effort != "low" && effort != "medium" && effort != "high")
    throw invalid("reasoning_effort", "Invalid value for 'reasoning_effort': '" + effort +
                                          "'. Supported values are: 'none', 'minimal', 'low', 'medium' and 'high'.");
  // The Qwen templates have one thinking level: any effort but none thinks.
  const bool is_thinking = effort != "none";
  const bool has_thinking = ChatTemplate(limits.chat_family).has_thinking();
  if (is_thinking && !has_thinking)
    throw invalid("reasoning_effort", "Invalid 'reasoning_effort': this model's chat template has no thinking; "
                                      "only 'none' applies.");
  if (options.enable_thinking && *options.enable_thinking != is_thinking)
    throw invalid("reasoning_effort", "'reasoning_effort' '" + effort + "' contradicts 'chat_template_kwargs.enable_thinking' " +
                                          (*options.enable_thinking ? "true" : "false") + ".");
  if (has_thinking) options.enable_thinking = is_thinking;
}

// add_generation_prompt and continue_final_message (vLLM's names): the prompt opens the reply's
// turn, or ends inside the last (assistant) message so the reply continues its text.
void parse_prompt_end(const FieldReader& fields, CompletionRequest& request) {
  ChatOptions& options = request.chat_options;
  options.continue_final_message = fields.boolean("continue_final_message").value_or(false);
  options.add_generation_prompt = fields.boolean("add_generation_prompt").value_or(!options.continue_final_message);
  if (!options.continue_final_message) return;
  if (options.add_generation_prompt)
    throw invalid("continue_final_message", "'continue_final_message' continues the last message, so "
                                            "'add_generation_prompt' must be false.");
  const ChatMessage& last = request.messages.back();
  if (last.role != "assistant" || !last.tool_calls.empty())
    throw invalid("continue_final_message", "'continue_final_message' needs the last message to be an assistant "
                                            "message without tool calls.");
}

bool holds_float(const json& value) {
  if (value.is_number_float()) return true;
  if (!value.is_structured()) return false;
  for (const json& item : value)
    if (holds_float(item)) return true;
  return false;
}

}  // namespace

void keep_numbers_as_written(std::string_view body_text, CompletionRequest& request) {
  bool holds_floats = false;
  for (const json& tool : request.chat_options.tools) holds_floats = holds_floats || holds_float(tool);
  for (const ChatMessage& message : request.messages)
    for (const ChatToolCall& call : message.tool_calls)
      holds_floats = holds_floats || (call.arguments.is_object() && holds_float(call.arguments));
  if (!holds_floats) return;  // no number nlohmann could have rounded: most bodies
  const json written = python_json_loads(body_text);
  for (size_t i = 0; i < request.chat_options.tools.size(); ++i) request.chat_options.tools[i] = written.at("tools").at(i);
  for (size_t i = 0; i < request.messages.size(); ++i) {
    std::vector<ChatToolCall>& calls = request.messages[i].tool_calls;
    for (size_t j = 0; j < calls.size(); ++j) {
      const json& arguments = written.at("messages").at(i).at("tool_calls").at(j).at("function").at("arguments");
      if (arguments.is_object()) calls[j].arguments = arguments;  // a string was read whole already
    }
  }
}

void parse_chat_fields(const FieldReader& fields, const ProtocolLimits& limits, CompletionRequest& request) {
  request.messages = parse_messages(fields, limits.chat_family);
  request.chat_options.tools = parse_tools(fields);
  request.tool_choice = parse_tool_choice(fields, request.chat_options.tools);
  request.parallel_tool_calls = fields.boolean("parallel_tool_calls").value_or(true);
  // tool_choice 'none' leaves the tools out of the prompt, so any template takes them (clients that
  // always send their tools can still talk to a model without tool calls).
  if (!request.chat_options.tools.empty() && request.tool_choice.mode != ToolChoiceMode::none &&
      !ChatTemplate(limits.chat_family).has_tools())
    throw invalid("tools", "Invalid 'tools': this model's chat template has no tool calls (tool_choice 'none' "
                           "leaves them out).");
  parse_reasoning_switches(fields, limits, request);
  parse_prompt_end(fields, request);
}

void refuse_unsupported_fields(const FieldReader& fields, Endpoint endpoint) {
  struct Unsupported {
    const char* field;
    bool is_chat, is_completion;
    const char* instead;
    const char* no_op;  // the value (as JSON text) that asks for nothing, which SDKs send: accepted
  };
  // Known OpenAI fields with no effect here: refused by name rather than silently ignored. (The
  // constraint fields, logit_bias ... prediction, are honoured: constraint_params.)
  static constexpr Unsupported table[] = {
      {"functions", true, false, " (give 'tools')", "[]"},
      {"function_call", true, false, " (give 'tool_choice')", "\"none\""},
      {"audio", true, false, "", nullptr},
      {"web_search_options", true, false, "", nullptr},
      {"verbosity", true, false, "", nullptr},
      {"chat_template", true, false, " (the model's own template is rendered natively)", nullptr},
      {"best_of", false, true, "", "1"},
      {"echo", false, true, "", "false"},
      {"suffix", false, true, "", "\"\""},
  };
  const bool is_chat = endpoint == Endpoint::chat;
  for (const Unsupported& entry : table) {
    if (!(is_chat ? entry.is_chat : entry.is_completion)) continue;
    const json* value = fields.find(entry.field);
    if (!value || (entry.no_op && value->dump() == entry.no_op)) continue;
    throw invalid(entry.field, std::string("'") + entry.field + "' is not supported by this server" + entry.instead + ".");
  }
  // Other servers' multiplicative penalty (vLLM's name, llama.cpp's): not done here, so refused
  // rather than ignored, except at 1 (no penalty).
  for (const char* field : {"repetition_penalty", "repeat_penalty"})
    if (const json* value = fields.find(field); value && !(value->is_number() && value->get<double>() == 1.0))
      throw invalid(field, std::string("'") + field + "' is not supported by this server (give presence_penalty "
                                                      "or frequency_penalty).");
  if (const json* store = fields.find("store"); store && *store == true)
    throw invalid("store", "'store' is not supported by this server: replies are not stored.");
  if (const json* modalities = fields.find("modalities"); modalities && is_chat && *modalities != json::array({"text"}))
    throw invalid("modalities", "Invalid 'modalities': this server writes text only (give [\"text\"]).");
}

}  // namespace tf::server
