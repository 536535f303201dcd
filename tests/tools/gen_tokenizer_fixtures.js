#!/usr/bin/env node
// Writes the synthetic tokenizer fixtures of tests/data/tokenizers/ (tokenizer.json +
// tokenizer_config.json per folder), which the parity test (tokenizer_reference.js +
// tests/unit/tokenizer_parity_test.cc) runs through transformers.js and the C++ tokenizer.
// They cover the models, normalizers, pre-tokenizers, post-processors and decoders that the real
// npm tokenizers do not: WordPiece, Unigram, WordLevel; BertNormalizer, StripAccents, Precompiled,
// Lowercase, Strip, NFKD; BertPreTokenizer, Punctuation, Digits, Whitespace, WhitespaceSplit,
// Metaspace, Replace, Split; BertProcessing, TemplateProcessing; WordPiece, CTC, Metaspace,
// ByteFallback, Strip, Replace, Fuse decoders.
// Vocabularies are learned from a training corpus drawn with another seed than the test corpus, so
// that the test text has unknown words and characters too. Deterministic: rerun after edits with
//   node tests/tools/gen_tokenizer_fixtures.js
"use strict";
const fs = require("fs");
const path = require("path");
const { generate } = require("./tokenizer_corpus.js");

const OUT = path.join(__dirname, "..", "data", "tokenizers");
const TRAIN = generate(2500, 777);

function counter() {
  const m = new Map();
  return { add: (k, n = 1) => m.set(k, (m.get(k) || 0) + n), map: m };
}
// Entries sorted by count (descending), then code-unit order, for determinism.
function top(map, n, minCount = 1) {
  return [...map.entries()]
    .filter(([, c]) => c >= minCount)
    .sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0))
    .slice(0, n);
}
const PUNCT = /[\p{P}\u0021-\u002F\u003A-\u0040\u005B-\u0060\u007B-\u007E]/u;

function write(name, tokenizer, config) {
  const dir = path.join(OUT, name);
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, "tokenizer.json"), JSON.stringify(tokenizer) + "\n");
  fs.writeFileSync(path.join(dir, "tokenizer_config.json"), JSON.stringify(config, null, 1) + "\n");
}
function added(id, content, special = true) {
  return { id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special };
}

// ---- WordPiece vocabulary (BERT style): words, subwords, "##" continuations, characters.
function wordpieceVocab(specials, normalize, size) {
  const words = counter(), chars = counter(), subs = counter();
  for (const s of TRAIN) {
    for (const w of normalize(s).split(/[\s\p{P}]+/u)) {
      if (!w) continue;
      words.add(w);
      const cs = [...w];
      cs.forEach((c, i) => chars.add((i ? "##" : "") + c));
      for (let i = 0; i < cs.length; ++i) {
        for (let n = 2; n <= 4 && i + n <= cs.length; ++n) subs.add((i ? "##" : "") + cs.slice(i, i + n).join(""));
      }
    }
  }
  const vocab = {};
  let next = 0;
  const put = (t) => {
    if (!(t in vocab)) vocab[t] = next++;
  };
  specials.forEach(put);
  for (let c = 0x21; c < 0x7f; ++c) put(String.fromCharCode(c));
  for (const [c] of top(chars.map, 1200, 3)) put(c);
  for (const [w] of top(words.map, Math.floor(size * 0.35))) put(w);
  for (const [w] of top(subs.map, 100000, 4)) {
    if (next >= size) break;
    put(w);
  }
  return vocab;
}

// ---- Unigram vocabulary (SentencePiece style): pieces with log-probability scores. Scores are
// rounded to 0.25 so that different segmentations often tie (tie-breaking is part of the test).
function unigramVocab(specials, normalize, size, wordMark) {
  const pieces = counter();
  for (const s of TRAIN) {
    const text = normalize(s);
    const cs = [...text];
    for (let i = 0; i < cs.length; ++i) {
      for (let n = 1; n <= 6 && i + n <= cs.length; ++n) {
        const p = cs.slice(i, i + n).join("");
        if (n > 1 && /\s/u.test(p)) break;
        pieces.add(p);
      }
    }
  }
  const chosen = [];
  const seen = new Set(specials);
  // Single characters first (frequent ones only), then the most frequent multi-character pieces.
  for (const [p, c] of top(pieces.map, 100000, 3)) if ([...p].length === 1 && !seen.has(p)) (seen.add(p), chosen.push([p, c]));
  for (const [p, c] of top(pieces.map, 100000, 6)) {
    if (chosen.length + specials.length >= size) break;
    if (!seen.has(p)) (seen.add(p), chosen.push([p, c]));
  }
  if (wordMark && !seen.has(wordMark)) chosen.push([wordMark, 1000]);
  const total = chosen.reduce((a, [, c]) => a + c, 0);
  const vocab = specials.map((s) => [s, 0.0]);
  for (const [p, c] of chosen) {
    const lp = Math.log(c / total) - 0.35 * ([...p].length - 1);
    vocab.push([p, Math.round(lp * 4) / 4]);
  }
  return vocab;
}

const lowerStrip = (s) => s.toLowerCase().normalize("NFD").replace(/\p{Mn}/gu, "");

// 1. bert_uncased: the bert-base-uncased pipeline.
{
  const specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"];
  const vocab = wordpieceVocab(specials, lowerStrip, 3000);
  write(
    "bert_uncased",
    {
      version: "1.0",
      truncation: null,
      padding: null,
      added_tokens: specials.map((s, i) => added(i, s)),
      normalizer: { type: "BertNormalizer", clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase: true },
      pre_tokenizer: { type: "BertPreTokenizer" },
      post_processor: { type: "BertProcessing", sep: ["[SEP]", 3], cls: ["[CLS]", 2] },
      decoder: { type: "WordPiece", prefix: "##", cleanup: true },
      model: { type: "WordPiece", unk_token: "[UNK]", continuing_subword_prefix: "##", max_input_chars_per_word: 100, vocab },
    },
    { tokenizer_class: "BertTokenizer", clean_up_tokenization_spaces: true, unk_token: "[UNK]", do_lower_case: true }
  );
}

// 2. wordpiece_cased: cased WordPiece behind a Sequence of pre-tokenizers, short words only.
{
  const specials = ["<pad>", "<unk>", "<s>", "</s>"];
  const vocab = wordpieceVocab(specials, (s) => s.normalize("NFD").replace(/\p{M}/gu, ""), 2500);
  write(
    "wordpiece_cased",
    {
      version: "1.0",
      added_tokens: specials.map((s, i) => added(i, s)),
      normalizer: {
        type: "Sequence",
        normalizers: [
          { type: "BertNormalizer", clean_text: true, handle_chinese_chars: false, strip_accents: true, lowercase: false },
          { type: "NFD" },
          { type: "StripAccents" },
          { type: "Strip", strip_left: true, strip_right: true },
        ],
      },
      pre_tokenizer: {
        type: "Sequence",
        pretokenizers: [
          { type: "WhitespaceSplit" },
          { type: "Punctuation", behavior: "Isolated" },
          { type: "Digits", individual_digits: true },
        ],
      },
      post_processor: {
        type: "TemplateProcessing",
        single: [{ SpecialToken: { id: "<s>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: "</s>", type_id: 0 } }],
        pair: [{ Sequence: { id: "A", type_id: 0 } }, { Sequence: { id: "B", type_id: 1 } }],
        special_tokens: { "<s>": { id: "<s>", ids: [2], tokens: ["<s>"] }, "</s>": { id: "</s>", ids: [3], tokens: ["</s>"] } },
      },
      decoder: { type: "WordPiece", prefix: "##", cleanup: false },
      model: { type: "WordPiece", unk_token: "<unk>", continuing_subword_prefix: "##", max_input_chars_per_word: 12, vocab },
    },
    { tokenizer_class: "PreTrainedTokenizer", clean_up_tokenization_spaces: false }
  );
}

// 3. unigram_spm: a T5 / ALBERT style SentencePiece unigram: Precompiled + Metaspace.
{
  const specials = ["<pad>", "</s>", "<unk>"];
  const norm = (s) => "\u2581" + s.normalize("NFKC").replace(/ /g, "\u2581");
  const vocab = unigramVocab(specials, norm, 4000, "\u2581");
  write(
    "unigram_spm",
    {
      version: "1.0",
      added_tokens: specials.map((s, i) => added(i, s)),
      // transformers.js does not read the charsmap (it applies nmt_nfkc approximately); this
      // blob is a placeholder, not a real SentencePiece table.
      normalizer: { type: "Precompiled", precompiled_charsmap: "AAAAAAAAAAA=" },
      pre_tokenizer: { type: "Metaspace", replacement: "\u2581", add_prefix_space: true, prepend_scheme: "always", split: true },
      post_processor: {
        type: "TemplateProcessing",
        single: [{ Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: "</s>", type_id: 0 } }],
        pair: [{ Sequence: { id: "A", type_id: 0 } }, { Sequence: { id: "B", type_id: 0 } }],
        special_tokens: { "</s>": { id: "</s>", ids: [1], tokens: ["</s>"] } },
      },
      decoder: { type: "Metaspace", replacement: "\u2581", add_prefix_space: true, prepend_scheme: "always", split: true },
      model: { type: "Unigram", unk_id: 2, vocab, byte_fallback: false },
    },
    { tokenizer_class: "T5Tokenizer", clean_up_tokenization_spaces: true, eos_token: "</s>", unk_token: "<unk>", pad_token: "<pad>" }
  );
}

// 4. unigram_lower: Unigram (byte_fallback set, which transformers.js ignores) behind lowercasing
// normalizers and Whitespace + Digits, with a SentencePiece-style decoder chain.
{
  const specials = ["<unk>", "<s>", "</s>"];
  const norm = (s) => s.normalize("NFKD").replace(/\p{M}/gu, "").toLowerCase();
  const vocab = unigramVocab(specials, norm, 3000, null);
  for (let b = 0; b < 256; ++b) vocab.push(["<0x" + b.toString(16).toUpperCase().padStart(2, "0") + ">", 0.0]);
  write(
    "unigram_lower",
    {
      version: "1.0",
      added_tokens: specials.map((s, i) => added(i, s)),
      normalizer: {
        type: "Sequence",
        normalizers: [
          { type: "NFKD" },
          { type: "StripAccents" },
          { type: "Lowercase" },
          { type: "Replace", pattern: { Regex: "\\s+" }, content: " " },
        ],
      },
      pre_tokenizer: { type: "Sequence", pretokenizers: [{ type: "Whitespace" }, { type: "Digits", individual_digits: false }] },
      post_processor: {
        type: "TemplateProcessing",
        single: [{ SpecialToken: { id: "<s>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
        pair: [{ Sequence: { id: "A", type_id: 0 } }, { Sequence: { id: "B", type_id: 1 } }],
        special_tokens: { "<s>": { id: "<s>", ids: [1], tokens: ["<s>"] } },
      },
      decoder: {
        type: "Sequence",
        decoders: [
          { type: "Replace", pattern: { String: "\u2581" }, content: " " },
          { type: "ByteFallback" },
          { type: "Fuse" },
          { type: "Strip", content: " ", start: 1, stop: 0 },
        ],
      },
      model: { type: "Unigram", unk_id: 0, vocab, byte_fallback: true },
    },
    { tokenizer_class: "PreTrainedTokenizer", clean_up_tokenization_spaces: false }
  );
}

// 5. chars_ctc: a wav2vec2-style character vocabulary (WordLevel, "|" between words) with the CTC
// decoder; spaces become "|" through the Replace pre-tokenizer and Split cuts characters.
{
  const chars = counter();
  for (const s of TRAIN) for (const c of s) if (!/\s/u.test(c)) chars.add(c);
  const vocab = { "<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, "|": 4 };
  let next = 5;
  for (const [c] of top(chars.map, 300, 2)) if (!(c in vocab)) vocab[c] = next++;
  write(
    "chars_ctc",
    {
      version: "1.0",
      added_tokens: ["<pad>", "<s>", "</s>", "<unk>"].map((s, i) => added(i, s)),
      normalizer: { type: "Sequence", normalizers: [{ type: "Strip", strip_left: true, strip_right: true }] },
      pre_tokenizer: {
        type: "Sequence",
        pretokenizers: [
          { type: "Replace", pattern: { String: " " }, content: "|" },
          { type: "Split", pattern: { Regex: "[^\\n\\r]" }, behavior: "Isolated", invert: true },
        ],
      },
      post_processor: null,
      decoder: { type: "CTC", pad_token: "<pad>", word_delimiter_token: "|", cleanup: true },
      model: { type: "WordLevel", vocab, unk_token: "<unk>" },
    },
    { tokenizer_class: "PreTrainedTokenizer", clean_up_tokenization_spaces: false, unk_token: "<unk>", pad_token: "<pad>" }
  );
}
