#!/usr/bin/env python3
"""Golden strings for doppler's Jinja interpreter (tests/fixtures/jinja/golden.json).

    .venv-ref/bin/python tools/reference/jinja_reference.py [--seed N]

Every string is rendered by transformers' own chat-template renderer
(transformers.utils.chat_template_utils: Jinja2's ImmutableSandboxedEnvironment
with trim_blocks, lstrip_blocks, loopcontrols, its tojson, raise_exception,
strftime_now, namespace and dict), so the goldens are what apply_chat_template
gives. strftime_now is pinned to FIXED_NOW so that the goldens are stable.

Two sections:
  chat    the published chat templates in tests/fixtures/jinja/templates/ with
          message sets (system, multi-turn, empty content, odd roles, unicode,
          reasoning), add_generation_prompt true and false; variables as
          apply_chat_template passes them: messages, add_generation_prompt,
          bos_token / eos_token (absent when the tokenizer has none), tools and
          documents (none); templates that read enable_thinking also with it
          false and true (a keyword argument of apply_chat_template, "kwargs")
  interp  the interpreter itself: hand-written edge cases and randomized ones
          (filters, string methods, slicing, loops, whitespace control,
          arithmetic, tojson), from a seeded generator
A case whose rendering raises records the error instead of "rendered"; the C
test then expects an error too.
"""
import argparse
import datetime as dt
import json
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
TEMPLATES = os.path.join(ROOT, "tests", "fixtures", "jinja", "templates")
OUT = os.path.join(ROOT, "tests", "fixtures", "jinja", "golden.json")
FIXED_NOW = dt.datetime(2025, 3, 14, 15, 9, 26)

# bos_token / eos_token as each model's tokenizer has them (None: not passed)
SPECIAL = {
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use": ("<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>"),
    "HuggingFaceTB-SmolLM2-135M-Instruct": ("<|im_start|>", "<|im_end|>"),
    "HuggingFaceTB-SmolLM3-3B": (None, "<|im_end|>"),
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": ("<|begin_of_text|>", "<|im_end|>"),
    "Qwen-Qwen2.5-7B-Instruct": (None, "<|im_end|>"),
    "Qwen-Qwen3": (None, "<|im_end|>"),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "google-gemma-2-2b-it": ("<bos>", "<eos>"),
    "google-gemma-3-it": ("<bos>", "<eos>"),
    "llama-cpp-microsoft-Phi-4-mini-instruct": ("<|endoftext|>", "<|endoftext|>"),
    "meetkai-functionary-medium-v3.2": ("<|begin_of_text|>", "<|eot_id|>"),
    "meta-llama-Llama-3.1-8B-Instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "meta-llama-Llama-3.2-3B-Instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "meta-llama-Llama-3.3-70B-Instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "meta-llama-Meta-Llama-3-8B-Instruct": ("<|begin_of_text|>", "<|end_of_text|>"),
    "microsoft-Phi-3.5-mini-instruct": ("<s>", "<|endoftext|>"),
    "microsoft-phi-4": ("<|endoftext|>", "<|im_end|>"),
    "mistralai-Mistral-Nemo-Instruct-2407": ("<s>", "</s>"),
}


def m(role, content):
    return {"role": role, "content": content}


CONVS = [
    [m("user", "Hello!")],
    [m("system", "You are terse."), m("user", "What is 2+2?")],
    [m("user", "Hi"), m("assistant", "Hello! How can I help?"), m("user", "Tell me a joke.")],
    [m("system", "Rules:\n1. be kind\n2. be brief"), m("user", "a"), m("assistant", "b"), m("user", "c <b>bold</b>")],
    [m("user", "first"), m("assistant", "second")],
    [m("user", "")],
    [m("system", ""), m("user", "x")],
    [m("user", "q"), m("assistant", ""), m("user", "again")],
    [m("user", "  padded both sides \n"), m("assistant", "\tan answer\n\n"), m("user", "\u3000next\u00a0")],
    [m("user", "日本語で答えて 😀\nline two\n\nline four \"quoted\" 'single' \\ back")],
    [m("user", "q1"), m("assistant", "<think>\nhmm\n</think>\n\nA1"), m("user", "q2")],
    [m("user", "q1"), m("assistant", "<think>\nlet me see\n\n</think>\n\n\nA1\n")],
    [m("user", "a"), m("user", "b")],
    [m("assistant", "I start")],
    [m("system", "sys only")],
    [m("system", "s"), m("user", "u1"), m("assistant", "a1"), m("user", "u2"), m("assistant", "a2"), m("user", "u3")],
]


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. \"Paris\""},
        "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"]}}}]
TOOL_CALL = {"id": "abc123xyz", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}}
TOOL_CONVS = [
    [m("user", "Weather in Paris?")],
    [m("system", "Use tools."), m("user", "Weather in Paris?"),
     {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]},
     {"role": "tool", "content": "18C, sunny", "tool_call_id": "abc123xyz", "name": "get_weather"}],
]


def renderer():
    import transformers.utils.chat_template_utils as ctu

    class Fixed(dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return FIXED_NOW

    ctu.datetime = Fixed  # strftime_now reads the clock through this name
    return ctu


def chat_cases(ctu):
    cases = []
    for fn in sorted(os.listdir(TEMPLATES)):
        if not fn.endswith(".jinja"):
            continue
        name = fn[:-6]
        src = open(os.path.join(TEMPLATES, fn), encoding="utf-8").read()
        bos, eos = SPECIAL[name]
        runs = [(msgs, None, None) for msgs in CONVS]
        if "tools" in src:
            runs += [(msgs, TOOLS, None) for msgs in TOOL_CONVS]
        if "enable_thinking" in src:
            runs += [(msgs, None, {"enable_thinking": on}) for on in (False, True) for msgs in CONVS[:4] + CONVS[10:12]]
        for msgs, tools, extra in runs:
            for gen in (True, False):
                kw = dict(extra or {})
                if bos is not None:
                    kw["bos_token"] = bos
                if eos is not None:
                    kw["eos_token"] = eos
                case = {"template": fn, "bos_token": bos, "eos_token": eos, "messages": msgs, "tools": tools,
                        "add_generation_prompt": gen}
                if extra:
                    case["kwargs"] = extra
                try:
                    out, _ = ctu.render_jinja_template(conversations=[msgs], chat_template=src,
                                                       add_generation_prompt=gen, tools=tools, documents=None, **kw)
                    case["rendered"] = out[0]
                except Exception as e:  # raise_exception, role checks
                    case["error"] = f"{type(e).__name__}: {e}"
                cases.append(case)
    return cases


# ------------------------------------------------------------------ interp

EDGE = [
    ("{{ x }}|{{ x is defined }}|{{ x|default('d') }}|{{ x|length }}|{% for a in x %}no{% else %}empty{% endfor %}", {}),
    ("{{ x + 1 }}", {}),
    ("{{ x.y }}", {}),
    ("{{ d.missing }}|{{ d['missing'] }}|{{ d.a }}|{{ d['a'] }}|{{ d.get('a') }}|{{ d.get('zz', 5) }}", {"d": {"a": 1}}),
    ("{{ d.missing.deeper }}", {"d": {"a": 1}}),
    ("{{ l[10] }}|{{ l[-1] }}|{{ l[1:] }}|{{ l[::-1] }}|{{ l[-2:] }}|{{ l[:-1] }}|{{ l[::2] }}", {"l": [1, 2, 3, 4]}),
    ("{{ s[::-1] }}|{{ s[1:3] }}|{{ s[-2] }}|{{ s|length }}|{{ s|upper }}|{{ s|list }}", {"s": "héllo😀"}),
    ("{{ none.x }}|{{ none is none }}|{{ none }}|{{ true }}|{{ [1, 'a', none, true, 1.5] }}|{{ {'k': (1,)} }}", {}),
    ("{{ 2 ** 3 ** 2 }}|{{ 7 // -2 }}|{{ -7 % 3 }}|{{ 7.5 % 2 }}|{{ 1 / 2 }}|{{ 10 / 2 }}|{{ -2 ** 2 }}", {}),
    ("{{ 1e16 }}|{{ 1e15 }}|{{ 0.1 + 0.2 }}|{{ 1.5e-7 }}|{{ 0.0001 }}|{{ 123456789.125 }}|{{ 1/3 }}", {}),
    ("{{ 'a' ~ 1 ~ none ~ x ~ [1] }}|{{ 'ab' * 3 }}|{{ [1] * 2 }}|{{ 'a' + 'b' }}|{{ [1] + [2] }}", {}),
    ("{{ 'a' + 1 }}", {}),
    ("{{ 1 / 0 }}", {}),
    ("{% for a in l if a > 1 %}{{ loop.index }}/{{ loop.length }}/{{ loop.revindex }}{{ ',' if not loop.last }}"
     "{% else %}none{% endfor %}", {"l": [3, 1, 2]}),
    ("{% for a in l %}{% if a == 2 %}{% continue %}{% endif %}{% if a == 4 %}{% break %}{% endif %}{{ a }}{% endfor %}",
     {"l": [1, 2, 3, 4, 5]}),
    ("{% for a in l %}{{ loop.previtem }}<{{ a }}>{{ loop.nextitem }}|{{ loop.cycle('x', 'y') }}|{{ loop.first }}"
     "{{ loop.index0 }}{{ loop.revindex0 }}{% endfor %}", {"l": ["p", "q", "r"]}),
    ("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}"
     "{% for k, v in d|dictsort %}{{ k }}{% endfor %}", {"d": {"b": 1, "a": 2, "C": 3}}),
    ("{% set x = 0 %}{% for i in [1,2,3] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}", {}),
    ("{% set ns = namespace(x=0, l=[]) %}{% for i in [1,2,3] %}{% set ns.x = ns.x + i %}{% set ns.l = ns.l + [i] %}"
     "{% endfor %}{{ ns.x }}{{ ns.l }}", {}),
    ("{% macro m(a, b='B', c=none) %}[{{ a }}{{ b }}{{ c }}{{ varargs }}{{ kwargs }}]{% endmacro %}"
     "{{ m(1) }}{{ m(1, 2) }}{{ m(1, c=3) }}{{ m(1, 2, 3, 4) }}{{ m(1, z=5) }}", {}),
    ("{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}", {}),
    ("{% macro w() %}<{{ caller() }}>{% endmacro %}{% call w() %}inner {{ 1 + 1 }}{% endcall %}", {}),
    ("{% macro w(x) %}<{{ caller(x * 2) }}>{% endmacro %}{% call(v) w(4) %}got {{ v }}{% endcall %}", {}),
    ("{% set t %}block {{ 1 }}\n  text{% endset %}[{{ t }}]{% set u | upper %}up{% endset %}{{ u }}", {}),
    ("{% filter upper %}abc {{ 'd' }}{% endfilter %}{% with a = 5, b = 6 %}{{ a + b }}{% endwith %}{{ a }}", {}),
    ("{{ raise_exception('Conversation roles must alternate') }}", {}),
    ("line1\n{% if true %}\n  {{ raise_exception('on line 3') }}\n{% endif %}", {}),
    ("{{ strftime_now('%Y-%m-%d %H:%M %b %A %d') }}", {}),
    ("{{ range(3)|list }}{{ range(1, 10, 3)|list }}{{ range(5, 0, -2)|list }}", {}),
    ("{{ dict(a=1, b='x') }}{{ namespace(a=1).a }}", {}),
    ("{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c = (3, 4) %}{{ c }}{{ c[0] }}{{ () }}{{ (1,) }}", {}),
    ("{{ x if x else 'no' }}|{{ 'yes' if 1 < 2 < 3 }}|{{ 'no' if 1 < 3 < 2 else 'chain' }}|{{ 1 if false }}", {}),
    ("{{ not 1 }}{{ not 0 and 1 }}{{ 0 or 'x' }}{{ 1 and 'y' }}{{ [] or {} }}{{ 'a' in 'cat' }}{{ 2 not in [1] }}"
     "{{ 'k' in {'k': 1} }}", {}),
    ("{{ 'a' is string }}{{ 1 is number }}{{ true is number }}{{ 1 is integer }}{{ true is integer }}{{ 1.0 is float }}"
     "{{ [] is sequence }}{{ {} is mapping }}{{ 's' is iterable }}{{ x is iterable }}{{ none is none }}"
     "{{ 3 is divisibleby 3 }}{{ 3 is odd }}{{ 4 is even }}{{ 'a' is eq 'a' }}{{ 1 is equalto 2 }}{{ 'AB' is upper }}"
     "{{ 'ab' is lower }}{{ 2 is gt 1 }}{{ 2 is le 1 }}{{ 1 is in [1] }}{{ true is true }}{{ 0 is false }}"
     "{{ f is callable }}{{ 'upper' is filter }}{{ 'odd' is test }}", {}),
    ("{{ {'a': 1, 'b': [1, 2, {'c': none}], 'd': 'x\"y\\nz', 'e': true, 'f': 1.5, 'g': '日本'}|tojson }}", {}),
    ("{{ {'a': 1, 'b': [1, 2], 'c': {}, 'd': []}|tojson(indent=2) }}|{{ [1, [2]]|tojson(indent=0) }}", {}),
    ("{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}{{ ['é']|tojson(ensure_ascii=true) }}"
     "{{ {'a': 1}|tojson(separators=(',', ':')) }}{{ 'x<>&\\'y'|tojson }}", {}),
    ("{{ x|tojson }}", {}),
    ("{{ '  a b  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ 'hello world-foo(bar'|title }}|{{ 'hELLO wORLD'|capitalize }}"
     "|{{ 'aaa'|replace('a', 'b', 2) }}|{{ 'abc'|replace('', '-') }}|{{ 3.7|int }}|{{ '42'|int }}|{{ '4.5'|int }}"
     "|{{ 'x'|int }}|{{ 'x'|int(7) }}|{{ '0x1A'|int(0, 16) }}|{{ '1.5'|float }}|{{ -3|abs }}|{{ 2.567|round(2) }}"
     "|{{ 2.5|round }}|{{ 3|round }}|{{ 2.1|round(0, 'ceil') }}", {}),
    ("{{ l|join(', ') }}|{{ l|first }}|{{ l|last }}|{{ l|length }}|{{ l|sort }}|{{ l|sort(reverse=true) }}"
     "|{{ l|unique|list }}|{{ l|min }}|{{ l|max }}|{{ l|sum }}|{{ l|reverse|list }}|{{ l|map('string')|join }}"
     "|{{ l|select('odd')|list }}|{{ l|reject('odd')|list }}|{{ l|list|count }}", {"l": [3, 1, 2, 3]}),
    ("{{ w|sort|join(',') }}|{{ w|sort(case_sensitive=true)|join(',') }}|{{ w|unique|join(',') }}|{{ w|max }}",
     {"w": ["b", "A", "a", "B", "c"]}),
    ("{{ ms|selectattr('role', 'equalto', 'user')|map(attribute='content')|join('|') }}"
     "|{{ ms|rejectattr('role', 'eq', 'user')|list|length }}|{{ ms|map(attribute='nope', default='d')|list }}"
     "|{{ ms|selectattr('content')|list|length }}|{{ ms|sort(attribute='content')|map(attribute='role')|join }}"
     "|{{ ms|map(attribute='content')|map('upper')|join }}",
     {"ms": [m("user", "u1"), m("assistant", "a1"), m("user", ""), m("tool", "t")]}),
    ("{{ ' a  b\\tc\\n'.split() }}{{ 'a,b,,c'.split(',') }}{{ 'a,b,c'.split(',', 1) }}{{ 'a,b,c'.rsplit(',', 1) }}"
     "{{ '  a b c  '.split(none, 1) }}{{ '  a b c  '.rsplit(none, 1) }}{{ 'l1\\nl2\\r\\nl3'.splitlines() }}", {}),
    ("{{ ' x '.strip() }}|{{ ' x '.lstrip() }}|{{ ' x '.rstrip() }}|{{ '<<x>>'.strip('<>') }}|{{ 'abc'.startswith('ab') }}"
     "{{ 'abc'.endswith(('x', 'c')) }}|{{ 'aXbX'.replace('X', '-') }}|{{ 'abcb'.find('b') }}{{ 'abcb'.rfind('b') }}"
     "{{ 'abc'.find('z') }}|{{ 'ababa'.count('ab') }}|{{ 'a</think>b</think>c'.split('</think>')[-1] }}"
     "|{{ 'k=v=w'.partition('=') }}{{ 'k=v=w'.rpartition('=') }}|{{ '-'.join(['a', 'b']) }}|{{ 'Ab'.upper() }}"
     "{{ 'Ab'.lower() }}{{ 'ab cd'.title() }}{{ 'ab'.capitalize() }}|{{ '12'.isdigit() }}{{ 'a1'.isalpha() }}"
     "|{{ '{} and {}'.format(1, 'x') }}{{ '{0}{name}'.format('p', name='n') }}|{{ 'straße'.upper() }}", {}),
    ("{{ 'x'.join([1, 2]) }}", {}),
    ("{{ l.append(1) }}", {"l": []}),
    ("{{ l.append }}|{{ l.pop is defined }}", {"l": []}),
    ("{% set x = 1 %}{% if x %}  yes\n{% endif %}\n  {% if x -%}  \n   trimmed  {%- endif %}|{{- '  v  ' -}}|", {}),
    ("a  {#- comment -#}  b {# c2 #}\n  {# c3 #}\nc{%- raw %} {{ not }} {% parsed %}{% endraw -%}  d", {}),
    ("{% if true %}\n    indented\n    {% if true %}\n  {{ 'x' }}\n    {% endif %}\n{% endif %}\ntail\n", {}),
    ("{%+ if true %}\n  keep {% endif +%}\nx", {}),
    ("{{ '%s-%d' % ('a', 3) }}|{{ '%05.1f' % 3.14159 }}|{{ '%s'|format([1]) }}|{{ '%x' % 255 }}", {}),
    ("{{ '\\N' }}", {}),
    ("{{ '\\u00e9\\x41\\101\\q' }}|{{ \"it's\" }}|{{ 'a' 'b' }}|{{ 'line\\\ncontinued' }}", {}),
    ("{{ [1, 2] == [1, 2] }}{{ (1, 2) == [1, 2] }}{{ 1 == 1.0 }}{{ true == 1 }}{{ 'a' < 'b' }}{{ [1, 2] < [1, 3] }}"
     "{{ none == x }}{{ x == y }}", {}),
    ("{{ 1 < 'a' }}", {}),
    ("{{ 'x'|indent(2) }}|{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent('> ', blank=true) }}",
     {}),
    ("{{ d|items|list }}{{ d|length }}{{ d|first }}{{ d|list }}{{ d|dictsort(by='value', reverse=true) }}",
     {"d": {"x": 2, "y": 1}}),
    ("{{ ''|first }}|{{ []|last }}|{{ []|min }}|{{ x|first }}|{{ x|list }}|{{ x|join }}|{{ x|trim }}|{{ x|upper }}"
     "|{{ x|string }}|{{ x|map('upper')|list }}|{{ x|select|list }}|{{ x|items|list }}", {}),
    ("{{ x|int }}", {}),
    ("{{ x|last }}", {}),
    ("{{ x|sort }}{{ x|unique|list }}{{ x|reverse|list }}", {}),
    ("{{ x|dictsort }}", {}),
    ("{{ x|abs }}", {}),
    ("{{ messages[0]['content'] }}{{ messages[0].content }}{{ messages|length }}{{ messages[-1]['role'] }}",
     {"messages": [m("user", "c0"), m("assistant", "c1")]}),
    ("{{ foo(1) }}", {}),
    ("{% for %}", {}),
    ("{% if true %}unclosed", {}),
    ("{{ 1 + }}", {}),
    ("{% endfor %}", {}),
    ("{{ 'unterminated }}", {}),
    ("{% include 'x' %}", {}),
    ("{{ x|nosuchfilter }}", {}),
    ("{# unclosed comment", {}),
    ("{{ (1, 2)|tojson }}{{ {1: 'a', none: 'b', true: 'c', 1.5: 'd'}|tojson }}", {}),
    ("{% set ns = namespace(a=namespace(b=1)) %}{{ ns.a.b }}{% set ns.a = 3 %}{{ ns.a }}", {}),
    ("{% set s = 'x' %}{% set s.a = 1 %}", {}),
    ("{% set ns = namespace(_a=1) %}", {}),
    ("{% set ns = namespace(a=1) %}{% set ns._b = 2 %}", {}),
    ("{{ dict(_a=1) }}", {}),
    ("{{ 'abc'[5] }}|{{ 'abc'['upper']() }}|{{ {'items': 1}['items'] }}|{{ {'a': 1}['get']('a') }}", {}),
    ("{{ l[1:'a'] }}", {"l": [1, 2]}),
    ("{{ n[1:] }}", {"n": None}),
    ("{{ x[1:] }}", {}),
    ("{{ d[1:] }}", {"d": {"a": 1}}),
    ("{{ l[::0] }}", {"l": [1, 2]}),
    ("{% generation %}gen {{ 1 }}{% endgeneration %}", {}),
    ("{{ 0o17 }} {{ 0b101 }} {{ 0xff }} {{ 1_000 }} {{ 1.5e3 }} {{ 2E-2 }}", {}),
    ("{{ x.y is defined }}", {"x": {"y": None}}),
    ("{% for a, b in [[1, 2], [3, 4]] %}{{ a }}{{ b }}{% endfor %}", {}),
    ("{% for a, b in [[1, 2, 3]] %}{% endfor %}", {}),
    ("{% for a, b in [[1]] %}{% endfor %}", {}),
    ("{{ ['b', 'a']|sort|first }}{{ [none, 1]|join(',') }}{{ [[1, 2], [3]]|sum(start=[]) }}", {}),
    ("{{ 'a\\u3000b\\u00a0c'.split() }}|{{ '\\u3000x\\u2028'|trim }}|{{ 'İ'|lower|length }}|{{ 'ǅ'|lower }}", {}),
]


def rnd_str(r):
    alphabet = ["a", "b", "Z", " ", "  ", "\n", "\t", "é", "日", "😀", "\u3000", "'", '"', "\\", ",", "x y", "<", "&"]
    return "".join(r.choice(alphabet) for _ in range(r.randint(0, 6)))


def rnd_value(r, depth=0):
    k = r.randint(0, 7 if depth < 2 else 4)
    if k == 0:
        return r.randint(-20, 20)
    if k == 1:
        return round(r.uniform(-100, 100), r.randint(0, 4))
    if k == 2:
        return rnd_str(r)
    if k == 3:
        return r.choice([True, False, None])
    if k == 4:
        return rnd_str(r)
    if k == 5:
        return [rnd_value(r, depth + 1) for _ in range(r.randint(0, 4))]
    if k == 6:
        return {rnd_str(r) or "k": rnd_value(r, depth + 1) for _ in range(r.randint(0, 3))}
    return [r.randint(-5, 5) for _ in range(r.randint(0, 5))]


def rnd_slice(r):
    def part():
        return "" if r.random() < 0.3 else str(r.randint(-7, 7))
    step = "" if r.random() < 0.4 else ":" + r.choice(["", "1", "2", "-1", "-2", "3", "-3"])
    return "[" + part() + ":" + part() + step + "]"


# (filters that Jinja2 implements as generators are followed by list: a generator prints as its address)
FILTERS = ["trim", "upper", "lower", "title", "capitalize", "length", "first", "last", "list", "reverse|list",
           "string", "tojson", "unique|list", "sort", "join(', ')", "join", "replace('a', '-')", "default('D')", "int",
           "float", "abs", "round(1)", "count", "min", "max", "sum", "items|list", "dictsort", "trim('a')", "indent(2)",
           "tojson(indent=1)", "default('E', true)", "select('string')|list", "reject('none')|list",
           "map('string')|list", "unique(case_sensitive=true)|list"]
METHODS = ["strip()", "lstrip()", "rstrip()", "split()", "split(',')", "split(' ', 1)", "rsplit(' ', 1)", "upper()",
           "lower()", "title()", "capitalize()", "startswith('a')", "endswith(' ')", "replace(' ', '_')", "find('a')",
           "rfind('a')", "count(' ')", "partition(' ')", "splitlines()", "strip('a ')", "isdigit()", "isspace()"]


def rnd_expr_case(r):
    v = rnd_value(r)
    kind = r.randint(0, 4)
    if kind == 0:
        chain = "|".join(r.choice(FILTERS) for _ in range(r.randint(1, 3)))
        return "{{ v|" + chain + " }}", {"v": v}
    if kind == 1:
        s = rnd_str(r)
        return "{{ s." + r.choice(METHODS) + " }}", {"s": s}
    if kind == 2:
        seq = r.choice([rnd_str(r), [r.randint(0, 9) for _ in range(r.randint(0, 7))]])
        return "{{ v" + rnd_slice(r) + " }}|{{ v" + rnd_slice(r) + "|length }}", {"v": seq}
    if kind == 3:
        a, b = r.choice([r.randint(-9, 9), round(r.uniform(-9, 9), 2)]), r.choice([r.randint(-4, 4), round(r.uniform(-4, 4), 1)])
        op = r.choice(["+", "-", "*", "/", "//", "%", "**", "<", ">=", "==", "!="])
        if op == "**" and isinstance(b, float):
            b = r.randint(0, 3)
        return "{{ a " + op + " b }}", {"a": a, "b": b}
    return "{{ v|tojson }}|{{ v|tojson(indent=2, sort_keys=true) }}|{{ v }}", {"v": v}


TAGS = ["{%{m} if c %}", "{%{m} for i in l %}{{ i }}", "{{{m} v {m}}}", "{#{m} note {m}#}", "{%{m} set z = 1 %}"]


def rnd_ws_template(r, depth=0):
    out = []
    for _ in range(r.randint(1, 5)):
        k = r.randint(0, 5)
        text = "".join(r.choice([" ", "  ", "\t", "\n", "x", "y ", "\n  ", " \n"]) for _ in range(r.randint(0, 4)))
        out.append(text)
        mods = lambda: r.choice(["", "", "-", "+"])
        if k == 0 and depth < 2:
            out.append("{%" + mods() + " if c " + r.choice(["", "-", "+"]) + "%}")
            out.append(rnd_ws_template(r, depth + 1))
            out.append("{%" + mods() + " endif " + r.choice(["", "-", "+"]) + "%}")
        elif k == 1 and depth < 2:
            out.append("{%" + mods() + " for i in l " + r.choice(["", "-"]) + "%}")
            out.append(rnd_ws_template(r, depth + 1))
            out.append("{%" + mods() + " endfor " + r.choice(["", "-"]) + "%}")
        elif k == 2:
            out.append("{{" + r.choice(["", "-"]) + " v " + r.choice(["", "-"]) + "}}")
        elif k == 3:
            out.append("{#" + r.choice(["", "-"]) + " note " + r.choice(["", "-"]) + "#}")
        elif k == 4:
            out.append("{%" + r.choice(["", "-", "+"]) + " set z = 1 " + r.choice(["", "-"]) + "%}")
    return "".join(out)


def rnd_loop_case(r):
    l = [rnd_str(r) or "e" for _ in range(r.randint(0, 5))]
    parts = ["{{ loop.index }}", "{{ loop.index0 }}", "{{ loop.revindex }}", "{{ loop.first }}", "{{ loop.last }}",
             "{{ loop.length }}", "{{ loop.previtem }}", "{{ loop.nextitem }}", "{{ loop.cycle('o', 'e') }}",
             "{{ x }}", "{% if loop.index is even %}{% continue %}{% endif %}", "{% if x == l[-1] %}{% break %}{% endif %}",
             "{% set y = x %}{{ y|length }}", "[{{ x|trim }}]"]
    body = "".join(r.choice(parts) for _ in range(r.randint(1, 4)))
    cond = r.choice(["", " if x", " if x|length > 1", " if loop is undefined"])
    src = "{% for x in l" + cond + " %}" + body + "{% else %}E{% endfor %}{{ x }}"
    return src, {"l": l}


def interp_cases(ctu, seed):
    r = random.Random(seed)
    cases = [(src, var, "edge") for src, var in EDGE]
    for _ in range(160):
        src, var = rnd_expr_case(r)
        cases.append((src, var, "random"))
    for _ in range(60):
        cases.append((rnd_ws_template(r), {"c": r.random() < 0.7, "l": [1, 2][: r.randint(0, 2)], "v": rnd_str(r)},
                      "random"))
    for _ in range(40):
        src, var = rnd_loop_case(r)
        cases.append((src, var, "random"))
    out = []
    for src, var, kind in cases:
        case = {"kind": kind, "template": src, "vars": var}
        try:
            case["rendered"] = ctu._compile_jinja_template(src).render(**var)
        except Exception as e:
            case["error"] = f"{type(e).__name__}: {e}"
        assert " at 0x" not in case.get("rendered", ""), src  # an object's address is not a golden
        out.append(case)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=20250314)
    a = ap.parse_args()
    ctu = renderer()
    import jinja2
    import transformers
    doc = {"description": "generated by tools/reference/jinja_reference.py",
           "versions": {"jinja2": jinja2.__version__, "transformers": transformers.__version__},
           "strftime_now": FIXED_NOW.isoformat(), "seed": a.seed,
           "chat": chat_cases(ctu), "interp": interp_cases(ctu, a.seed)}
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n_err = sum("error" in c for c in doc["chat"] + doc["interp"])
    print(f"{len(doc['chat'])} chat cases, {len(doc['interp'])} interpreter cases ({n_err} errors)")


if __name__ == "__main__":
    main()
