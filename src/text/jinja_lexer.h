// Jinja lexer. Splits template source into text and tag tokens the way jinja2's lexer does, since
// the exact whitespace of a chat template is part of the prompt the model was trained on:
//  - newlines (\r\n, \r, \n) become \n and one trailing newline is dropped (keep_trailing_newline=False);
//  - `{%-`/`{{-`/`{#-` strip all whitespace before the tag, `-%}`/`-}}`/`-#}` all whitespace after;
//  - trim_blocks drops the first \n after a block or comment tag (not after `}}`);
//  - lstrip_blocks drops the whitespace between a line start and a block or comment tag; `{%+` opts out;
//  - `{% raw %}...{% endraw %}` is text;
//  - whitespace is Python's (str.isspace: also U+00A0, U+3000, U+2028, ...), in the strips and in tags;
//  - names may be Unicode identifiers (`{% set café = 1 %}`), as str.isidentifier accepts them.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tf::jinja {

enum class TokenType {
  kText,        // template data between tags
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,  // value already unescaped
  kInteger,
  kFloat,
  kOperator,  // + - * / // % ** ~ [ ] ( ) { } == != > >= < <= = . : | , ;
  kEof,
};

struct Token {
  TokenType type;
  std::string value;
  int line;
  int column;
};

struct LexerOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

// Throws JinjaError (with line and column) on an unterminated tag or string.
std::vector<Token> tokenize(std::string_view source, const LexerOptions& options);

}  // namespace tf::jinja
