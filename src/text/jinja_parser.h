// Jinja parser: tokens (jinja_lexer.h) to a statement tree (jinja_ast.h), following the grammar of
// jinja2.parser (operator precedence, `is` tests, filters, statements). Throws JinjaError with the
// line and column of the offending token.
#pragma once

#include <vector>

#include "text/jinja_ast.h"
#include "text/jinja_lexer.h"

namespace tf::jinja {

Body parse(const std::vector<Token>& tokens);

}  // namespace tf::jinja
