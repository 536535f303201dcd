#!/usr/bin/env python3
"""Differential fuzzer for the Jinja engine: renders many small templates with Python's jinja2 (in
transformers' environment, as tests/tools/render_templates.py sets it up) and with our engine (the
test-only tool jinja_render, built from tests/tools/jinja_render.cc), and prints every case where
they differ: different output, or one side raising while the other renders. Not run by CI.

Usage:
  cmake --build build-jinja --target jinja_render
  tests/tools/jinja_diff.py --bin build-jinja/tests/unit/jinja_render [--count 3000] [--seed 1]
                            [--only fixed|random] [--show 40] [--save FILE]

The cases are a fixed list of hand-written templates covering the language (expressions, operators
and precedence, str/list/dict methods, slicing, filters and tests, loops, macros, call blocks,
set/namespace, whitespace control, raw blocks, comments, escapes, number formatting, `%` and
format, undefined handling and errors) plus random ones: expressions (operators, filters, methods,
tests, str.format and `%` conversions with random specs), statement blocks with random whitespace
control, and text for the string filters (striptags, wordwrap, urlencode, xmlattr, urlize).
An error on both sides counts as agreement (the messages are not compared).

Known, accepted differences it reports: arithmetic on integers beyond 64 bits (we raise OverflowError;
such integers print, compare and dump exactly), the
repr of generators, bound methods, macros, range and dict views, pprint of values wider than 80
columns, a few exotic format specs, and slicing a non-sequence *literal* (jinja2 folds the constant
to Undefined at compile time; a variable raises TypeError, as we do).
"""
import argparse
import copy
import json
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from render_templates import make_environment  # noqa: E402

# Variables every case can use.
CONTEXT = {
    "s": "Hello, World",
    "u": "héllo wörld ß",
    "e": "",
    "ws": "  padded\ttext \n",
    "n": 7,
    "neg": -3,
    "z": 0,
    "big": 12345678901234567,
    "f": 2.5,
    "tiny": 1e-7,
    "huge": 1.5e300,
    "t": True,
    "no": False,
    "nul": None,
    "l": [3, 1, 2],
    "sl": ["b", "A", "c"],
    "el": [],
    "d": {"b": 2, "a": 1, "c": None},
    "ed": {},
    "msgs": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi <there> & \"you\""},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "get", "arguments": {"x": 1, "y": "two"}}}]},
        {"role": "tool", "content": "{\"ok\": true}"},
    ],
    "html": "<p>Hi &amp; <b>bye</b></p>\n<!-- c -->  <br/>x",
    "url": "see https://example.com/a?b=1&c=2 and www.test.org, mail me@x.io.",
    "long": "The quick brown fox jumps over the lazy dog and keeps on running far away",
}

# Hand-written cases: each a template using CONTEXT.
FIXED = [
    # expressions and precedence
    "{{ 1 + 2 * 3 - 4 / 2 }}", "{{ 2 ** 3 ** 2 }}", "{{ -2 ** 2 }}", "{{ (-2) ** 2 }}", "{{ 7 // 2 }} {{ -7 // 2 }}",
    "{{ -7 % 3 }} {{ 7 % -3 }}", "{{ 7.5 // 2 }} {{ -7.5 % 2 }}", "{{ 1 / 3 }}", "{{ 10 / 2 }}", "{{ 2 ** -1 }}",
    "{{ 1e3 }} {{ 1E-5 }} {{ 1_000 }} {{ 0.1 + 0.2 }}", "{{ 1e16 }} {{ 1e15 }} {{ 123456789.123456789 }}",
    "{{ big * 1000 }}", "{{ big ** 2 }}", "{{ 9223372036854775807 + 1 }}", "{{ 2 ** 64 }}", "{{ 2 ** 63 }}",
    "{{ -9223372036854775808 }}", "{{ 9223372036854775807 * 2 }}", "{{ 10 ** 20 }}", "{{ huge * 10 }}",
    "{{ huge * huge }}", "{{ 1.0 / 0 }}", "{{ 5 % 0 }}", "{{ 1 // 0 }}", "{{ 1.5 // 0 }}",
    "{{ not 1 == 2 }}", "{{ not 1 and 0 }}", "{{ 1 or 2 and 0 }}", "{{ 1 < 2 < 3 }}", "{{ 3 > 2 == 2 }}",
    "{{ 'a' ~ 1 ~ none ~ true }}", "{{ 1 ~ 2 + 3 }}", "{{ 'ab' * 3 }}", "{{ 3 * 'ab' }}", "{{ [1] * 2 }}",
    "{{ 'a' in 'cat' }} {{ 'x' not in 'cat' }} {{ 1 in l }} {{ 'a' in d }}", "{{ 1 in d }}",
    "{{ 'b' if t else 'c' }}", "{{ 'b' if no }}|", "{{ 'x' if nul is none else 'y' }}",
    "{{ 1 if 0 else 2 if 0 else 3 }}", "{{ (1, 2) }} {{ (1,) }} {{ () }}", "{{ [1, 'a', none, true, 1.0] }}",
    "{{ {'a': 1, 2: 'b'} }}", "{{ {'a': [1, {'b': none}]} }}", "{{ l + [4] }}", "{{ (1, 2) + (3,) }}",
    "{{ d.a }} {{ d['b'] }} {{ d.get('c') }} {{ d.get('zz', 9) }}", "{{ l[0] }} {{ l[-1] }} {{ l[5] }}|",
    "{{ s[0] }}{{ s[-1] }}{{ s[1:3] }}{{ s[::-1] }}{{ s[::2] }}{{ s[-3:] }}{{ s[:-3] }}", "{{ l[::-1] }} {{ l[1:] }}",
    "{{ u[1:4] }} {{ u[::-1] }} {{ u|length }}", "{{ s[10:2:-2] }} {{ l[-10:10] }}", "{{ s[::0] }}",
    "{{ 'a' + 1 }}", "{{ 1 + 'a' }}", "{{ none + 1 }}", "{{ l + 1 }}", "{{ d + d }}", "{{ -'a' }}",
    "{{ 'abc' < 'abd' }} {{ [1, 2] < [1, 3] }} {{ (1, 2) == [1, 2] }}", "{{ 1 < 'a' }}", "{{ none < 1 }}",
    "{{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' == 'a' }} {{ none == none }} {{ l == [3, 1, 2] }}",
    "{{ 0.1 * 3 }} {{ 1 / 7 }} {{ 2.0 }} {{ 1e100 }} {{ -0.0 }} {{ 3.14159e-10 }}", "{{ 100000000000000000000.0 }}",
    "{{ 1.0e-4 }} {{ 1.0e-5 }} {{ 123e18 }} {{ 5e-324 }} {{ 1.7976931348623157e308 }}",
    "{{ 0x1F }} {{ 0o17 }} {{ 0b101 }}", "{{ 'a\\tb\\n' }}|{{ \"it's\" }}|{{ 'say \"hi\"' }}", "{{ '\\u00e9\\x41' }}",
    "{{ 'a' 'b' }}", "{{ '\\\\' }}", "{{ '\\q' }}", "{{ \"\\'\" }}",
    # undefined handling
    "{{ missing }}|", "{{ missing.attr }}", "{{ missing['x'] }}", "{{ missing is defined }}", "{{ d.zz }}|",
    "{{ d.zz.yy }}", "{{ missing or 'x' }}", "{{ missing ~ 'x' }}", "{{ missing + 1 }}", "{{ missing | length }}",
    "{{ missing | default('dflt') }}", "{{ nul | default('dflt') }}", "{{ '' | default('dflt', true) }}",
    "{% for x in missing %}{{ x }}{% endfor %}|", "{{ missing() }}", "{{ s.nomethod() }}", "{{ missing | upper }}",
    "{{ missing | string }}", "{{ missing | list }}", "{{ [missing] }}", "{{ missing == none }}", "{{ not missing }}",
    "{% if missing %}a{% else %}b{% endif %}", "{{ missing | tojson }}", "{{ d.c.x }}", "{{ nul.x }}",
    "{{ missing is none }}", "{{ missing | int }}", "{{ missing in l }}", "{{ l[missing] }}",
    # string methods
    "{{ s.split(',') }} {{ s.split() }} {{ ws.split() }} {{ 'a,b,,c'.split(',', 1) }} {{ 'a b'.rsplit(' ', 1) }}",
    "{{ ws.strip() }}|{{ ws.lstrip() }}|{{ ws.rstrip() }}|{{ 'xxhixx'.strip('x') }}",
    "{{ s.startswith('He') }} {{ s.endswith(('x', 'ld')) }} {{ s.startswith('o', 4) }}",
    "{{ s.upper() }} {{ s.lower() }} {{ s.title() }} {{ 'hello world'.capitalize() }} {{ u.upper() }}",
    "{{ s.replace('l', 'L') }} {{ s.replace('l', 'L', 2) }} {{ s.find('o') }} {{ s.rfind('o') }} {{ s.count('l') }}",
    "{{ s.index('z') }}", "{{ '-'.join(sl) }} {{ ', '.join(['a', 'b']) }}", "{{ '-'.join(l) }}",
    "{{ '{} and {}'.format(1, 'b') }} {{ '{0}{1}{0}'.format('a', 'b') }} {{ '{x}'.format(x=5) }}",
    "{{ '{:>8}|{:<4}|{:^6}'.format('a', 'b', 'c') }}", "{{ '{:.2f} {:5d} {:e} {:x} {:,}'.format(3.14159, 42, 12345.678, 255, 1234567) }}",
    "{{ 'a\\nb\\r\\nc'.splitlines() }}", "{{ 'abc'.center(9, '*') }} {{ '5'.zfill(3) }} {{ 'ab'.ljust(4) }}|",
    "{{ 'Hello'.isalpha() }} {{ '123'.isdigit() }} {{ ' '.isspace() }} {{ 'abc'.islower() }}",
    "{{ s.partition(', ') }} {{ 'x.y.z'.rpartition('.') }}", "{{ s.removeprefix('Hell') }} {{ s.removesuffix('ld') }}",
    "{{ 'a\\tb'.expandtabs(4) }}", "{{ 'ABC'.swapcase() }} {{ 'ß'.casefold() }}",
    "{{ s.encode() }}", "{{ s.format_map({}) }}", "{{ s.__class__ }}", "{{ s.split(',')[1].strip() }}",
    # list / dict methods
    "{{ d.items() | list }} {{ d.keys() | list }} {{ d.values() | list }}", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
    "{{ d.items() }}", "{{ d.keys() }}", "{{ l.index(2) }} {{ l.count(3) }}", "{{ l.append(4) }}", "{{ d.pop('a') }}",
    "{{ d.update({'x': 1}) }}", "{{ d | length }} {{ ed | length }} {{ d | list }}", "{{ d.copy() }}",
    "{{ d['zz'] }}|", "{{ l.sort() }}", "{{ (1, 2).count(1) }}", "{{ d.setdefault('q', 1) }}",
    # filters
    "{{ l | sort }} {{ l | sort(reverse=true) }} {{ sl | sort }} {{ sl | sort(case_sensitive=true) }}",
    "{{ l | join(', ') }} {{ msgs | map(attribute='role') | join('|') }} {{ msgs | join(',', attribute='role') }}",
    "{{ l | first }} {{ l | last }} {{ l | min }} {{ l | max }} {{ l | sum }} {{ l | length }} {{ l | count }}",
    "{{ msgs | selectattr('role', 'equalto', 'user') | list | length }}", "{{ msgs | rejectattr('content') | list | length }}",
    "{{ l | select('odd') | list }} {{ l | reject('even') | list }} {{ l | map('string') | list }}",
    "{{ msgs | map(attribute='missing', default='D') | list }}", "{{ l | map('add', 1) | list }}",
    "{{ s | upper }} {{ s | lower }} {{ s | title }} {{ s | capitalize }} {{ s | length }} {{ s | wordcount }}",
    "{{ s | replace('o', '0') }} {{ s | trim }} {{ ws | trim }}|{{ 'xxyxx' | trim('x') }}",
    "{{ s | truncate(9) }} {{ long | truncate(20) }} {{ long | truncate(20, true) }} {{ long | truncate(20, false, '..', 0) }}",
    "{{ 3.7 | int }} {{ '42' | int }} {{ 'x' | int }} {{ '0x1A' | int(0, 16) }} {{ '3.5' | float }} {{ 'ab' | float }}",
    "{{ '0b101' | int(base=2) }} {{ '0o17' | int(0, 8) }} {{ '  12  ' | int }} {{ '1_000' | int }}",
    "{{ 2.567 | round(2) }} {{ 2.5 | round }} {{ 3.5 | round }} {{ 2.1 | round(0, 'ceil') }} {{ 2.9 | round(method='floor') }}",
    "{{ -3 | abs }} {{ -2.5 | abs }} {{ 1 | float }} {{ 5 | string }} {{ true | int }}",
    "{{ l | list | reverse | list }} {{ s | reverse }} {{ l | unique | list }} {{ [1, 1, 2] | unique | list }}",
    "{{ d | dictsort }} {{ d | dictsort(by='value') }}", "{{ d | dictsort(reverse=true) }}", "{{ d | items | list }}",
    "{{ 'a\\nb' | indent }} {{ 'a\\n\\nb' | indent(2, true) }} {{ 'a\\nb' | indent(2, blank=true) }}|",
    "{{ 'a\\nb\\n' | indent(first=true) }}|", "{{ l | batch(2) | list }} {{ l | batch(2, 'x') | list }}",
    "{{ l | slice(2) | list }} {{ [1,2,3,4,5] | slice(3, 0) | list }}", "{{ 'x' | center(7) }}|",
    "{{ msgs | groupby('role') | map(attribute='grouper') | list }}", "{{ 1234567 | filesizeformat }} {{ 1234567 | filesizeformat(true) }}",
    "{{ d | pprint }} {{ l | pprint }}", "{{ 'a<b>' | escape }} {{ 'a<b>' | e }} {{ 'a<b>' | safe }} {{ 'a<b>' | forceescape }}",
    "{{ '%s-%d' | format('a', 3) }} {{ '%(x)s' | format(x=1) }} {{ '%5.2f|%-4s|%03d' | format(3.14159, 'a', 7) }}",
    "{{ d | tojson }} {{ msgs[2] | tojson }} {{ u | tojson }} {{ 'a\"b' | tojson }}", "{{ d | tojson(indent=2) }}",
    "{{ l | tojson(separators=(',', ':')) }}", "{{ d | tojson(sort_keys=true) }}", "{{ 1.0 | tojson }} {{ big | tojson }}",
    "{{ d | attr('items') is callable }}", "{{ l | random is defined }}", "{{ s | urlencode }}",
    "{{ 'a b&c=d/é?' | urlencode }} {{ {'a': 'b c', 'x': 1} | urlencode }} {{ [('k', 'v'), ('a', 'b&')] | urlencode }}",
    "{{ 5 | urlencode }}", "{{ html | striptags }}", "{{ '  a  \\n\\t b  ' | striptags }}", "{{ 'a &lt; b &#39; &#x41; &foo;' | striptags }}",
    "{{ long | wordwrap(20) }}", "{{ long | wordwrap(15, false) }}", "{{ long | wordwrap(20, wrapstring='|') }}",
    "{{ 'abcdefghijklmnopqrstuvwxyz0123456789' | wordwrap(10) }}", "{{ 'abcdefghijklmnopqrstuvwxyz0123456789' | wordwrap(10, false) }}",
    "{{ 'a\\n\\nb c d e f g h' | wordwrap(3) }}", "{{ 'a\\r\\nb c d e f g' | wordwrap(5) }}", "{{ 'hello-world-again' | wordwrap(6) }}",
    "{{ 'hello-world-again' | wordwrap(6, break_on_hyphens=false) }}", "{{ 'x  y   z' | wordwrap(3) }}",
    "{{ {'class': 'x', 'id': none, 'data': 'a\"b'} | xmlattr }}", "{{ {'a': 1} | xmlattr(false) }}", "{{ {'a b': 1} | xmlattr }}",
    "{{ {'x': missing} | xmlattr }}|", "{{ url | urlize }}", "{{ url | urlize(15) }}", "{{ url | urlize(nofollow=true) }}",
    "{{ 'go to http://a.com.' | urlize(target='_blank') }}", "{{ '<http://x.y>' | urlize }}", "{{ 'a@b.com' | urlize }}",
    "{{ 'x.org (https://x.org/p)' | urlize }}", "{{ 'mailto:a@b.co' | urlize }}", "{{ 'ftp://x.y' | urlize(extra_schemes=['ftp:']) }}",
    "{{ html | urlize }}", "{{ 'www.x.com/a_b' | urlize(rel='me') }}", "{{ 'example.com' | urlize }}",
    "{{ 3 | wordwrap }}", "{{ 5 | striptags }}", "{{ none | striptags }}", "{{ none | urlize }}",
    # tests
    "{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 3 is number }} {{ 3.0 is integer }} {{ 3.0 is float }}",
    "{{ 'a' is string }} {{ l is iterable }} {{ l is sequence }} {{ d is mapping }} {{ none is none }} {{ true is boolean }}",
    "{{ 1 is eq 1 }} {{ 2 is gt 1 }} {{ 'A' is upper }} {{ 'a' is lower }} {{ l is sameas l }} {{ 1 is in l }}",
    "{{ 'upper' is filter }} {{ 'odd' is test }} {{ range is callable }} {{ 1 is true }} {{ false is false }}",
    "{{ 'a' is odd }}", "{{ x is nosuchtest }}", "{{ 1 is not string and 1 is not none }}", "{{ 5 is ge(3) }}",
    # loops
    "{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
    "{% for x in l %}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}", "{% for x in l %}{{ loop.cycle('a', 'b') }}{% endfor %}",
    "{% for x in el %}x{% else %}empty{% endfor %}", "{% for x in l if x > 1 %}{{ x }}{{ loop.index }}{% else %}no{% endfor %}",
    "{% for x in l %}{% if x == 1 %}{% continue %}{% endif %}{{ x }}{% if x == 2 %}{% break %}{% endif %}{% endfor %}",
    "{% for a, b in [(1, 2), (3, 4)] %}{{ a + b }}{% endfor %}", "{% for c in 'abc' %}{{ c }}{% endfor %}",
    "{% for k in d %}{{ k }}{% endfor %}", "{% for x in l %}{% for y in l %}{{ loop.index }}{% endfor %}|{{ loop.index }}{% endfor %}",
    "{% for i in range(3) %}{{ i }}{% endfor %}{{ range(1, 10, 3) | list }}{{ range(5, 0, -2) | list }}",
    "{% for x in [[1, [2]], [3]] recursive %}[{% for y in x %}{% if y is iterable %}{{ loop(y) }}{% else %}{{ y }}{{ loop.depth }}{% endif %}{% endfor %}]{% endfor %}",
    "{% for x in [{'c': [{'c': []}]}] recursive %}<{{ loop.depth0 }}{{ loop(x.c) }}>{% endfor %}",
    "{% for x in l %}{{ loop.changed(x > 1) }}{% endfor %}", "{% set x = 5 %}{% for i in l %}{% set x = i %}{% endfor %}{{ x }}",
    "{% for x in l %}{{ loop.length }}{% endfor %}{{ loop }}", "{% for x in 5 %}{% endfor %}", "{% for a, b in l %}{% endfor %}",
    "{% for x in msgs | selectattr('role', 'ne', 'system') %}{{ x.role }}{% if not loop.last %},{% endif %}{% endfor %}",
    # set / namespace / scoping
    "{% set ns = namespace(x=0, y='a') %}{% for i in l %}{% set ns.x = ns.x + i %}{% endfor %}{{ ns.x }}{{ ns.y }}{{ ns }}",
    "{% set a, b = 1, 2 %}{{ a }}{{ b }}", "{% set a = [1, 2] %}{% set a = a + [3] %}{{ a }}", "{% set x %}in{{ 1 }}{% endset %}[{{ x }}]",
    "{% set x | upper %}abc{% endset %}{{ x }}", "{% set ns = namespace() %}{% set ns.a = 1 %}{{ ns.a }}{{ ns.b }}|",
    "{% set d2 = {} %}{% set d2.x = 1 %}", "{% if true %}{% set y = 1 %}{% endif %}{{ y }}",
    "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a }}|", "{% set x = 1 %}{% with %}{% set x = 2 %}{{ x }}{% endwith %}{{ x }}",
    # macros and call blocks
    "{% macro m(a, b=2, c='x') %}{{ a }}{{ b }}{{ c }}{% endmacro %}{{ m(1) }} {{ m(1, c='z') }} {{ m(a=0, b=1) }}",
    "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k=4) }}", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m() }}|",
    "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}", "{% macro m() %}{{ caller() }}{% endmacro %}{% call m() %}inside{% endcall %}",
    "{% macro m(x) %}[{{ caller(x * 2) }}]{% endmacro %}{% call(v) m(4) %}got {{ v }}{% endcall %}",
    "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}", "{% macro m() %}x{% endmacro %}{{ m | string }}",
    "{% macro m() %}  a  {% endmacro %}[{{ m() }}]", "{% macro m(a, b) %}{{ a }}{{ b }}{% endmacro %}{{ m(1, a=2) }}",
    "{% macro m() %}{{ m.name }}{% endmacro %}{{ m() }}{{ m.arguments }}", "{% macro m(a=[]) %}{{ a | length }}{% endmacro %}{{ m() }}",
    "{% filter upper %}abc {{ 'd' }}{% endfilter %}", "{% filter replace('a', 'b') | upper %}aaa{% endfilter %}",
    # whitespace control, raw, comments
    "a\n  {%- if true %}\n  b\n  {%- endif %}\nc", "  {% for x in l %}\n  {{ x }}\n  {% endfor %}\n", "x {#- c -#} y",
    "{% raw %}{{ not rendered }}{% endraw %}", "{%- raw -%}  {{ x }}  {%- endraw -%}", "{# multi\nline #}z",
    "a {{- ' b ' -}} c", "{%+ if true %}x{% endif +%}  \n", "  {{ 1 }}  \n  {% if 1 %}\n", "{% if 1 -%}\n\n  x{%- endif %}",
    "line\n{% if true %}\n\tindented\n{% endif %}\n", "{{ '{{' }}{{ '}}' }}", "{% if 1 %}\r\nA\r\n{% endif %}\r\n",
    # misc statements and errors
    "{% if 1 %}a{% elif 2 %}b{% else %}c{% endif %}", "{% if %}{% endif %}", "{{ }}", "{% endfor %}", "{{ 1 + }}",
    "{{ raise_exception('boom') }}", "{{ strftime_now('%Y-%m-%d %H:%M %A %b') }}", "{% do l.append(1) %}", "{{ l.__len__() }}",
    "{{ self }}", "{{ cycler(1, 2).next() }}", "{% set j = joiner(',') %}{% for x in l %}{{ j() }}{{ x }}{% endfor %}",
    "{{ lipsum is defined }}", "{{ dict(a=1, b=2) }}", "{{ range(3) }}", "{{ namespace(a=1).a }}", "{{ (l | map('string')) }}",
    "{% generation %}g{% endgeneration %}", "{{ 'x' | nosuchfilter }}", "{% if false %}{{ 'x' | nosuchfilter }}{% endif %}",
    "{{ l[1:2:0] }}", "{{ l['a'] }}", "{{ s['a'] }}", "{{ d[0] }}|", "{{ 1.5[0] }}", "{{ l.0 }} {{ msgs.1.role }}",
    "{{ '%s and %s' % ('a', 'b') }} {{ '%d%%' % 50 }} {{ '%.3f' % 2 }} {{ '%r' % 'x' }} {{ '%5s|%-5s|' % ('a', 'b') }}",
    "{{ '%s' % none }} {{ '%s' % [1, 2] }} {{ '%x %o %X %e %g %G' % (255, 8, 255, 12345.6789, 0.00001234, 1e20) }}",
    "{{ '%(a)s-%(b)d' % {'a': 'x', 'b': 2} }} {{ '%c' % 65 }} {{ '%s %s' % ('a',) }}", "{{ '%d' % 'x' }}", "{{ '%i' % 3.9 }}",
    "{{ '%+d % d %05.1f %#x %#o' % (3, 4, 2.25, 255, 8) }}", "{{ '%s' % (1, 2) }}", "{{ '%.2s' % 'abc' }} {{ '%*d' % (5, 3) }}",
    "{{ 1 if 1 else }}", "{{ 'abc' | batch(0) | list }}", "{{ [3, 'a'] | sort }}", "{{ 3 | length }}", "{{ l | join(1) }}",
    "{{ msgs[0]['role'] | upper }}{{ msgs | length > 2 }}", "{{ (msgs | last).content | tojson }}",
    "{{ msgs[2].tool_calls[0].function.arguments | tojson }}", "{{ msgs[2].tool_calls[0].function.arguments.items() | list }}",
    "{% for m in msgs %}{% if m.role == 'user' %}{{ m.content | e }}{% endif %}{% endfor %}",
    "{% for m in msgs %}{{ m.content is string }}{{ m.tool_calls is defined }}{% endfor %}",
    "{{ 'x' ~ msgs[0] }}", "{{ msgs[0] }}", "{{ d.items() | map('first') | list }}", "{{ d | map('upper') | list }}",
    "{{ 'aXbXc'.split('X') | map('upper') | join }}", "{{ l | map('int') | sum }}", "{{ l | sum(start=10) }}",
    "{{ [[1], [2]] | sum(start=[]) }}", "{{ msgs | map(attribute='role') | unique | list }}", "{{ l | max(attribute='x') }}",
    "{{ 'abc' | list }} {{ d.a | string | length }} {{ 12 | string | list }}", "{{ (1, 2) | list }} {{ d.items() | first }}",
    "{{ 1 is in [1] }}{{ 'ab' is in 'cab' }}", "{{ true and 'x' }} {{ false or none }} {{ 0 or '' or [] }}|",
    "{{ 1 == 1 == 1 }} {{ 1 != 2 != 1 }} {{ 'a' < 'b' > 'a' }}", "{{ l[0:1] == [3] }}", "{{ nul is not none }}",
]


def rand_literal(r):
    kind = r.randrange(12)
    if kind == 0:
        return str(r.choice([0, 1, 2, 3, 7, -1, 10, 100, 255, 2 ** 31, 2 ** 53 + 1, 10 ** 18]))
    if kind == 1:
        return r.choice(["0.5", "2.0", "1.25", "-0.1", "3.14159", "1e3", "1e-5", "1e20", "0.1", "1.0", "100.0"])
    if kind == 2:
        return repr(r.choice(["", "a", "abc", "Hello World", "  x y  ", "a,b,c", "1", "12", "3.5", "é", "<b>", "a\nb", "%s", "{}", "x-y_z"]))
    if kind == 3:
        return r.choice(["true", "false", "none", "True", "False", "None"])
    if kind == 4:
        return "[" + ", ".join(rand_literal(r) for _ in range(r.randrange(4))) + "]"
    if kind == 5:
        return "{" + ", ".join(f"{repr(k)}: {rand_literal(r)}" for k in r.sample(["a", "b", "c"], r.randrange(3))) + "}"
    if kind == 6:
        return "(" + ", ".join(rand_literal(r) for _ in range(r.randrange(1, 3))) + ",)"
    return r.choice(list(CONTEXT.keys()) + ["missing"])


FILTERS = [
    "upper", "lower", "title", "capitalize", "trim", "length", "count", "first", "last", "list", "string", "int", "float",
    "abs", "round", "round(1)", "round(1, 'floor')", "sort", "sort(reverse=true)", "unique", "reverse", "join", "join(',')",
    "join(', ')", "tojson", "tojson(indent=2)", "tojson(sort_keys=true)", "default('D')", "default('D', true)", "d",
    "e", "escape", "safe", "items", "dictsort", "sum", "min", "max", "wordcount", "center(9)", "indent(2)",
    "indent(2, true)", "replace('a', 'X')", "replace('', '-')", "truncate(5)", "truncate(8, true, '~')", "batch(2) | list",
    "slice(2) | list", "map('string') | list", "map('upper') | list", "select | list", "reject | list", "select('odd') | list",
    "selectattr('a') | list", "map(attribute='a') | list", "format(1)", "format('x', 2)", "pprint", "filesizeformat",
    "int(5)", "float(1.5)", "attr('upper')", "striptags", "wordwrap(5)", "urlencode", "xmlattr", "urlize", "forceescape",
    "list | length", "string | length", "batch(2, 0) | list", "groupby('a') | list", "sum(start=1)",
]
METHODS = [
    ".upper()", ".lower()", ".strip()", ".split()", ".split(',')", ".startswith('a')", ".endswith('c')", ".title()",
    ".items()", ".keys()", ".values()", ".get('a')", ".get('a', 0)", ".replace('a', 'b')", ".count('a')", ".find('b')",
    ".format(1)", ".join(['x', 'y'])", ".index(1)", ".lstrip('a')", ".rstrip()", ".capitalize()", ".isdigit()",
    ".splitlines()", ".rsplit(' ', 1)", ".zfill(4)", ".copy()", "[0]", "[-1]", "[1:]", "[:2]", "[::-1]", "[::2]", "['a']",
    ".a", "[1:-1]", "[-2:]", ".0",
]
BINOPS = ["+", "-", "*", "/", "//", "%", "**", "~", "==", "!=", "<", ">", "<=", ">=", "and", "or", "in", "not in"]
TESTS = ["defined", "undefined", "none", "string", "number", "integer", "float", "mapping", "iterable", "sequence",
         "odd", "even", "divisibleby 3", "eq 1", "lt 3", "in [1, 'a']", "true", "false", "boolean", "callable",
         "lower", "upper", "sameas none", "escaped", "ne 'a'"]


def rand_format_spec(r):
    """A random str.format spec: [[fill]align][sign][#][0][width][grouping][.precision][type]."""
    spec = ""
    if r.random() < 0.3:
        spec += r.choice(["", "*", "0", "é"]) + r.choice("<>^=")
    spec += r.choice(["", "", "+", "-", " "])
    spec += r.choice(["", "", "#"])
    spec += r.choice(["", "", "0"])
    spec += r.choice(["", "", "5", "12"])
    spec += r.choice(["", "", ",", "_"])
    spec += r.choice(["", "", ".0", ".2", ".10"])
    spec += r.choice(["", "", "d", "s", "f", "e", "g", "x", "X", "o", "b", "%", "n", "c", "E", "G"])
    return spec


def rand_percent_spec(r):
    """A random printf-style conversion: %[(key)][flags][width][.precision]type."""
    spec = "%"
    spec += r.choice(["", "", "", "-", "+", " ", "#", "0", "-0", "+#"])
    spec += r.choice(["", "", "3", "8"])
    spec += r.choice(["", "", ".0", ".2", "."])
    spec += r.choice("sdiroxXeEfFgGc%")
    return spec


FORMAT_VALUES = ["0", "7", "-42", "255", "1234567", "3.14159", "-0.5", "1e20", "1e-7", "2.5", "'abc'", "''", "'é'",
                 "true", "none", "[1]", "big", "huge", "tiny"]


def rand_expr(r, depth=0):
    if depth > 2 or r.random() < 0.3:
        return rand_literal(r)
    kind = r.randrange(10)
    if kind == 0:
        return f"{rand_expr(r, depth + 1)} {r.choice(BINOPS)} {rand_expr(r, depth + 1)}"
    if kind == 9:
        return f"{rand_literal(r)} | {r.choice(FILTERS)} | {r.choice(FILTERS)}"
    if kind == 1:
        return f"({rand_expr(r, depth + 1)}) | {r.choice(FILTERS)}"
    if kind == 2:
        return f"{rand_literal(r)}{r.choice(METHODS)}"
    if kind == 3:
        return f"{rand_expr(r, depth + 1)} is {r.choice(['', 'not '])}{r.choice(TESTS)}"
    if kind == 4:
        return f"{r.choice(['not ', '-', '+'])}{rand_expr(r, depth + 1)}"
    if kind == 5:
        return f"{rand_expr(r, depth + 1)} if {rand_expr(r, depth + 1)} else {rand_expr(r, depth + 1)}"
    if kind == 6:
        return f"({rand_expr(r, depth + 1)})"
    if kind == 7:
        if r.random() < 0.5:
            return f"'{{:{rand_format_spec(r)}}}'.format({r.choice(FORMAT_VALUES)})"
        return f"'{rand_percent_spec(r)}' % {r.choice(FORMAT_VALUES)}"
    return f"{r.choice(['%s', '%d', '%.1f', '%5s', '%-3d|', '%x', '%r', '{}', '%%'])!r} % {rand_literal(r)}"


# Pieces of random text for the string filters (HTML, URLs, e-mail, hyphens, Unicode whitespace).
TEXT_PIECES = ["a", "bc", "word", "-", "--", " ", "  ", "\n", "\r\n", "\t", "<", ">", "<b>", "</p>", "<!--", "-->",
               "&", "&amp;", "&lt;", "&gt;", "&#39;", "&#x41;", "&#0;", "&#128;", "&#xD800;", "&ampx", "&notit;", "&nbsp",
               ";", "#", "1", "42", ".", ",", "(", ")", "@", ":", "/", "é", "ß", "\u2028", "\xa0", "\x85", "x@y.com",
               "http://", "https://a.b/c?d=e&f", "www.", "ex.org", ".com", "mailto:", "[::1]", "1.2.3.4", "ftp:", "_",
               "long-hyphenated-word", "supercalifragilistic", "%", "+", "~", "'", '"', "="]


def rand_text(r):
    return "".join(r.choice(TEXT_PIECES) for _ in range(r.randrange(1, 12)))


def rand_text_filter(r):
    text = repr(rand_text(r))
    kind = r.randrange(6)
    if kind == 0:
        return f"{{{{ {text} | striptags }}}}"
    if kind == 1:
        args = [str(r.choice([1, 2, 3, 5, 8, 13, 0, -1]))]
        if r.random() < 0.5:
            args.append(r.choice(["true", "false"]))
        if r.random() < 0.3:
            args.append("wrapstring=" + r.choice(["'|'", "'\\n'", "''"]))
        if r.random() < 0.4:
            args.append("break_on_hyphens=" + r.choice(["true", "false", "1"]))
        return f"{{{{ {text} | wordwrap({', '.join(args)}) }}}}"
    if kind == 2:
        value = r.choice([text, f"{{'k': {text}, {text}: 1}}", f"[({text}, {text})]", "5", "none", "[[1, 2]]", "['ab']"])
        return f"{{{{ {value} | urlencode }}}}"
    if kind == 3:
        return f"{{{{ {{'a': {text}, 'b': {r.choice(['none', '1', '2.5', 'true', '[1]', text])}}} | xmlattr({r.choice(['', 'false'])}) }}}}"
    args = []
    if r.random() < 0.3:
        args.append(str(r.choice([3, 10, 0, -2])))
    if r.random() < 0.3:
        args.append("nofollow=true")
    if r.random() < 0.3:
        args.append("target=" + r.choice(["'_blank'", "'<x>'", "none"]))
    if r.random() < 0.3:
        args.append("rel=" + r.choice(["'me you'", "'noopener b'", "''"]))
    if r.random() < 0.2:
        args.append("extra_schemes=" + r.choice(["['ftp:']", "['ftp://', 'x:']", "['f:']"]))
    return f"{{{{ {text} | urlize({', '.join(args)}) }}}}"


def rand_block(r, depth=0):
    """A random statement block with random whitespace control."""
    dash = lambda: r.choice(["", "", "-", "+"]) if r.random() < 0.5 else ""  # noqa: E731
    nl = lambda: r.choice(["", "\n", "  \n", "\n  ", " "])  # noqa: E731
    kind = r.randrange(6) if depth < 2 else 5
    inner = lambda: rand_block(r, depth + 1)  # noqa: E731
    if kind == 0:
        return (f"{nl()}{{%{dash()} for x in {r.choice(['l', 'sl', 'd', 'el', 's', 'msgs', 'range(3)'])} %}}{nl()}{inner()}"
                f"{{{{ loop.index }}}}{nl()}{{% endfor {dash()}%}}{nl()}")
    if kind == 1:
        return (f"{nl()}{{%{dash()} if {rand_expr(r, 2)} {dash()}%}}{nl()}{inner()}{{% else %}}{nl()}{inner()}"
                f"{{%{dash()} endif %}}{nl()}")
    if kind == 2:
        return f"{{% set v = {rand_expr(r, 1)} %}}{nl()}{{{{ v }}}}{nl()}"
    if kind == 3:
        return (f"{{% macro mm(a, b='B') {dash()}%}}{nl()}{inner()}{{{{ a }}}}{{{{ b }}}}{{% endmacro %}}{nl()}"
                f"{{{{ mm({rand_literal(r)}) }}}}{nl()}")
    if kind == 4:
        return f"{nl()}{{#{dash()} c {dash()}#}}{nl()}{{% raw %}}{nl()}{{{{ r }}}}{{% endraw {dash()}%}}{nl()}"
    return f"{nl()}{{{{{dash()} {rand_expr(r)} {dash()}}}}}{nl()}"


def python_render(env, source):
    try:
        # A fresh copy: jinja2 lets a filter mutate a context list (`list | indent` extends it).
        return {"output": env.from_string(source).render(**copy.deepcopy(CONTEXT))}
    except Exception as e:  # noqa: BLE001 - any exception is an error our engine must reproduce
        return {"error": f"{type(e).__name__}: {e}"}


def ours_render(binary, sources):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as f:
        json.dump([{"template": s, "context": CONTEXT} for s in sources], f, ensure_ascii=False)
        path = f.name
    try:
        out = subprocess.run([binary, path], check=True, capture_output=True, timeout=600).stdout
    finally:
        os.unlink(path)
    return json.loads(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin", default="build-jinja/tests/unit/jinja_render", help="the jinja_render tool")
    parser.add_argument("--count", type=int, default=3000, help="random cases to generate")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", choices=["fixed", "random"])
    parser.add_argument("--show", type=int, default=40, help="differences to print")
    parser.add_argument("--save", help="write the differing cases to this JSON file")
    args = parser.parse_args()

    r = random.Random(args.seed)
    sources = [] if args.only == "random" else list(FIXED)
    if args.only != "fixed":
        for i in range(args.count):
            kind = i % 4
            sources.append("{{ " + rand_expr(r) + " }}" if kind < 2 else rand_block(r) if kind == 2 else rand_text_filter(r))
    env = make_environment()
    expected = [python_render(env, s) for s in sources]
    actual = ours_render(args.bin, sources)
    diffs = []
    for source, want, got in zip(sources, expected, actual):
        if ("error" in want) != ("error" in got) or want.get("output") != got.get("output"):
            diffs.append({"template": source, "python": want, "ours": got})
    for d in diffs[: args.show]:
        print(json.dumps(d, ensure_ascii=False))
    if args.save:
        with open(args.save, "w", encoding="utf-8") as f:
            json.dump(diffs, f, ensure_ascii=False, indent=1)
    print(f"{len(diffs)} differences in {len(sources)} cases", file=sys.stderr)
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
