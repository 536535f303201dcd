#!/usr/bin/env python3
"""Reference renderer for the chat-template tests: renders every template x conversation with Python's
jinja2 the way Hugging Face transformers' apply_chat_template does, and writes the outputs (or the
error each one raised) as JSON. The C++ tests (tests/unit/jinja_reference_test.cc,
chat_template_test.cc) run this at test time and compare their own rendering byte for byte.

The environment mirrors transformers (utils/chat_template_utils.py):
  ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                extensions=[<generation tag>, jinja2.ext.loopcontrols])
  filters["tojson"] = json.dumps(x, ensure_ascii=False, indent=..., separators=..., sort_keys=...)
  globals raise_exception(message) and strftime_now(format) (here: a fixed date, see FIXED_NOW)
  render(messages=..., tools=<list or None>, documents=None, add_generation_prompt=...,
         **special tokens (bos_token/eos_token), **extra kwargs)

Usage: render_templates.py --templates DIR --conversations FILE --out FILE
       render_templates.py --snippets FILE --out FILE
Each record of the output: {"template", "conversation", "context", "output"} or {..., "error"}.
Snippets are small templates with their own context ({"name", "template", "context"}) that exercise
one engine feature each; their records carry the template source under "source".
"""
import argparse
import datetime
import glob
import json
import os
import sys

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

# strftime_now returns this local time; the C++ side renders with the same instant.
FIXED_NOW = datetime.datetime(2026, 1, 15, 12, 0, 0)
DEFAULT_BOS = "<s>"
DEFAULT_EOS = "</s>"


class GenerationTag(Extension):
    """transformers' {% generation %}...{% endgeneration %}: renders its body unchanged."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return FIXED_NOW.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def special_tokens(template_path):
    config_path = template_path[: -len(".jinja")] + ".tokenizer_config.json"
    if not os.path.exists(config_path):
        return {"bos_token": DEFAULT_BOS, "eos_token": DEFAULT_EOS}
    with open(config_path, encoding="utf-8") as f:
        config = json.load(f)
    tokens = {}
    for key in ("bos_token", "eos_token"):
        value = config.get(key)
        if isinstance(value, dict):
            value = value.get("content")
        if value is not None:
            tokens[key] = value
    return tokens


def normalise_messages(messages):
    """What vLLM does before rendering (and src/text/chat_template.cc too): JSON-string tool-call
    arguments become objects (none, null or blank: an empty object), `reasoning` is copied to
    `reasoning_content`, a null or missing `content` is "", and the `developer` role
    is treated as `system`."""
    out = json.loads(json.dumps(messages))
    for m in out:
        if m.get("role") == "developer":
            m["role"] = "system"
        if m.get("content") is None:
            m["content"] = ""
        if isinstance(m.get("reasoning"), str) and "reasoning_content" not in m:
            m["reasoning_content"] = m["reasoning"]
        for tc in m.get("tool_calls") or []:
            fn = tc.get("function") if isinstance(tc.get("function"), dict) else tc
            args = fn.get("arguments")
            if fn is not tc and (args is None or (isinstance(args, str) and not args.strip(" \t\r\n"))):
                fn["arguments"] = {}  # a call without arguments, as vLLM renders it
                continue
            if isinstance(fn.get("arguments"), str):
                try:
                    parsed = json.loads(fn["arguments"])
                except ValueError:
                    continue
                if isinstance(parsed, dict):
                    fn["arguments"] = parsed
    return out


def make_context(conversation, tokens, normalise=False):
    messages = conversation["messages"]
    context = {
        "messages": normalise_messages(messages) if normalise else messages,
        "tools": conversation.get("tools"),
        "documents": None,
        "add_generation_prompt": conversation.get("add_generation_prompt", False),
    }
    context.update(tokens)
    context.update(conversation.get("kwargs", {}))
    return context


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--templates", help="folder of *.jinja templates")
    parser.add_argument("--conversations", help="JSON list of conversations")
    parser.add_argument("--snippets", help="JSON list of {name, template, context}")
    parser.add_argument("--normalise", action="store_true",
                        help="normalise messages as the chat-template module does before rendering")
    parser.add_argument("--only", help="render only templates whose file name contains this")
    parser.add_argument("--out", required=True, help="where to write the expected outputs (JSON)")
    args = parser.parse_args()

    env = make_environment()
    records = []
    if args.snippets:
        with open(args.snippets, encoding="utf-8") as f:
            snippets = json.load(f)
        for snippet in snippets:
            record = {"template": snippet["name"], "source": snippet["template"], "context": snippet.get("context", {})}
            try:
                record["output"] = env.from_string(snippet["template"]).render(**record["context"])
            except Exception as e:
                record["error"] = f"{type(e).__name__}: {e}"
            records.append(record)
        conversations = []
    else:
        if not args.templates or not args.conversations:
            parser.error("--templates and --conversations are required without --snippets")
        with open(args.conversations, encoding="utf-8") as f:
            conversations = json.load(f)
    for path in sorted(glob.glob(os.path.join(args.templates, "*.jinja"))) if conversations else []:
        # newline="" keeps \r\n as stored: jinja2 itself normalises line endings.
        if args.only and args.only not in os.path.basename(path):
            continue
        with open(path, encoding="utf-8", newline="") as f:
            source = f.read()
        try:
            template = env.from_string(source)
            parse_error = None
        except Exception as e:  # a template jinja2 cannot parse: every case records the error
            template, parse_error = None, f"{type(e).__name__}: {e}"
        tokens = special_tokens(path)
        for conversation in conversations:
            context = make_context(conversation, tokens, args.normalise)
            record = {"template": os.path.basename(path), "conversation": conversation["name"], "context": context}
            if parse_error:
                record["error"] = parse_error
                records.append(record)
                continue
            try:
                record["output"] = template.render(**context)
            except Exception as e:  # any exception is an expected failure our engine must reproduce
                record["error"] = f"{type(e).__name__}: {e}"
            records.append(record)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(records, f, ensure_ascii=False, indent=1)
    print(f"rendered {len(records)} cases to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
