// See decision_request.h.
#include "server/decision_request.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "server/api_error.h"

namespace tf::server {
namespace {

const std::set<std::string> kTopFields = {"input",
                                          "questions",
                                          "temperature",
                                          "chat_template_kwargs",
                                          "prompt_format_version",
                                          "return_prompt_token_ids",
                                          "model"};
const std::set<std::string> kChoiceFields = {"id", "type", "question", "options"};
const std::set<std::string> kScoreFields = {"id", "type", "question", "levels"};
const std::set<std::string> kYesNoFields = {"id", "type", "question", "yes", "no"};
const std::set<std::string> kOptionFields = {"name", "description"};

// A refusal inside one question: the handler prefixes which one.
struct QuestionError {
  std::string message;
};

void refuse_unknown(const Json& obj, const std::set<std::string>& allowed) {
  for (const auto& [key, value] : obj.items())
    if (!allowed.contains(key)) throw QuestionError{"unknown field '" + key + "'"};
}

bool is_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

std::string strip(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && is_space(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && is_space(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

bool blank(const std::string& s) { return strip(s).empty(); }

// A text field: a string as it is, an object or array as compact JSON (the client's key
// order), absent or null as "".
std::string render_text(const Json* v) {
  if (!v || v->is_null()) return "";
  if (v->is_string()) return v->get<std::string>();
  if (v->is_object() || v->is_array()) return v->dump(-1, ' ', false, Json::error_handler_t::replace);
  throw QuestionError{"text must be a string, object, or array"};
}

const Json* member(const Json& obj, const char* name) {
  auto it = obj.find(name);
  return it == obj.end() ? nullptr : &*it;
}

std::string question_line(const Json& q) {
  const std::string text = render_text(member(q, "question"));
  if (blank(text)) throw QuestionError{"a question must not be blank"};
  return "Question: " + text;
}

std::string lower_ascii(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

void word_choice(const Json& q, DecisionQuestion& d, std::vector<std::string>& lines) {
  refuse_unknown(q, kChoiceFields);
  const Json* options = member(q, "options");
  if (!options || !options->is_array() || options->size() < 2 || options->size() > 26)
    throw QuestionError{"a choice needs 2 to 26 options"};
  lines.push_back(question_line(q));
  std::set<std::string> seen;
  for (size_t i = 0; i < options->size(); ++i) {
    const Json& o = (*options)[i];
    if (!o.is_object()) throw QuestionError{"each option must be an object"};
    refuse_unknown(o, kOptionFields);
    const Json* name = member(o, "name");
    const std::string stripped = name && name->is_string() ? strip(name->get<std::string>()) : std::string();
    if (stripped.empty() || std::any_of(stripped.begin(), stripped.end(),
                                        [](char c) { return static_cast<unsigned char>(c) < 32; }))
      throw QuestionError{"option names must not be blank or contain line breaks"};
    if (!seen.insert(lower_ascii(stripped)).second)
      throw QuestionError{"option name '" + stripped + "' repeats another name"};
    const std::string label(1, static_cast<char>('A' + i));
    const std::string detail = render_text(member(o, "description"));
    lines.push_back(detail.empty() ? label + ": " + stripped : label + ": " + stripped + " - " + detail);
    d.names.push_back(stripped);
    d.labels.push_back(label);
  }
  lines.push_back("Answer with the letter of one option only.");
}

void word_score(const Json& q, DecisionQuestion& d, std::vector<std::string>& lines) {
  refuse_unknown(q, kScoreFields);
  const Json* levels = member(q, "levels");
  if (!levels || !levels->is_array() || levels->size() < 2 || levels->size() > 10)
    throw QuestionError{"a score needs 2 to 10 levels"};
  lines.push_back(question_line(q));
  for (size_t i = 0; i < levels->size(); ++i) {
    const std::string detail = render_text(&(*levels)[i]);
    if (blank(detail)) throw QuestionError{"a level must not be blank"};
    const std::string label = std::to_string(i);
    lines.push_back(label + ": " + detail);
    d.names.push_back(label);
    d.labels.push_back(label);
  }
  lines.push_back("Answer with the number of one level only.");
}

void word_yes_no(const Json& q, DecisionQuestion& d, std::vector<std::string>& lines) {
  refuse_unknown(q, kYesNoFields);
  const std::string lead = render_text(member(q, "question"));
  if (blank(lead)) throw QuestionError{"a question must not be blank"};
  lines.push_back("Is the following true? " + lead);
  for (const char* label : {"yes", "no"}) {
    const std::string detail = render_text(member(q, label));
    if (!detail.empty()) lines.push_back(std::string(label) + ": " + detail);
    d.names.emplace_back(label);
    d.labels.emplace_back(label);
  }
  lines.push_back("Answer with yes or no only.");
}

DecisionQuestion word_question(const std::string& input, const Json& q) {
  DecisionQuestion d;
  d.id = q["id"].get<std::string>();
  const Json* type = member(q, "type");
  d.kind = type && type->is_string() ? type->get<std::string>() : std::string();
  std::vector<std::string> lines;
  if (d.kind == "choice")
    word_choice(q, d, lines);
  else if (d.kind == "score")
    word_score(q, d, lines);
  else if (d.kind == "yes_no")
    word_yes_no(q, d, lines);
  else
    throw QuestionError{"unknown question type " + (type ? type->dump() : std::string("null"))};
  d.content = input + "\n";
  for (const std::string& line : lines) d.content += "\n" + line;
  return d;
}

}  // namespace

DecisionRequest parse_decision_request(const Json& body) {
  require_object(body, "body");
  for (const auto& [key, value] : body.items())
    if (!kTopFields.contains(key)) throw bad_request("unknown field '" + key + "'", key);
  DecisionRequest r;
  r.model = json_string(body, "model");
  if (const Json* v = json_field(body, "prompt_format_version");
      v && !(v->is_number_integer() && v->get<int64_t>() == kDecisionPromptFormatVersion))
    throw bad_request("prompt_format_version " + v->dump() + " is not served, this server uses version " +
                          std::to_string(kDecisionPromptFormatVersion),
                      "prompt_format_version");
  if (const Json* v = json_field(body, "temperature")) {
    if (!v->is_number() || !std::isfinite(v->get<double>()) || v->get<double>() <= 0)
      throw bad_request("temperature must be a number above 0", "temperature");
    r.temperature = v->get<double>();
  }
  r.return_prompt_token_ids = json_bool(body, "return_prompt_token_ids").value_or(false);
  // Thinking stays off: the answer is the first token after the prompt.
  if (const Json* kw = json_field(body, "chat_template_kwargs")) {
    require_object(*kw, "chat_template_kwargs");
    for (const auto& [key, value] : kw->items())
      if (key != "enable_thinking" || !value.is_boolean() || value.get<bool>())
        throw bad_request(
            "chat_template_kwargs may only hold enable_thinking: false (decisions run without thinking)",
            "chat_template_kwargs");
  }
  const Json* questions = json_field(body, "questions");
  if (!questions || !questions->is_array() || questions->empty())
    throw bad_request("questions must contain at least one question", "questions");
  if (questions->size() > kMaxDecisionQuestions)
    throw bad_request("at most " + std::to_string(kMaxDecisionQuestions) + " questions per request",
                      "questions");
  std::set<std::string> ids;
  for (const Json& q : *questions) {
    if (!q.is_object()) throw bad_request("each question must be an object", "questions");
    const Json* id = member(q, "id");
    if (!id || !id->is_string() || blank(id->get<std::string>()))
      throw bad_request("a question id must not be blank", "questions");
    if (!ids.insert(id->get<std::string>()).second)
      throw bad_request("question id '" + id->get<std::string>() + "' is repeated", "questions");
  }
  std::string input;
  try {
    input = render_text(member(body, "input"));
  } catch (const QuestionError& e) {
    throw bad_request("input: " + e.message, "input");
  }
  if (blank(input)) throw bad_request("input must not be blank", "input");
  for (const Json& q : *questions) {
    try {
      r.questions.push_back(word_question(input, q));
    } catch (const QuestionError& e) {
      throw bad_request("question '" + q["id"].get<std::string>() + "': " + e.message, "questions");
    }
  }
  return r;
}

Json decision_answer_json(const DecisionQuestion& q, const std::vector<double>& label_logprobs,
                          double temperature, const std::vector<int32_t>* prompt_ids,
                          const std::vector<int32_t>* label_ids) {
  // Softmax of logprob / temperature, shifted by the largest logprob first: the differences
  // are <= 0, so a tiny temperature gives 0 and 1, never inf - inf.
  const double top = *std::max_element(label_logprobs.begin(), label_logprobs.end());
  std::vector<double> weights;
  double total = 0.0, mass = 0.0;
  for (double lp : label_logprobs) {
    const double w = lp == top ? 1.0 : std::exp((lp - top) / temperature);
    weights.push_back(w);
    total += w;
    mass += std::exp(lp);
  }
  Json answer = Json::object();
  answer["type"] = q.kind;
  Json probabilities = Json::object();
  size_t best = 0;
  double expected = 0.0;
  for (size_t i = 0; i < weights.size(); ++i) {
    const double p = weights[i] / total;
    probabilities[q.names[i]] = p;
    if (p > weights[best] / total) best = i;
    expected += static_cast<double>(i) * p;
  }
  answer["probabilities"] = std::move(probabilities);
  answer["label_mass"] = std::min(mass, 1.0);
  if (q.kind == "choice") answer["choice"] = q.names[best];
  if (q.kind == "score") answer["score"] = expected;
  if (prompt_ids) answer["prompt_token_ids"] = *prompt_ids;
  if (label_ids) answer["label_token_ids"] = *label_ids;
  return answer;
}

}  // namespace tf::server
