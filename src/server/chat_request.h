// The chat-only part of a request: messages (the developer role, assistant tool calls, tool
// results), tools and tool_choice, the reasoning switches; and the table of OpenAI fields this
// server refuses by name rather than drop.
#pragma once
#include "server/field_reader.h"
#include "server/openai_protocol.h"

namespace tf::server {

// messages, tools, tool_choice, parallel_tool_calls, chat_template_kwargs, reasoning_effort.
void parse_chat_fields(const FieldReader& fields, const ProtocolLimits& limits, CompletionRequest& request);

// A field OpenAI (or the vLLM extensions clients send) defines that this server does not honour
// answers 400 naming it.
void refuse_unsupported_fields(const FieldReader& fields, Endpoint endpoint);

}  // namespace tf::server
