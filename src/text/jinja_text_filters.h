// jinja2's text filters: urlencode, xmlattr, wordwrap and urlize, each as jinja2 3.1 writes it
// (jinja_filters.cc registers them under those names).
#pragma once

#include "text/jinja_value.h"

namespace tf::jinja {

Value urlencode_filter(const Value& v);
Value xmlattr_filter(const Value& v, CallArgs& args);
Value wordwrap_filter(const Value& v, CallArgs& args);
Value urlize_filter(const Value& v, CallArgs& args);

}  // namespace tf::jinja
