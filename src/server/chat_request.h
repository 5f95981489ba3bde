// The chat-only part of a request: messages (the developer role, assistant tool calls, tool
// results), tools and tool_choice, the reasoning switches; and the table of OpenAI fields this
// server refuses by name rather than drop.
#pragma once
#include <string_view>

#include "server/field_reader.h"
#include "server/openai_protocol.h"

namespace tf::server {

// messages, tools, tool_choice, parallel_tool_calls, chat_template_kwargs, reasoning_effort.
void parse_chat_fields(const FieldReader& fields, const ProtocolLimits& limits, CompletionRequest& request);

// The tools and tool calls' arguments of a parsed chat request, read again from its body's text as
// Python's json.loads (the reference's) reads them, when they hold a number nlohmann read as a
// double: an integer past 64 bits is one, and its digits must reach the prompt as the client wrote
// them. Arguments given as a string were read that way by parse_chat_fields already.
void keep_numbers_as_written(std::string_view body_text, CompletionRequest& request);

// A field OpenAI (or the vLLM extensions clients send) defines that this server does not honour
// answers 400 naming it.
void refuse_unsupported_fields(const FieldReader& fields, Endpoint endpoint);

}  // namespace tf::server
