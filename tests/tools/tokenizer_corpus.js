// Deterministic string corpus for the tokenizer parity test (tests/unit/tokenizer_parity_test.cc).
// generate(n, seed) returns n strings mixing prose in many scripts, code, whitespace runs, digit
// runs, emoji (ZWJ sequences, flags, keycaps, skin tones), text spelling added tokens, combining
// sequences that NFC recomposes, and "invalid UTF-8": random bytes decoded the way a server would
// (TextDecoder, U+FFFD per maximal subpart) and lone surrogates made well-formed. Every string is
// well-formed Unicode, so the C++ side reads exactly the UTF-8 the JavaScript side tokenized.
//
// Characters are drawn from blocks assigned long before Unicode 14 (PCRE2 10.42's tables), so that
// \p{L}/\p{N} agree between PCRE2 and V8. U+017F (long s) is left out on purpose: Oniguruma and
// PCRE2 fold it to "s" in (?i:'s), transformers.js rewrites (?i:...) to [sS] and does not.
"use strict";

function mulberry32(seed) {
  let a = seed >>> 0;
  return function () {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const SCRIPTS = {
  latin: [[0x61, 0x7a], [0x41, 0x5a], [0xe0, 0xff], [0xc0, 0xde], [0x100, 0x17e]],
  cyrillic: [[0x430, 0x44f], [0x410, 0x42f], [0x451, 0x451]],
  greek: [[0x3b1, 0x3c9], [0x391, 0x3a9], [0x3ac, 0x3af]],
  arabic: [[0x621, 0x64a], [0x64b, 0x652]],
  hebrew: [[0x5d0, 0x5ea]],
  devanagari: [[0x905, 0x939], [0x93e, 0x94d], [0x902, 0x903]],
  thai: [[0xe01, 0xe2e], [0xe30, 0xe3a], [0xe40, 0xe4e]],
  cjk: [[0x4e00, 0x9fa5]],
  hiragana: [[0x3041, 0x3093]],
  katakana: [[0x30a1, 0x30f6]],
  hangul: [[0xac00, 0xd7a3]],
  armenian: [[0x561, 0x586]],
  georgian: [[0x10d0, 0x10fa]],
  tamil: [[0xb85, 0xb94], [0xb95, 0xbb9], [0xbbe, 0xbcd]],
};

const WORDS = [
  "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "tokenizer", "inference", "server",
  "don't", "I'm", "they're", "we've", "you'll", "it'd", "She's", "DON'T", "THEY'RE", "can't",
  "café", "naïve", "Straße", "über", "façade", "résumé", "Ελλάδα", "Москва", "привет", "мир",
  "東京", "北京大学", "こんにちは", "カタカナ", "안녕하세요", "مرحبا", "שלום", "नमस्ते", "हिन्दी",
  "สวัสดี", "Việt", "Nguyễn", "tiếng", "Łódź", "Ångström", "İstanbul", "ǅemal", "ΣΊΣΥΦΟΣ",
  "HTTPServer", "camelCase", "snake_case", "XMLHttpRequest", "iPhone", "McDonald's", "O'Neil",
];

const SPECIAL_SPELLINGS = [
  "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|begin_of_text|>", "<|end_of_text|>",
  "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|reserved_special_token_5|>",
  "<think>", "</think>", "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>",
  "<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|return|>", "<|call|>", "<|constrain|>",
  "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<｜tool▁sep｜>",
  "<|im_start", "im_end|>", "<|", "|>", "<|user|>", "[gMASK]", "<sop>", "<|im_start|><|im_end|>",
];

const EMOJI = [
  "😀", "😂", "🤖", "🚀", "❤️", "👍🏽", "👩🏿‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🧑‍🤝‍🧑", "🇯🇵", "🇫🇷🇩🇪",
  "1️⃣", "#️⃣", "©️", "☕", "✨", "🔥", "👁️‍🗨️", "🐻‍❄️", "🧔🏻‍♂️", "🫠", "🥲", "⌚", "🕵️‍♀️",
];

const WHITESPACE = [" ", "  ", "\t", "\n", "\r\n", "\n\n", " \n", "\t\t", "    ", "\u00a0", "\u3000", "\u2003", "\r", " \t \n"];

const COMBINING = [0x300, 0x301, 0x302, 0x303, 0x308, 0x30a, 0x323, 0x327, 0x328, 0x331, 0x338, 0x345, 0x31b];

function makeGen(rand) {
  const int = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));
  const pick = (arr) => arr[Math.floor(rand() * arr.length)];
  const cp = (ranges) => {
    const [lo, hi] = pick(ranges);
    let c = int(lo, hi);
    if (c === 0x17f) c = 0x73;
    return String.fromCodePoint(c);
  };
  const word = (script) => {
    let s = "";
    const n = script === "cjk" ? int(1, 4) : int(1, 10);
    for (let i = 0; i < n; ++i) s += cp(SCRIPTS[script]);
    return s;
  };
  const sentence = (script) => {
    const parts = [];
    const n = int(1, 14);
    for (let i = 0; i < n; ++i) parts.push(rand() < 0.3 ? pick(WORDS) : word(script));
    const sep = script === "cjk" || script === "hiragana" || script === "katakana" ? pick(["", "", " "]) : " ";
    let s = parts.join(sep);
    s += pick([".", "!", "?", "。", "，", "…", ":", ";", "", "", "..."]);
    if (rand() < 0.3) s = s[0].toUpperCase() + s.slice(1);
    return s;
  };
  const digits = () => {
    const n = int(1, 30);
    let s = "";
    const set = pick(["0123456789", "0123456789", "٠١٢٣٤٥٦٧٨٩", "０１２３４５６７８９", "०१२३४५६७८९", "0123456789.,"]);
    const chars = Array.from(set);
    for (let i = 0; i < n; ++i) s += pick(chars);
    return s;
  };
  const code = () => {
    const id = () => pick(["x", "value", "self", "i", "node", "buf", "kMax", "tf_status_", "__init__", "ptr"]);
    const lines = [];
    const n = int(1, 8);
    const indent = pick(["    ", "  ", "\t", ""]);
    for (let i = 0; i < n; ++i) {
      const depth = int(0, 3);
      const body = pick([
        `def ${id()}(${id()}, ${id()}=${int(0, 999)}):`,
        `for (int ${id()} = 0; ${id()} < ${int(1, 4096)}; ++${id()}) {`,
        `return ${id()}->${id()}[${int(0, 64)}] * 2.5e-3;`,
        `const ${id()} = await fetch("https://example.com/${id()}?q=${int(0, 99)}");`,
        `if ${id()} is not None and ${id()} != '${word("latin")}':`,
        `}`, `#include <vector>`, `// TODO(${id()}): fix ${word("latin")}`, `x += 0x${int(0, 65535).toString(16)};`,
        `printf("%d\\n", ${id()});`, `SELECT * FROM t WHERE id = ${int(0, 1e6)};`, `<div class="${id()}">${word("latin")}</div>`,
        `    `, ``, `\t\t${id()}: ${id()},`,
      ]);
      lines.push(indent.repeat(depth) + body);
    }
    return lines.join(pick(["\n", "\n", "\r\n", "\n\n"]));
  };
  const whitespaceMix = () => {
    let s = "";
    const n = int(1, 8);
    for (let i = 0; i < n; ++i) s += pick(WHITESPACE) + (rand() < 0.6 ? pick(WORDS) : "");
    return s;
  };
  const emoji = () => {
    let s = "";
    const n = int(1, 6);
    for (let i = 0; i < n; ++i) s += pick(EMOJI) + (rand() < 0.4 ? pick([" ", "", "!", pick(WORDS)]) : "");
    return s;
  };
  const specials = () => {
    let s = "";
    const n = int(1, 5);
    for (let i = 0; i < n; ++i) {
      s += pick(SPECIAL_SPELLINGS);
      if (rand() < 0.7) s += pick(["user\n", "assistant\n", " ", "\n", sentence("latin"), "", "system"]);
    }
    return s;
  };
  const combining = () => {
    let s = "";
    const n = int(1, 6);
    for (let i = 0; i < n; ++i) {
      const base = pick(["a", "e", "o", "u", "A", "n", "c", "s", "ω", "и", "\u1100\u1161", "\u1100\u1161\u11a8", " "]);
      s += base;
      const m = int(0, 3);
      for (let j = 0; j < m; ++j) s += String.fromCodePoint(pick(COMBINING));
      if (rand() < 0.3) s += pick(WORDS);
    }
    return s;
  };
  const invalidUtf8 = () => {
    const n = int(1, 24);
    const bytes = new Uint8Array(n);
    for (let i = 0; i < n; ++i) bytes[i] = rand() < 0.5 ? int(0x20, 0x7e) : int(0x80, 0xff);
    return new TextDecoder("utf-8", { fatal: false, ignoreBOM: true }).decode(bytes);
  };
  const loneSurrogate = () => {
    const s = pick(WORDS) + String.fromCharCode(int(0xd800, 0xdfff)) + pick(WORDS);
    return s.toWellFormed();
  };
  const randomMix = () => {
    let s = "";
    const n = int(1, 40);
    const all = Object.keys(SCRIPTS);
    for (let i = 0; i < n; ++i) {
      const r = rand();
      if (r < 0.5) s += cp(SCRIPTS[pick(all)]);
      else if (r < 0.6) s += pick(WHITESPACE);
      else if (r < 0.75) s += pick(Array.from("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~«»“”‘’—–・"));
      else if (r < 0.85) s += String(int(0, 99999));
      else s += String.fromCodePoint(int(0x20, 0x7e));
    }
    return s;
  };
  const long = () => {
    const parts = [];
    const n = int(20, 80);
    const all = Object.keys(SCRIPTS);
    for (let i = 0; i < n; ++i) parts.push(sentence(pick(all)));
    return parts.join(pick([" ", "\n", "\n\n"]));
  };
  const prose = () => sentence(pick(Object.keys(SCRIPTS)));
  const mixed = () => {
    const fs = [prose, code, digits, emoji, specials, whitespaceMix, combining];
    let s = "";
    const n = int(2, 5);
    for (let i = 0; i < n; ++i) s += pick(fs)() + pick(["", " ", "\n"]);
    return s;
  };
  return [
    [prose, 20], [code, 10], [digits, 6], [whitespaceMix, 8], [emoji, 6], [specials, 8],
    [combining, 8], [invalidUtf8, 5], [loneSurrogate, 2], [randomMix, 12], [mixed, 14], [long, 1],
  ];
}

function generate(n = 10000, seed = 20261129) {
  const rand = mulberry32(seed);
  const gens = makeGen(rand);
  const total = gens.reduce((a, [, w]) => a + w, 0);
  const fixed = [
    "", " ", "  ", "\n", "\t", "a", "Hello world", "Hello, world!", " leading space", "trailing space ",
    "don't stop", "I'M HERE", "1234567890", "3.14159", "e\u0301", "\u00e9", "\u1100\u1161\u11a8",
    "<|im_start|>user\nHi<|im_end|>", "<|endoftext|>", "\ufffd", "🤖👨‍👩‍👧‍👦", "a\u0323\u0302", "a\u0302\u0323",
  ];
  const out = fixed.slice(0, n);
  while (out.length < n) {
    let r = rand() * total;
    for (const [g, w] of gens) {
      r -= w;
      if (r < 0) {
        out.push(g());
        break;
      }
    }
  }
  return out;
}

module.exports = { generate };
