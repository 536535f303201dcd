// /v1/decisions' request (decision_request.h): the format's wording of each question kind,
// every refusal naming its field, and the answer's probabilities from label logprobs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/decision_request.h"

namespace tf::server {
namespace {

Json body_with(Json questions, Json input = "The order arrived on Monday.") {
  return Json{{"input", std::move(input)}, {"questions", std::move(questions)}};
}

TEST(DecisionRequest, WordsEachQuestionKind) {
  const Json body = body_with(Json::parse(R"([
    {"id": "topic", "type": "choice", "question": "Which team handles it?",
     "options": [{"name": " billing ", "description": "money and invoices"}, {"name": "technical"}]},
    {"id": "urgency", "type": "score", "question": "How urgent?", "levels": ["low", "medium", "high"]},
    {"id": "late", "type": "yes_no", "question": "The order was late.", "yes": "it came after the promised day"}
  ])"));
  const DecisionRequest r = parse_decision_request(body);
  ASSERT_EQ(r.questions.size(), 3u);
  EXPECT_EQ(r.temperature, 1.0);
  EXPECT_FALSE(r.return_prompt_token_ids);

  const DecisionQuestion& c = r.questions[0];
  EXPECT_EQ(c.id, "topic");
  EXPECT_EQ(c.kind, "choice");
  EXPECT_EQ(c.names, (std::vector<std::string>{"billing", "technical"}));
  EXPECT_EQ(c.labels, (std::vector<std::string>{"A", "B"}));
  EXPECT_EQ(
      c.content,
      "The order arrived on Monday.\n\nQuestion: Which team handles it?\nA: billing - money and invoices\n"
      "B: technical\nAnswer with the letter of one option only.");

  const DecisionQuestion& s = r.questions[1];
  EXPECT_EQ(s.names, (std::vector<std::string>{"0", "1", "2"}));
  EXPECT_EQ(s.labels, s.names);
  EXPECT_EQ(s.content,
            "The order arrived on Monday.\n\nQuestion: How urgent?\n0: low\n1: medium\n2: high\n"
            "Answer with the number of one level only.");

  const DecisionQuestion& y = r.questions[2];
  EXPECT_EQ(y.names, (std::vector<std::string>{"yes", "no"}));
  EXPECT_EQ(y.content,
            "The order arrived on Monday.\n\nIs the following true? The order was late.\n"
            "yes: it came after the promised day\nAnswer with yes or no only.");
}

TEST(DecisionRequest, StructuredTextIsCompactJsonInTheClientsOrder) {
  Json input = Json::parse(R"({"zeta": [1, "é"], "alpha": {"b": true, "a": null}})");
  Json q = Json::parse(R"([{"id": "q", "type": "yes_no", "question": {"claim": "x"}, "no": ["a", 2]}])");
  const DecisionRequest r = parse_decision_request(body_with(q, input));
  EXPECT_EQ(
      r.questions[0].content,
      "{\"zeta\":[1,\"é\"],\"alpha\":{\"b\":true,\"a\":null}}\n\nIs the following true? {\"claim\":\"x\"}\n"
      "no: [\"a\",2]\nAnswer with yes or no only.");
}

TEST(DecisionRequest, TopLevelFields) {
  Json body = body_with(Json::parse(R"([{"id": "q", "type": "yes_no", "question": "ok?"}])"));
  body["temperature"] = 0.5;
  body["return_prompt_token_ids"] = true;
  body["prompt_format_version"] = 1;
  body["model"] = "m";
  body["chat_template_kwargs"] = Json{{"enable_thinking", false}};
  const DecisionRequest r = parse_decision_request(body);
  EXPECT_EQ(r.temperature, 0.5);
  EXPECT_TRUE(r.return_prompt_token_ids);
  EXPECT_EQ(r.model, "m");
  body["temperature"] = nullptr;  // null: the default
  body["chat_template_kwargs"] = nullptr;
  EXPECT_EQ(parse_decision_request(body).temperature, 1.0);
}

// Every refusal is a 400 naming the field, with words that say what is wrong.
TEST(DecisionRequest, RefusesWhatItCannotServe) {
  const Json yes_no = Json::parse(R"([{"id": "q", "type": "yes_no", "question": "ok?"}])");
  auto refused = [](const Json& body, const std::string& param, const std::string& words) {
    try {
      (void)parse_decision_request(body);
      ADD_FAILURE() << "accepted: " << body.dump();
    } catch (const ApiError& e) {
      EXPECT_EQ(e.http_status(), 400) << body.dump();
      EXPECT_EQ(e.param(), param) << body.dump();
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  auto with = [&](const char* key, Json v) {
    Json b = body_with(yes_no);
    b[key] = std::move(v);
    return b;
  };
  auto question = [&](const char* json) { return body_with(Json::parse(json)); };
  refused(Json::array(), "body", "must be a JSON object");
  refused(with("stream", true), "stream", "unknown field 'stream'");
  refused(with("prompt_format_version", 2), "prompt_format_version", "version 1");
  refused(with("prompt_format_version", "1"), "prompt_format_version", "is not served");
  for (Json t : {Json(0), Json(-1), Json("1"), Json(true)})
    refused(with("temperature", t), "temperature", "above 0");
  refused(with("chat_template_kwargs", Json{{"enable_thinking", true}}), "chat_template_kwargs",
          "enable_thinking");
  refused(with("chat_template_kwargs", Json{{"reasoning_effort", "low"}}), "chat_template_kwargs", "only");
  refused(with("chat_template_kwargs", Json::array()), "chat_template_kwargs", "JSON object");
  refused(with("return_prompt_token_ids", "yes"), "return_prompt_token_ids", "boolean");
  refused(with("questions", Json::array()), "questions", "at least one question");
  refused(with("questions", Json::object()), "questions", "at least one question");
  refused(with("questions", Json::array({1})), "questions", "must be an object");
  refused(with("input", "  \n"), "input", "must not be blank");
  refused(with("input", 7), "input", "string, object, or array");
  refused(with("input", nullptr), "input", "must not be blank");
  refused(question(R"([{"id": " ", "type": "yes_no", "question": "a"}])"), "questions",
          "id must not be blank");
  refused(question(R"([{"type": "yes_no", "question": "a"}])"), "questions", "id must not be blank");
  refused(
      question(
          R"([{"id": "q", "type": "yes_no", "question": "a"}, {"id": "q", "type": "yes_no", "question": "b"}])"),
      "questions", "'q' is repeated");
  refused(question(R"([{"id": "q", "type": "rank", "question": "a"}])"), "questions",
          "unknown question type \"rank\"");
  refused(question(R"([{"id": "q", "type": "yes_no", "question": ""}])"), "questions",
          "question must not be blank");
  refused(question(R"([{"id": "q", "type": "yes_no", "question": "a", "maybe": "b"}])"), "questions",
          "question 'q': unknown field 'maybe'");
  refused(question(R"([{"id": "q", "type": "choice", "question": "a", "options": [{"name": "x"}]}])"),
          "questions", "2 to 26 options");
  refused(
      question(
          R"([{"id": "q", "type": "choice", "question": "a", "options": [{"name": "Yes"}, {"name": " yes"}]}])"),
      "questions", "repeats another name");
  refused(
      question(
          R"([{"id": "q", "type": "choice", "question": "a", "options": [{"name": "x\ny"}, {"name": "z"}]}])"),
      "questions", "line breaks");
  refused(question(
              R"([{"id": "q", "type": "choice", "question": "a", "options": [{"name": 3}, {"name": "z"}]}])"),
          "questions", "must not be blank");
  refused(
      question(
          R"([{"id": "q", "type": "choice", "question": "a", "options": [{"name": "y", "score": 1}, {"name": "z"}]}])"),
      "questions", "unknown field 'score'");
  refused(question(R"([{"id": "q", "type": "score", "question": "a", "levels": ["x", " "]}])"), "questions",
          "level must not be blank");
  refused(
      question(
          R"([{"id": "q", "type": "score", "question": "a", "levels": ["0","1","2","3","4","5","6","7","8","9","10"]}])"),
      "questions", "2 to 10 levels");
  Json many = Json::array();
  for (size_t i = 0; i <= kMaxDecisionQuestions; ++i)
    many.push_back(Json{{"id", "q" + std::to_string(i)}, {"type", "yes_no"}, {"question", "a"}});
  refused(body_with(many), "questions", "at most");
  Json options = Json::array();
  for (int i = 0; i < 27; ++i) options.push_back(Json{{"name", "o" + std::to_string(i)}});
  refused(body_with(
              Json::array({Json{{"id", "q"}, {"type", "choice"}, {"question", "a"}, {"options", options}}})),
          "questions", "2 to 26 options");
}

DecisionQuestion question_of(const char* kind, std::vector<std::string> names) {
  DecisionQuestion q;
  q.id = "q";
  q.kind = kind;
  q.labels = names;
  q.names = std::move(names);
  return q;
}

TEST(DecisionAnswer, ProbabilitiesAreTheLabelsSoftmax) {
  const DecisionQuestion q = question_of("choice", {"billing", "technical", "sales"});
  const std::vector<double> lp = {-2.0, -0.25, -4.0};
  const Json a = decision_answer_json(q, lp, 1.0, nullptr, nullptr);
  const double mass = std::exp(-2.0) + std::exp(-0.25) + std::exp(-4.0);
  EXPECT_EQ(a["type"], "choice");
  EXPECT_NEAR(a["probabilities"]["billing"].get<double>(), std::exp(-2.0) / mass, 1e-12);
  EXPECT_NEAR(a["probabilities"]["technical"].get<double>(), std::exp(-0.25) / mass, 1e-12);
  EXPECT_NEAR(a["probabilities"]["sales"].get<double>(), std::exp(-4.0) / mass, 1e-12);
  EXPECT_NEAR(a["label_mass"].get<double>(), mass, 1e-12);
  EXPECT_EQ(a["choice"], "technical");
  EXPECT_FALSE(a.contains("score"));
  EXPECT_FALSE(a.contains("prompt_token_ids"));
  // The names keep the options' order.
  std::vector<std::string> keys;
  for (const auto& [k, v] : a["probabilities"].items()) keys.push_back(k);
  EXPECT_EQ(keys, q.names);

  // A higher temperature flattens the probabilities; the mass is the model's either way.
  const Json hot = decision_answer_json(q, lp, 2.0, nullptr, nullptr);
  EXPECT_LT(hot["probabilities"]["technical"].get<double>(), a["probabilities"]["technical"].get<double>());
  EXPECT_GT(hot["probabilities"]["sales"].get<double>(), a["probabilities"]["sales"].get<double>());
  EXPECT_EQ(hot["label_mass"], a["label_mass"]);
  // A vanishing temperature is the argmax, with finite numbers.
  const Json cold = decision_answer_json(q, lp, 1e-320, nullptr, nullptr);
  EXPECT_EQ(cold["probabilities"]["technical"].get<double>(), 1.0);
  EXPECT_EQ(cold["probabilities"]["billing"].get<double>(), 0.0);
}

TEST(DecisionAnswer, ScoreIsTheExpectedLevelAndIdsAreReturnedOnRequest) {
  const DecisionQuestion q = question_of("score", {"0", "1", "2"});
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<int32_t> prompt = {5, 6, 7}, labels = {10, 11, 12};
  const Json a = decision_answer_json(q, {std::log(0.2), std::log(0.3), -inf}, 1.0, &prompt, &labels);
  EXPECT_NEAR(a["probabilities"]["0"].get<double>(), 0.4, 1e-12);
  EXPECT_EQ(a["probabilities"]["2"].get<double>(), 0.0) << "a label the model never writes";
  EXPECT_NEAR(a["score"].get<double>(), 0.6, 1e-12);
  EXPECT_NEAR(a["label_mass"].get<double>(), 0.5, 1e-12);
  EXPECT_FALSE(a.contains("choice"));
  EXPECT_EQ(a["prompt_token_ids"], Json(prompt));
  EXPECT_EQ(a["label_token_ids"], Json(labels));
}

}  // namespace
}  // namespace tf::server
