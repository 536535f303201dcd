// json_schema_gbnf.h: the grammars are compiled with grammar.h and checked against JSON
// texts that must and must not be sentences.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "sampling/grammar/grammar.h"
#include "sampling/grammar/json_schema_gbnf.h"

namespace tf::grammar {
namespace {

using GrammarPtr = std::shared_ptr<const Grammar>;

GrammarPtr compile_or_fail(const Expected<std::string>& gbnf) {
  EXPECT_TRUE(gbnf.has_value()) << gbnf.status().message();
  if (!gbnf) return nullptr;
  auto grammar = compile_gbnf(*gbnf);
  EXPECT_TRUE(grammar.has_value()) << grammar.status().message() << "\n" << *gbnf;
  return grammar ? *grammar : nullptr;
}

GrammarPtr schema_grammar(std::string_view schema_text) {
  return compile_or_fail(json_schema_to_gbnf(schema_text));
}

bool matches(const GrammarPtr& grammar, std::string_view text) {
  return grammar != nullptr && grammar_matches(*grammar, text);
}

// The error message of a schema that must be refused ("" when it was accepted).
std::string error_of(std::string_view schema_text) {
  auto gbnf = json_schema_to_gbnf(schema_text);
  if (gbnf) return "";
  EXPECT_EQ(gbnf.status().code(), StatusCode::kInvalidArgument);
  return gbnf.status().message();
}

TEST(JsonObjectGbnf, AnyObjectAndNothingElse) {
  GrammarPtr g = compile_or_fail(json_object_gbnf());
  EXPECT_TRUE(matches(g, "{}"));
  EXPECT_TRUE(matches(g, "{ }"));
  EXPECT_TRUE(matches(g, R"({"a": [1, {"b": null}, true, -2.5e3], "c": "x", "d": {}})"));
  EXPECT_TRUE(matches(g, "{\n  \"a\": [\n    1\n  ]\n}"));
  EXPECT_FALSE(matches(g, "[]"));
  EXPECT_FALSE(matches(g, R"("x")"));
  EXPECT_FALSE(matches(g, R"({"a":1,})"));
  EXPECT_FALSE(matches(g, R"({"a" 1})"));
  EXPECT_FALSE(matches(g, R"({a: 1})"));
  EXPECT_FALSE(matches(g, R"({"a": [1 2]})"));
}

TEST(JsonSchemaGbnf, WhitespaceIsBoundedAndNotAroundTheRoot) {
  GrammarPtr g = compile_or_fail(json_object_gbnf());
  EXPECT_FALSE(matches(g, " {}"));
  EXPECT_FALSE(matches(g, "{} "));
  EXPECT_FALSE(matches(g, "{}\n"));
  EXPECT_FALSE(matches(g, "{  }"));  // two spaces
  EXPECT_TRUE(matches(g, "{\n" + std::string(20, ' ') + "\"a\": 1}"));
  EXPECT_FALSE(matches(g, "{\n" + std::string(21, ' ') + "\"a\": 1}"));
  EXPECT_FALSE(matches(g, "{\n\n\"a\": 1}"));     // one newline at most
  EXPECT_FALSE(matches(g, "{\n\t\t\"a\":\t1}"));  // a tab alone is not a separator
}

TEST(JsonSchemaGbnf, TrueAndEmptySchemaAreAnyValue) {
  for (const char* schema : {"true", "{}", R"({"title": "anything", "description": "d"})"}) {
    GrammarPtr g = schema_grammar(schema);
    EXPECT_TRUE(matches(g, "1")) << schema;
    EXPECT_TRUE(matches(g, R"("s")")) << schema;
    EXPECT_TRUE(matches(g, "null")) << schema;
    EXPECT_TRUE(matches(g, R"([{"a": false}])")) << schema;
    EXPECT_FALSE(matches(g, "nul")) << schema;
    EXPECT_FALSE(matches(g, "")) << schema;
  }
  EXPECT_NE(error_of("false"), "");
}

TEST(JsonSchemaGbnf, RequiredAndOptionalPropertiesInEveryCombination) {
  const std::vector<std::string> keys = {"a", "b", "c", "d"};
  const std::vector<std::string> values = {"1", R"("x")", "true", "null"};
  for (int required_mask = 0; required_mask < 16; ++required_mask) {
    std::string required;
    for (int i = 0; i < 4; ++i) {
      if (required_mask & (1 << i))
        required += std::string(required.empty() ? "" : ",") + "\"" + keys[i] + "\"";
    }
    std::string schema =
        R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"},
        "c": {"type": "boolean"}, "d": {"type": "null"}}, "required": [)" +
        required + "]}";
    GrammarPtr g = schema_grammar(schema);
    ASSERT_NE(g, nullptr) << schema;
    for (int present = 0; present < 16; ++present) {
      std::vector<std::string> members;
      for (int i = 0; i < 4; ++i) {
        if (present & (1 << i)) members.push_back("\"" + keys[i] + "\": " + values[i]);
      }
      std::string text = "{", doubled_comma = "{", trailing_comma = "{";
      for (size_t i = 0; i < members.size(); ++i) {
        text += (i ? ", " : "") + members[i];
        doubled_comma += (i ? ",, " : "") + members[i];
        trailing_comma += members[i] + ",";
      }
      text += "}";
      doubled_comma += "}";
      trailing_comma += "}";
      bool valid = (present & required_mask) == required_mask;
      EXPECT_EQ(matches(g, text), valid) << schema << "\n" << text;
      if (members.size() > 1) {
        EXPECT_FALSE(matches(g, doubled_comma)) << doubled_comma;
      }
      if (!members.empty()) {
        EXPECT_FALSE(matches(g, trailing_comma)) << trailing_comma;
        EXPECT_FALSE(matches(g, "{, " + text.substr(1))) << "leading comma";
      }
    }
  }
}

TEST(JsonSchemaGbnf, PropertiesWithoutAdditionalPropertiesAllowNoExtraKeys) {
  GrammarPtr g = schema_grammar(
      R"({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]})");
  EXPECT_TRUE(matches(g, R"({"name": "Ann"})"));
  EXPECT_FALSE(matches(g, R"({})"));
  EXPECT_FALSE(matches(g, R"({"name": "Ann", "age": 3})"));
  EXPECT_FALSE(matches(g, R"({"name": 3})"));
  EXPECT_FALSE(matches(g, R"({"Name": "Ann"})"));
}

TEST(JsonSchemaGbnf, AdditionalProperties) {
  GrammarPtr open = schema_grammar(
      R"({"properties": {"id": {"type": "integer"}}, "required": ["id"], "additionalProperties": true})");
  EXPECT_TRUE(matches(open, R"({"id": 1})"));
  EXPECT_TRUE(matches(open, R"({"id": 1, "x": [null], "y": "z"})"));
  EXPECT_FALSE(matches(open, R"({"x": 1})"));  // id is required

  GrammarPtr typed = schema_grammar(
      R"({"properties": {"id": {"type": "integer"}}, "additionalProperties": {"type": "integer"}})");
  EXPECT_TRUE(matches(typed, R"({"id": 1, "x": 2, "y": 3})"));
  EXPECT_TRUE(matches(typed, R"({"x": 2})"));
  EXPECT_TRUE(matches(typed, R"({})"));
  EXPECT_FALSE(matches(typed, R"({"id": 1, "x": "2"})"));
  EXPECT_FALSE(matches(typed, R"({"id": 1, "x": 2,})"));

  GrammarPtr closed = schema_grammar(R"({"type": "object", "additionalProperties": false})");
  EXPECT_TRUE(matches(closed, "{}"));
  EXPECT_FALSE(matches(closed, R"({"a": 1})"));

  GrammarPtr any = schema_grammar(R"({"type": "object"})");
  EXPECT_TRUE(matches(any, R"({"a": 1, "b": {"c": []}})"));
  EXPECT_FALSE(matches(any, "[]"));
}

TEST(JsonSchemaGbnf, RequiredNameOutsidePropertiesTakesAnyValue) {
  GrammarPtr g = schema_grammar(R"({"properties": {"a": {"type": "integer"}}, "required": ["a", "b"]})");
  EXPECT_TRUE(matches(g, R"({"a": 1, "b": [true]})"));
  EXPECT_FALSE(matches(g, R"({"a": 1})"));
  EXPECT_NE(error_of(R"({"properties": {}, "required": ["b"], "additionalProperties": false})").find("'b'"),
            std::string::npos);
}

TEST(JsonSchemaGbnf, DeclarationOrderKeptByTextAndOrderedOverloads) {
  const char* schema =
      R"({"type": "object", "properties": {"zeta": {"type": "integer"}, "alpha": {"type": "integer"}},
      "required": ["zeta", "alpha"]})";
  GrammarPtr from_text = schema_grammar(schema);
  EXPECT_TRUE(matches(from_text, R"({"zeta": 1, "alpha": 2})"));
  EXPECT_FALSE(matches(from_text, R"({"alpha": 2, "zeta": 1})"));

  GrammarPtr from_ordered = compile_or_fail(json_schema_to_gbnf(nlohmann::ordered_json::parse(schema)));
  EXPECT_TRUE(matches(from_ordered, R"({"zeta": 1, "alpha": 2})"));
  EXPECT_FALSE(matches(from_ordered, R"({"alpha": 2, "zeta": 1})"));

  // nlohmann::json sorts its keys: the properties come out alphabetically.
  GrammarPtr from_sorted = compile_or_fail(json_schema_to_gbnf(nlohmann::json::parse(schema)));
  EXPECT_TRUE(matches(from_sorted, R"({"alpha": 2, "zeta": 1})"));
  EXPECT_FALSE(matches(from_sorted, R"({"zeta": 1, "alpha": 2})"));
}

TEST(JsonSchemaGbnf, RuleNamesFollowTheSchema) {
  auto gbnf = json_schema_to_gbnf(R"({"$defs": {"Item": {"type": "string"}}, "type": "object",
      "properties": {"name": {"type": "string"}, "tags": {"type": "array", "items": {"$ref": "#/$defs/Item"}}}})");
  ASSERT_TRUE(gbnf.has_value()) << gbnf.status().message();
  EXPECT_EQ(gbnf->rfind("root ::= ", 0), 0u) << *gbnf;
  EXPECT_NE(gbnf->find("\nroot-name ::= "), std::string::npos) << *gbnf;
  EXPECT_NE(gbnf->find("\nroot-tags-items ::= def-Item"), std::string::npos) << *gbnf;
  EXPECT_NE(gbnf->find("\ndef-Item ::= "), std::string::npos) << *gbnf;
}

TEST(JsonSchemaGbnf, ScalarTypes) {
  GrammarPtr integer = schema_grammar(R"({"type": "integer"})");
  for (const char* ok : {"0", "-0", "7", "-123", "9007199254740993"}) EXPECT_TRUE(matches(integer, ok)) << ok;
  for (const char* bad : {"1.5", "01", "+1", "1e3", "\"1\"", "true", "-", ""})
    EXPECT_FALSE(matches(integer, bad)) << bad;

  GrammarPtr number = schema_grammar(R"({"type": "number"})");
  for (const char* ok : {"0", "-0.5e+10", "1E5", "3.25", "-7", "2e-3"})
    EXPECT_TRUE(matches(number, ok)) << ok;
  for (const char* bad : {".5", "1.", "01.5", "1e", "--1", "NaN", "Infinity", "0x10"}) {
    EXPECT_FALSE(matches(number, bad)) << bad;
  }

  GrammarPtr boolean = schema_grammar(R"({"type": "boolean"})");
  EXPECT_TRUE(matches(boolean, "true"));
  EXPECT_TRUE(matches(boolean, "false"));
  EXPECT_FALSE(matches(boolean, "True"));
  EXPECT_FALSE(matches(boolean, "null"));

  GrammarPtr nullable = schema_grammar(R"({"type": ["integer", "null"]})");
  EXPECT_TRUE(matches(nullable, "null"));
  EXPECT_TRUE(matches(nullable, "5"));
  EXPECT_FALSE(matches(nullable, "5.5"));
  EXPECT_FALSE(matches(nullable, "\"5\""));
}

TEST(JsonSchemaGbnf, StringsWithEscapesAndUnicode) {
  GrammarPtr g = schema_grammar(R"({"type": "string"})");
  EXPECT_TRUE(matches(g, R"("")"));
  EXPECT_TRUE(matches(g, "\"h\xC3\xA9llo \xE2\x9C\x93\""));  // "héllo ✓"
  EXPECT_TRUE(matches(g, "\"\xF0\x9F\x98\x80\""));           // outside the BMP
  EXPECT_TRUE(matches(g, R"("a\"b\\c\/d\b\f\n\r\t\u00e9\uD83D\uDE00")"));
  EXPECT_FALSE(matches(g, R"("a"b")"));
  EXPECT_FALSE(matches(g, R"("a\xb")"));
  EXPECT_FALSE(matches(g, R"("\u12")"));
  EXPECT_FALSE(matches(g, R"("\uZZZZ")"));
  EXPECT_FALSE(matches(g, "\"line\nbreak\""));  // raw control character
  EXPECT_FALSE(matches(g, "\"tab\there\""));
  EXPECT_FALSE(matches(g, R"("unterminated)"));
  EXPECT_FALSE(matches(g, R"('single')"));
}

TEST(JsonSchemaGbnf, StringLengthCountsCharacters) {
  GrammarPtr g = schema_grammar(R"({"type": "string", "minLength": 2, "maxLength": 3})");
  EXPECT_FALSE(matches(g, R"("a")"));
  EXPECT_TRUE(matches(g, R"("ab")"));
  EXPECT_TRUE(matches(g, "\"h\xC3\xA9\xC3\xA9\""));  // three code points, five bytes
  EXPECT_TRUE(matches(g, R"("\n\t\"")"));            // three escaped characters
  EXPECT_FALSE(matches(g, R"("abcd")"));
  EXPECT_NE(error_of(R"({"type": "string", "minLength": 4, "maxLength": 3})").find("minLength"),
            std::string::npos);
}

TEST(JsonSchemaGbnf, BoundsAboveTheRepetitionLimit) {
  GrammarPtr g = schema_grammar(R"({"type": "string", "maxLength": 1000000})");  // not enforced beyond 10000
  EXPECT_TRUE(matches(g, R"("short")"));
  EXPECT_NE(error_of(R"({"type": "array", "minItems": 20000})").find("minItems above 10000"),
            std::string::npos);
}

TEST(JsonSchemaGbnf, Formats) {
  GrammarPtr date = schema_grammar(R"({"type": "string", "format": "date"})");
  EXPECT_TRUE(matches(date, R"("2024-02-29")"));
  EXPECT_FALSE(matches(date, R"("2024-13-01")"));
  EXPECT_FALSE(matches(date, R"("2024-1-01")"));
  EXPECT_FALSE(matches(date, "2024-01-01"));  // a JSON string, with quotes

  GrammarPtr time = schema_grammar(R"({"type": "string", "format": "time"})");
  EXPECT_TRUE(matches(time, R"("23:59:60Z")"));
  EXPECT_TRUE(matches(time, R"("08:30:00.125+05:30")"));
  EXPECT_FALSE(matches(time, R"("24:00:00Z")"));
  EXPECT_FALSE(matches(time, R"("08:30:00")"));  // RFC 3339 needs the offset

  GrammarPtr date_time = schema_grammar(R"({"type": "string", "format": "date-time"})");
  EXPECT_TRUE(matches(date_time, R"("2024-01-02T03:04:05Z")"));
  EXPECT_TRUE(matches(date_time, R"("2024-01-02T03:04:05.5-08:00")"));
  EXPECT_FALSE(matches(date_time, R"("2024-01-02 03:04")"));

  GrammarPtr uuid = schema_grammar(R"({"type": "string", "format": "uuid"})");
  EXPECT_TRUE(matches(uuid, R"("123e4567-e89b-12d3-a456-426614174000")"));
  EXPECT_FALSE(matches(uuid, R"("123e4567-e89b-12d3-a456-42661417400")"));
  EXPECT_FALSE(matches(uuid, R"("123e4567e89b12d3a456426614174000")"));

  GrammarPtr email = schema_grammar(R"({"type": "string", "format": "email"})");
  EXPECT_TRUE(matches(email, R"("first.last+tag@example.co.uk")"));
  EXPECT_FALSE(matches(email, R"("no-at-sign.example.com")"));
  EXPECT_FALSE(matches(email, R"("user@localhost")"));

  EXPECT_EQ(error_of(R"({"properties": {"host": {"type": "string", "format": "hostname"}}})"),
            "json_schema: /properties/host: unsupported format \"hostname\"");
}

TEST(JsonSchemaGbnf, Pattern) {
  GrammarPtr anchored = schema_grammar(R"({"type": "string", "pattern": "^[A-Z]{3}-[0-9]+$"})");
  EXPECT_TRUE(matches(anchored, R"("ABC-12")"));
  EXPECT_FALSE(matches(anchored, R"("AB-1")"));
  EXPECT_FALSE(matches(anchored, R"("xABC-12")"));

  // JSON Schema patterns search: an unanchored side allows any text.
  GrammarPtr search = schema_grammar(R"({"type": "string", "pattern": "abc"})");
  EXPECT_TRUE(matches(search, R"("abc")"));
  EXPECT_TRUE(matches(search, R"("xx abc \"yy\"")"));
  EXPECT_TRUE(matches(search, R"("line\nabc\u0001\\")"));
  EXPECT_FALSE(matches(search, "\"line\nabc\""));  // a raw newline is not JSON
  EXPECT_FALSE(matches(search, R"("ab c")"));
  GrammarPtr prefix = schema_grammar(R"({"type": "string", "pattern": "^ab"})");
  EXPECT_TRUE(matches(prefix, R"("abzz")"));
  EXPECT_FALSE(matches(prefix, R"("zab")"));

  // Characters the regex allows that JSON must escape come out escaped.
  GrammarPtr escaped = schema_grammar(R"({"type": "string", "pattern": "^[^a]+$"})");
  EXPECT_TRUE(matches(escaped, R"("q\"\\")"));  // the value q"\ .
  EXPECT_FALSE(matches(escaped, R"("q"")"));
  EXPECT_FALSE(matches(escaped, R"("qa")"));
  GrammarPtr space = schema_grammar(R"({"type": "string", "pattern": "^a\\sb$"})");
  EXPECT_TRUE(matches(space, R"("a b")"));
  EXPECT_TRUE(matches(space, R"("a\nb")"));
  EXPECT_FALSE(matches(space, "\"a\nb\""));
  GrammarPtr tab = schema_grammar(R"({"type": "string", "pattern": "^a\\tb$"})");
  EXPECT_TRUE(matches(tab, R"("a\tb")"));
  EXPECT_FALSE(matches(tab, "\"a\tb\""));
  EXPECT_FALSE(matches(tab, R"("a\u0009b")"));  // one spelling per character is enough

  EXPECT_NE(error_of(R"({"type": "string", "pattern": "(a"})").find("json_schema: /: pattern: "),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type": "string", "pattern": "a", "maxLength": 3})"), "");
}

TEST(JsonSchemaGbnf, Arrays) {
  GrammarPtr g =
      schema_grammar(R"({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3})");
  EXPECT_FALSE(matches(g, "[]"));
  EXPECT_TRUE(matches(g, "[1]"));
  EXPECT_TRUE(matches(g, "[1, 2, 3]"));
  EXPECT_TRUE(matches(g, "[\n  1,\n  2\n]"));
  EXPECT_FALSE(matches(g, "[1, 2, 3, 4]"));
  EXPECT_FALSE(matches(g, "[1, \"2\"]"));
  EXPECT_FALSE(matches(g, "[1,]"));
  EXPECT_FALSE(matches(g, "[,1]"));

  GrammarPtr any = schema_grammar(R"({"type": "array"})");
  EXPECT_TRUE(matches(any, "[]"));
  EXPECT_TRUE(matches(any, R"([1, "a", null, [{}]])"));

  GrammarPtr none = schema_grammar(R"({"type": "array", "maxItems": 0})");
  EXPECT_TRUE(matches(none, "[]"));
  EXPECT_FALSE(matches(none, "[1]"));

  // uniqueItems is accepted and not enforced (documented).
  GrammarPtr unique =
      schema_grammar(R"({"type": "array", "items": {"type": "integer"}, "uniqueItems": true})");
  EXPECT_TRUE(matches(unique, "[1, 1]"));
}

TEST(JsonSchemaGbnf, TupleArrays) {
  GrammarPtr closed = schema_grammar(
      R"({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": false, "minItems": 1})");
  EXPECT_FALSE(matches(closed, "[]"));
  EXPECT_TRUE(matches(closed, "[1]"));
  EXPECT_TRUE(matches(closed, R"([1, "a"])"));
  EXPECT_FALSE(matches(closed, R"(["a"])"));
  EXPECT_FALSE(matches(closed, R"([1, "a", 2])"));

  GrammarPtr rest = schema_grammar(
      R"({"type": "array", "prefixItems": [{"type": "string"}], "items": {"type": "boolean"}, "maxItems": 3})");
  EXPECT_TRUE(matches(rest, "[]"));
  EXPECT_TRUE(matches(rest, R"(["a", true, false])"));
  EXPECT_FALSE(matches(rest, R"(["a", true, false, true])"));
  EXPECT_FALSE(matches(rest, R"([true])"));

  GrammarPtr open = schema_grammar(R"({"prefixItems": [{"type": "null"}], "minItems": 2})");
  EXPECT_TRUE(matches(open, R"([null, {"x": 1}])"));  // items after the tuple: any value
  EXPECT_FALSE(matches(open, R"([null])"));
}

TEST(JsonSchemaGbnf, EnumAndConst) {
  GrammarPtr g = schema_grammar(R"({"enum": ["red", "green", 3, null, {"a": [1, "b"]}]})");
  for (const char* ok : {R"("red")", R"("green")", "3", "null", R"({"a":[1,"b"]})"}) {
    EXPECT_TRUE(matches(g, ok)) << ok;
  }
  for (const char* bad : {R"("blue")", R"("Red")", "red", "3.0", R"({"a": [1, "b"]})"}) {
    EXPECT_FALSE(matches(g, bad)) << bad;
  }
  GrammarPtr quoted = schema_grammar(R"({"enum": ["say \"hi\"\n"]})");
  EXPECT_TRUE(matches(quoted, R"("say \"hi\"\n")"));

  GrammarPtr constant = schema_grammar(R"({"type": "object", "properties": {"kind": {"const": "circle"}},
      "required": ["kind"]})");
  EXPECT_TRUE(matches(constant, R"({"kind": "circle"})"));
  EXPECT_FALSE(matches(constant, R"({"kind": "square"})"));
}

TEST(JsonSchemaGbnf, AnyOfAndOneOf) {
  GrammarPtr g = schema_grammar(R"({"anyOf": [
      {"type": "object", "properties": {"circle": {"type": "number"}}, "required": ["circle"]},
      {"type": "object", "properties": {"square": {"type": "number"}}, "required": ["square"]},
      {"type": "null"}], "description": "a shape or nothing"})");
  EXPECT_TRUE(matches(g, R"({"circle": 1.5})"));
  EXPECT_TRUE(matches(g, R"({"square": 2})"));
  EXPECT_TRUE(matches(g, "null"));
  EXPECT_FALSE(matches(g, R"({"triangle": 2})"));
  EXPECT_FALSE(matches(g, R"({"circle": 1, "square": 2})"));

  GrammarPtr one = schema_grammar(R"({"oneOf": [{"type": "string"}, {"type": "integer"}]})");
  EXPECT_TRUE(matches(one, R"("x")"));
  EXPECT_TRUE(matches(one, "4"));
  EXPECT_FALSE(matches(one, "true"));

  GrammarPtr single = schema_grammar(R"({"allOf": [{"type": "boolean"}]})");
  EXPECT_TRUE(matches(single, "true"));
  EXPECT_FALSE(matches(single, "1"));
}

TEST(JsonSchemaGbnf, RecursiveRefsBuildTrees) {
  GrammarPtr tree = schema_grammar(R"({
      "$defs": {"Node": {"type": "object", "properties": {
          "value": {"type": "integer"},
          "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}},
        "required": ["value"]}},
      "$ref": "#/$defs/Node"})");
  EXPECT_TRUE(matches(tree, R"({"value": 1})"));
  EXPECT_TRUE(matches(tree, R"({"value": 1, "children": [{"value": 2, "children": []}, {"value": 3,
      "children": [{"value": 4, "children": [{"value": 5}]}]}]})"));
  EXPECT_FALSE(matches(tree, R"({"value": 1, "children": [{"value": 2, "children": [{"children": []}]}]})"));
  EXPECT_FALSE(matches(tree, R"({"value": 1, "children": [{"value": "deep"}]})"));

  // "#" and the older "definitions".
  GrammarPtr list =
      schema_grammar(R"({"type": "object", "properties": {"head": {"$ref": "#/definitions/Head"},
      "tail": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}}, "required": ["head", "tail"],
      "definitions": {"Head": {"type": "string"}}})");
  EXPECT_TRUE(matches(list, R"({"head": "a", "tail": {"head": "b", "tail": null}})"));
  EXPECT_FALSE(matches(list, R"({"head": "a", "tail": {"head": 1, "tail": null}})"));
}

TEST(JsonSchemaGbnf, SharedDefinitionIsGeneratedOnce) {
  auto gbnf = json_schema_to_gbnf(R"({"$defs": {"P": {"type": "integer"}}, "type": "object",
      "properties": {"x": {"$ref": "#/$defs/P"}, "y": {"$ref": "#/$defs/P"}}})");
  ASSERT_TRUE(gbnf.has_value());
  size_t first = gbnf->find("def-P ::=");
  ASSERT_NE(first, std::string::npos) << *gbnf;
  EXPECT_EQ(gbnf->find("def-P ::=", first + 1), std::string::npos) << *gbnf;
  EXPECT_EQ(gbnf->find("def-P-2"), std::string::npos) << *gbnf;
}

TEST(JsonSchemaGbnf, TypeIsInferredFromKeywords) {
  GrammarPtr g = schema_grammar(R"({"properties": {"a": {"type": "integer"}}, "required": ["a"]})");
  EXPECT_TRUE(matches(g, R"({"a": 1})"));
  EXPECT_FALSE(matches(g, "1"));
  GrammarPtr s = schema_grammar(R"({"maxLength": 2})");
  EXPECT_TRUE(matches(s, R"("ab")"));
  EXPECT_FALSE(matches(s, "12"));
}

TEST(JsonSchemaGbnf, ErrorsNameThePath) {
  EXPECT_EQ(error_of(R"({"type": "object", "properties": {"age": {"type": "integer", "multipleOf": 3}}})"),
            "json_schema: /properties/age: unsupported keyword 'multipleOf'");
  EXPECT_EQ(error_of(R"({"not": {"type": "null"}})"), "json_schema: /: unsupported keyword 'not'");
  EXPECT_EQ(error_of(R"({"type": "array", "items": {"$ref": "#/$defs/x"}})"),
            "json_schema: /items: unresolvable $ref '#/$defs/x'");
  EXPECT_EQ(error_of(R"({"$ref": "#/$defs/A", "$defs": {"A": {"properties": {"a/b": {"if": true}}}}})"),
            "json_schema: /$defs/A/properties/a~1b: unsupported keyword 'if'");
  EXPECT_EQ(error_of(R"({"type": "strin"})"), "json_schema: /: unknown type \"strin\"");
  EXPECT_NE(error_of(R"({"allOf": [{"type": "string"}, {"maxLength": 3}]})").find("allOf with 2"),
            std::string::npos);
  EXPECT_NE(
      error_of(R"({"type": "object", "properties": {"a": false}, "required": ["a"]})").find("/properties/a"),
      std::string::npos);
  EXPECT_NE(
      error_of(R"({"$ref": "#/$defs/A", "type": "string", "$defs": {"A": {}}})").find("cannot be combined"),
      std::string::npos);
  EXPECT_NE(error_of("{\"type\": ").find("invalid JSON"), std::string::npos);
  // A number too large for a double is an error too, not an exception (found by fuzzing).
  EXPECT_NE(error_of("{\"maxLength\": 55555E7777}").find("invalid JSON"), std::string::npos);
  EXPECT_NE(error_of(R"({"type": "array", "minItems": "2"})").find("minItems"), std::string::npos);
}

TEST(JsonSchemaGbnf, RefCycleWithoutProgressIsRefused) {
  std::string error = error_of(R"({"$defs": {"A": {"anyOf": [{"$ref": "#/$defs/B"}, {"type": "null"}]},
      "B": {"$ref": "#/$defs/A"}}, "$ref": "#/$defs/A"})");
  EXPECT_NE(error.find("reaches itself"), std::string::npos) << error;
  EXPECT_NE(error_of(R"({"$ref": "#"})").find("reaches itself"), std::string::npos);
}

// $defs a0 -> a1 -> ... -> a{n} by $ref: nesting that the JSON text does not show.
std::string ref_chain(int n) {
  std::string defs;
  for (int i = 0; i < n; ++i) defs += "\"a" + std::to_string(i) + "\": {\"$ref\": \"#/$defs/a" + std::to_string(i + 1) + "\"}, ";
  return "{\"$defs\": {" + defs + "\"a" + std::to_string(n) + "\": {\"type\": \"string\"}}, \"$ref\": \"#/$defs/a0\"}";
}

// A chain of 20000 $defs recursed once per link and overflowed the stack.
TEST(JsonSchemaGbnf, LongRefChainsAreRefusedNotRecursedInto) {
  EXPECT_TRUE(matches(schema_grammar(ref_chain(100)), R"("x")"));
  std::string error = error_of(ref_chain(20000));
  EXPECT_NE(error.find("nest deeper than 256"), std::string::npos) << error;
}

// An object's member tails recursed once per property (100,000 optional properties
// overflowed the stack and crashed the server), and each required name was looked up in
// lists (100,000 required properties: quadratic). Both convert, in well under a second.
TEST(JsonSchemaGbnf, ManyPropertiesConvertWithoutDeepRecursion) {
  for (const bool all_required : {false, true}) {
    std::string properties, required;
    for (int i = 0; i < 100000; ++i) {
      properties += std::string(i ? "," : "") + "\"k" + std::to_string(i) + "\": {\"type\": \"integer\"}";
      required += std::string(i ? "," : "") + "\"k" + std::to_string(i) + "\"";
    }
    const std::string schema = "{\"type\": \"object\", \"properties\": {" + properties + "}" +
                               (all_required ? ", \"required\": [" + required + "]" : "") + "}";
    const auto t0 = std::chrono::steady_clock::now();
    auto gbnf = json_schema_to_gbnf(schema);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_TRUE(gbnf.has_value()) << gbnf.status().message();
    EXPECT_LT(seconds, 10.0) << (all_required ? "required" : "optional");
  }
  // The tails built from the back still allow any subset in order (1,000 optional members).
  std::string properties;
  for (int i = 0; i < 1000; ++i)
    properties += std::string(i ? "," : "") + "\"k" + std::to_string(i) + "\": {\"type\": \"integer\"}";
  GrammarPtr g = schema_grammar("{\"type\": \"object\", \"properties\": {" + properties + "}}");
  EXPECT_TRUE(matches(g, R"({"k3": 1, "k500": 2, "k999": 3})"));
  EXPECT_TRUE(matches(g, "{}"));
  EXPECT_FALSE(matches(g, R"({"k500": 2, "k3": 1})"));
}

TEST(JsonSchemaGbnf, PropertyCountsOnlyWhenAlreadySatisfied) {
  GrammarPtr g = schema_grammar(R"({"properties": {"a": {}, "b": {}}, "required": ["a", "b"],
      "minProperties": 2, "maxProperties": 2})");
  EXPECT_TRUE(matches(g, R"({"a": 1, "b": 2})"));
  EXPECT_NE(error_of(R"({"properties": {"a": {}}, "minProperties": 1})").find("minProperties"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type": "object", "maxProperties": 3})").find("maxProperties"), std::string::npos);
}

}  // namespace
}  // namespace tf::grammar
