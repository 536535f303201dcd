// Reasoning items of the Responses API, both ways.
//
// In: a reasoning item a client sends back (an earlier reply's) carries the text of the
// assistant turn that follows it: its reasoning_text parts, else its summary parts, else
// the encrypted_content this server handed out. The chat template then renders that turn as
// the model wrote it (GLM's keeps earlier reasoning unless clear_thinking), as a chat
// client sending reasoning_content gets.
// Out: with include ["reasoning.encrypted_content"] (clients that keep no state, store
// false, such as Codex) each reasoning item carries encrypted_content, an opaque string that
// holds the item's text. It is no secret (the text is in the item's content too); another
// provider's encrypted_content is not readable here and counts as no text.
#pragma once

#include <optional>
#include <string>

#include "server/json_fields.h"

namespace tf::server {

// The encrypted_content of a reasoning item holding `text`.
std::string reasoning_encrypted_content(const std::string& text);

// The text of a reasoning input item (`param` names it in errors): nullopt when it carries
// none this server can read.
std::optional<std::string> reasoning_item_text(const Json& item, const std::string& param);

}  // namespace tf::server
