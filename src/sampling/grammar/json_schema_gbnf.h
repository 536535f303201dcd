// JSON Schema -> GBNF (grammar.h's dialect), for OpenAI-style structured outputs:
// response_format {type: "json_object"} and {type: "json_schema"}. The grammar's
// sentences are JSON texts; decoding constrained by it yields exactly one JSON value
// (no whitespace before or after it).
//
// Mapping: every schema node becomes one rule, named after where it sits (root,
// root-name, root-items, root-tags-items, def-Foo, ...); shared pieces (string, number,
// ws, value, ...) are fixed rules emitted once. A $ref is a reference to the rule of its
// definition, generated once, so recursive schemas (trees, linked lists) work.
//
// Supported (draft 2020-12 subset):
//   true / {}                    any JSON value ("false" is refused: it matches nothing)
//   type                         object, array, string, number, integer, boolean, null, or
//                                an array of these. Without `type`, the kinds whose
//                                keywords appear are allowed (properties -> object, ...);
//                                no such keyword: any value.
//   enum, const                  the values' exact compact JSON serializations (other
//                                keywords of that node are then not applied)
//   properties, required         properties appear in declaration order (the text overload
//                                and the ordered_json overload keep it; nlohmann::json sorts
//                                keys alphabetically); required ones must appear, optional
//                                ones may be left out. A required name not in `properties`
//                                takes any value (or the additionalProperties schema).
//   additionalProperties         false, true or a schema: extra members (any key) come after
//                                the declared ones. When `properties` is given and
//                                additionalProperties is absent, NO extra members are allowed
//                                (OpenAI strict mode, not JSON Schema's default).
//   minProperties/maxProperties  only when the declared properties already satisfy them
//   items, prefixItems           `items: false` closes a tuple; without `items`, items after
//   minItems, maxItems           prefixItems are any values (as JSON Schema says)
//   minLength, maxLength         in characters (an escape sequence counts as one)
//   format                       date, time, date-time (RFC 3339), uuid, email (simple form)
//   pattern                      through regex_gbnf.h (not with format or lengths), with
//                                JSON Schema's search meaning: a side without its anchor
//                                (^ or $) allows any text there. Characters the regex
//                                allows that JSON must escape (", \, controls) are
//                                emitted as their escape sequences.
//   minimum, maximum,            integer: digit-by-digit ranges (fractional bounds round
//   exclusiveMinimum,            inward: minimum 1.5 is 2); number: fixed-point texts in
//   exclusiveMaximum             the range, without an exponent (number_range_gbnf.h).
//                                Where a side has both forms the tighter bound applies.
//   anyOf, oneOf                 alternatives (oneOf's exclusivity is not enforced)
//   allOf                        with a single element only
//   $ref                         "#", "#/$defs/NAME", "#/definitions/NAME"
//   ignored annotations          $schema $id title description default examples $comment
//                                deprecated readOnly writeOnly ($defs/definitions hold
//                                definitions and are read only through $ref)
// Not enforced (documented limitations): uniqueItems, oneOf's "exactly one", a maxLength or
// maxItems above 10000 (the grammar's repetition limit; a larger minimum is refused);
// a grammar past grammar_budget.h's limit (GBNF text or compiled) is refused as too large;
// enum/const nodes ignore their other keywords.
// Refused with an error naming the schema path: any other keyword (multipleOf, not,
// if/then/else, patternProperties, ...), $ref/anyOf/oneOf/allOf next to constraint
// keywords (annotations are fine), a $ref cycle that reaches itself without entering an
// object or array (left recursion), definitions nested more than 256 deep (a long $ref
// chain), unsatisfiable or unrepresentable bounds (a numeric range with no number, or no
// integer for "integer"), and numeric bounds that are not numbers (draft 4's boolean
// exclusiveMinimum included).
//
// Whitespace between tokens is limited so a model cannot loop on it: nothing, one space,
// or one newline followed by up to 20 spaces/tabs.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/status.h"

namespace tf::grammar {

// GBNF for any JSON object (response_format json_object): `root` is an object.
std::string json_object_gbnf();

// GBNF whose sentences are the JSON texts that validate against `schema`. Errors are
// kInvalidArgument and name the schema path, e.g.
// "json_schema: /properties/age: unsupported keyword 'multipleOf'".
// nlohmann::json keeps object keys sorted, so properties come out in alphabetical order;
// use the ordered_json or text overloads to keep the schema's declaration order.
Expected<std::string> json_schema_to_gbnf(const nlohmann::json& schema);
Expected<std::string> json_schema_to_gbnf(const nlohmann::ordered_json& schema);
// Parses `schema_text` keeping declaration order; a parse error is kInvalidArgument.
Expected<std::string> json_schema_to_gbnf(std::string_view schema_text);

// Text arguments pick the text overload (both json types also convert from strings).
inline Expected<std::string> json_schema_to_gbnf(const char* schema_text) {
  return json_schema_to_gbnf(std::string_view(schema_text));
}
inline Expected<std::string> json_schema_to_gbnf(const std::string& schema_text) {
  return json_schema_to_gbnf(std::string_view(schema_text));
}

}  // namespace tf::grammar
