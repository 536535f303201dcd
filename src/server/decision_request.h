// /v1/decisions: label probabilities from one prefill, no text generated (the reference
// engine's route, in SGLang's decision prompt format version 1).
//
// A request holds an `input` and questions of three kinds: `choice` (2-26 named options,
// labels A-Z), `score` (2-10 described levels, labels 0-9) and `yes_no` (labels yes, no).
// Each question becomes one user message: the input, a blank line, the question's lines and
// a closing instruction to answer with one label; the chat template renders it with thinking
// off, and the model's next-token distribution there is read at the label tokens
// (GenerationRequest::label_tokens). `probabilities` are a softmax of the label logprobs
// divided by `temperature`; `label_mass` is the labels' share of the whole vocabulary
// (temperature 1). The wording is the format's, byte for byte: clients compare answers
// across servers that use it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "server/json_fields.h"

namespace tf::server {

inline constexpr int kDecisionPromptFormatVersion = 1;
// Questions per request: each is a prompt of its own in the engine's queue.
inline constexpr size_t kMaxDecisionQuestions = 64;
// Prompt tokens before the answer that a label is checked against (it must stay one token of
// its own after them).
inline constexpr size_t kDecisionLabelWindow = 64;

struct DecisionQuestion {
  std::string id;
  std::string kind;                 // choice, score, yes_no
  std::vector<std::string> names;   // keys of `probabilities`: option names, "0".."9", yes/no
  std::vector<std::string> labels;  // the answer tokens' text: A.., 0.., yes/no
  std::string content;              // the user message
};

struct DecisionRequest {
  std::optional<std::string> model;
  double temperature = 1.0;
  bool return_prompt_token_ids = false;
  std::vector<DecisionQuestion> questions;
};

// Validates the body (unknown fields, types, counts, blank texts, repeated ids and names are
// 400s naming the field and the question) and words each question.
DecisionRequest parse_decision_request(const Json& body);

// One question's answer from its labels' logprobs (the model's, in label order; -inf for a
// label the model gives no probability).
Json decision_answer_json(const DecisionQuestion& q, const std::vector<double>& label_logprobs,
                          double temperature, const std::vector<int32_t>* prompt_ids,
                          const std::vector<int32_t>* label_ids);

}  // namespace tf::server
