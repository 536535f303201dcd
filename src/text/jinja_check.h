// The checks jinja2 makes when it compiles a template, before anything renders: an unknown filter or
// test fails unless it sits in an `if` or a conditional expression (there it fails only when applied),
// `break`/`continue` must be inside a loop of the same macro, and a macro names each parameter once.
#pragma once

#include "text/jinja_ast.h"

namespace tf::jinja {

// Throws JinjaError (with line and column) for the first violation.
void check_template(const Body& body);

}  // namespace tf::jinja
