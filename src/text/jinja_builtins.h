// Built-in filters and tests of jinja2 that chat templates use, plus transformers' own `tojson`
// (json.dumps with ensure_ascii=False and the indent/separators/sort_keys keywords) instead of
// jinja2's HTML-safe one. Names are checked when a template is parsed, as jinja2 does.
#pragma once

#include <string>

#include "text/jinja_value.h"

namespace tf::jinja {

bool has_filter(const std::string& name);
Value apply_filter(const std::string& name, const Value& input, CallArgs& args);

bool has_test(const std::string& name);
bool apply_test(const std::string& name, const Value& input, CallArgs& args);

}  // namespace tf::jinja
