#!/usr/bin/env python3
"""Regenerates tests/fixtures/chat_templates/expected.json.

Renders every tests/fixtures/chat_templates/*.jinja (real Hugging Face chat
templates) with Python jinja2 configured the way transformers'
apply_chat_template configures it (ImmutableSandboxedEnvironment,
trim_blocks=True, lstrip_blocks=True, loop controls, a {% generation %} tag,
raise_exception, strftime_now and a json.dumps-based tojson) over a set of
conversations, and records the exact output, or the raised message, per case.
The C++ test runtime/chat/chat_template_fixtures_test.cc checks xrt_chat
reproduces each of them byte for byte.

Usage: python3 tests/gen_chat_template_fixtures.py   (needs: pip install jinja2)
"""
import json
import os
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "fixtures", "chat_templates")


class GenerationTag(Extension):
    """{% generation %}...{% endgeneration %}: renders its body unchanged."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body, lineno=lineno)


class TemplateRaised(Exception):
    pass


def raise_exception(message):
    raise TemplateRaised(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys)


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


TOKENS = {
    "llama3.jinja": ("<|begin_of_text|>", "<|eot_id|>"),
    "llama3_1.jinja": ("<|begin_of_text|>", "<|eot_id|>"),
    "smollm2.jinja": ("<|im_start|>", "<|im_end|>"),
    "qwen2_5.jinja": ("<|endoftext|>", "<|im_end|>"),
    "mistral_v0_2.jinja": ("<s>", "</s>"),
    "mistral_v0_3.jinja": ("<s>", "</s>"),
    "llava_1_5.jinja": ("<s>", "</s>"),
}

SYS = {"role": "system", "content": "You are a terse assistant.\nAnswer briefly."}
U1 = {"role": "user", "content": "What is the capital of France?"}
A1 = {"role": "assistant", "content": "  Paris.  "}
U2 = {"role": "user", "content": "And of Germany? Use \"quotes\" & <tags>."}
U_WS = {"role": "user", "content": "\n\t  lots of whitespace around \t\n"}
U_UNI = {"role": "user", "content": "Héllo — 世界 🌍, naïve café"}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7.5},
            },
            "required": ["city"],
        },
    },
}
TOOL_CALL_TURN = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{
        "id": "call12345",
        "type": "function",
        "function": {"name": "get_weather",
                     "arguments": {"city": "Paris", "unit": "celsius", "days": 2}},
    }],
}
TOOL_RESULT = {"role": "tool", "tool_call_id": "call12345", "content": "{\"temp\": 21.5}"}

TEXT_CONVERSATIONS = {
    "user_only": [U1],
    "system_user": [SYS, U1],
    "multi_turn": [SYS, U1, A1, U2],
    "multi_turn_no_system": [U1, A1, U2],
    "ends_with_assistant": [U1, A1],
    "whitespace": [U_WS],
    "unicode": [U_UNI],
    "wrong_role_order": [U1, U2],
    "unknown_role": [U1, {"role": "critic", "content": "hmm"}],
}

LLAVA_CONVERSATIONS = {
    "image_then_text": [{"role": "user", "content": [
        {"type": "image"}, {"type": "text", "text": "What is shown here?"}]}],
    "text_then_two_images": [{"role": "user", "content": [
        {"type": "text", "text": "Compare"}, {"type": "image"}, {"type": "image"}]}],
    "multi_turn": [
        {"role": "system", "content": [{"type": "text", "text": "Be helpful."}]},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe it."}]},
        {"role": "assistant", "content": [{"type": "text", "text": "A cat on a mat."}]},
        {"role": "user", "content": [{"type": "text", "text": "What color is the cat?"}]}],
}


# Assistant turns with and without tool_calls, tool_calls None, a message with no content.
TOOL_MESSAGES = [
    {"role": "user", "content": "a"},
    {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f"}}]},
    {"role": "assistant", "content": "b", "tool_calls": None},
    {"role": "tool"},
]

FEATURE_CASES = [
 # (template source, context): jinja2 features used by chat templates.
 ("{{ x }}|{{ y.z if y is defined else 'u' }}|{{ missing }}|{{ missing|default('d') }}", {"x": 1}),
 ("{% for m in ms %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.length }}/{{ loop.first }}/{{ loop.last }}/{{ loop.revindex }};{% endfor %}", {"ms": ["a","b","c"]}),
 ("{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}|{% for k in d %}{{ k }}{% endfor %}|{% for k, v in d|items %}{{ v }}{% endfor %}", {"d": {"b": 1, "a": 2}}),
 ("{{ s[::-1] }}|{{ s[1:3] }}|{{ s[-2:] }}|{{ l[:-1] }}|{{ l[::2] }}|{{ s[0] }}{{ s[-1] }}", {"s": "héllo", "l": [1,2,3,4,5]}),
 ("{% set ns = namespace(n=0, found=false) %}{% for i in range(5) %}{% set ns.n = ns.n + i %}{% if i == 3 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.n }} {{ ns.found }}", {}),
 ("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}", {}),
 ("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Bob') }} {{ greet('Al', punct='?') }}", {}),
 ("{{ '  a b  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '  a'.lstrip() }}|{{ 'a  '.rstrip() }}|{{ 'abc'.startswith('ab') }}|{{ 'abc'.endswith(('x','c')) }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'ab'.upper() }}{{ 'AB'.lower() }}", {}),
 ("{{ d.get('a') }}|{{ d.get('z', 'dflt') }}|{{ d.get('z') }}|{{ d.keys()|list }}|{{ d.values()|list }}|{{ d|length }}", {"d": {"a": 1, "b": [1, 'x']}}),
 ("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 'a' ~ 1 ~ none }} {{ 1.5 + 1 }} {{ 10 / 4 }} {{ 0.1 + 0.2 }}", {}),
 ("{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' in 'cat' }} {{ 'z' not in ['a'] }} {{ 'k' in {'k': 1} }} {{ not 1 == 2 }} {{ 1 == 1.0 }} {{ [1,2] == [1,2] }}", {}),
 ("{{ x or 'fallback' }}|{{ x and 'yes' }}|{{ 0 or none }}|{{ 'a' if false }}|{{ 'a' if true else 'b' }}", {"x": ""}),
 ("{{ x is defined }} {{ y is undefined }} {{ n is none }} {{ s is string }} {{ d is mapping }} {{ l is iterable }} {{ s is iterable }} {{ 3 is number }} {{ 3 is integer }} {{ 3.0 is float }} {{ 4 is even }} {{ 3 is odd }} {{ 9 is divisibleby 3 }} {{ s is not string }} {{ n is not none }}", {"x": 1, "n": None, "s": "s", "d": {}, "l": []}),
 ("{{ '  hi  '|trim }}|{{ 'hello world'|title }}|{{ 'hELLO'|capitalize }}|{{ 'aaa'|replace('a','b',2) }}|{{ [1,2,3]|join('-') }}|{{ [3,1,2]|sort|list }}|{{ [1,2]|first }}{{ [1,2]|last }}|{{ 'abc'|first }}|{{ 3.7|int }}|{{ '42'|int + 1 }}|{{ 'x'|int }}|{{ 5|string ~ '!' }}|{{ [1,1,2]|unique|list }}|{{ [1,2,3]|sum }}|{{ -3|abs }}|{{ [1,2]|reverse|list }}", {}),
 ("{{ ms|selectattr('role','equalto','user')|map(attribute='content')|join(',') }}|{{ ms|rejectattr('role','equalto','user')|list|length }}|{{ ms|map(attribute='role')|list }}|{{ [0,1,2,'',none]|select|list }}|{{ [1,2,3,4]|reject('odd')|list }}", {"ms": [{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"}]}),
 ("{{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ 'é\"\\n'|tojson }}|{{ [1.0, 2.5, none, true]|tojson }}|{{ {}|tojson(indent=2) }}|{{ d|tojson(sort_keys=true) }}", {"d": {"z": [1, {"y": "é"}], "a": None}}),
 ("{{ [1, 'a', none, true, 1.5, {'k': 'v'}] }}|{{ none }}|{{ true }}|{{ \"it's\" }}|{{ ['it\\'s'] }}", {}),
 ("{%- for i in range(3) -%}\n  {{ i }}\n{%- endfor %}\n", {}),
 ("<ul>\n    {% for i in [1,2] %}\n    <li>{{ i }}</li>\n    {% endfor %}\n</ul>\n", {}),
 ("a  {# comment #}  b\n  {#- trimmed -#}  c\n{# own line #}\nd", {}),
 ("{% if true %}\n  yes\n{% else %}\n  no\n{% endif %}\nend  {%+ if true %}kept{% endif +%}\n!", {}),
 ("{% set parts %}inner {{ 1 + 1 }}{% endset %}[{{ parts }}]", {}),
 ("{% for x in [1,2,3,4,5] if x is odd %}{{ x }}{{ ',' if not loop.last }}{% endfor %}|{% for x in [] %}x{% else %}empty{% endfor %}", {}),
 ("{% for x in [1,2,3,4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
 ("{{ 'a' + 'b' * 3 }} {{ [1] + [2] }} {{ messages[0]['content'] | trim + '!' }}", {"messages": [{"content": " hi "}]}),
 ("{% for m in messages %}{% if m.content is string %}{{ m.content }}{% else %}{% for p in m.content %}{% if p.type == 'image' %}<image>{% elif p['type'] == 'text' %}{{ p.text }}{% endif %}{% endfor %}{% endif %};{% endfor %}", {"messages": [{"role":"user","content":"plain"},{"role":"user","content":[{"type":"image"},{"type":"text","text":"describe"}]}]}),
 ("{{ x.y }}|{{ x.y is defined }}", {"x": None}),
 ("{{ l[10] }}|{{ d.missing }}|{{ d['missing'] is defined }}|{{ (d.missing or 'z') }}", {"l": [1], "d": {}}),
 # selectattr/rejectattr/map over items where the attribute is missing or None, and over
 # a missing or None sequence (jinja2 yields nothing): tool-calling templates rely on it.
 ("{{ messages|selectattr('tool_calls')|list|length }}|{{ messages|selectattr('tool_calls', 'defined')|list|length }}"
  "|{{ messages|rejectattr('tool_calls')|list|length }}|{{ messages|selectattr('tool_calls', 'none')|list|length }}"
  "|{{ messages|selectattr('tool_calls', 'ne', none)|list|length }}"
  "|{{ messages|selectattr('content', 'equalto', none)|list|length }}"
  "|{{ messages|selectattr('tool_calls', 'defined')|selectattr('tool_calls')|map(attribute='role')|join(',') }}",
  {"messages": TOOL_MESSAGES}),
 ("{{ messages|map(attribute='content')|list }}|{{ messages|map(attribute='content', default='-')|list }}"
  "|{{ messages|map(attribute='tool_calls')|list }}|{{ messages|map(attribute='content')|select|list }}"
  "|{{ messages|map(attribute='missing')|join(',') }}|{{ messages|map(attribute='tool_calls')|select|list|length }}"
  "|{{ [{'x': none}]|map(attribute='x', default='d')|list }}|{{ [{'x': none}]|map(attribute='x.y')|list }}"
  "|{{ [{'x': none}]|selectattr('x.y')|list }}|{{ [none, {'x': 1}]|map(attribute='x')|list }}"
  "|{{ [none, {'x': 1}]|selectattr('x')|list }}|{{ [none, 1]|map('string')|list }}",
  {"messages": TOOL_MESSAGES}),
 ("{{ none|selectattr('x')|list }}|{{ missing|selectattr('x')|list }}|{{ none|map(attribute='x')|list }}"
  "|{{ missing|map(attribute='x')|list }}|{{ none|map('string')|list }}|{{ none|select|list }}"
  "|{{ missing|rejectattr('x')|list }}|{{ messages[2].tool_calls|map(attribute='function')|list }}"
  "|{{ messages[2].tool_calls|selectattr('function')|list }}|{{ messages[3].tool_calls|map(attribute='id')|list }}",
  {"messages": TOOL_MESSAGES}),
 # integer edges (64-bit: jinja2's results where they fit), int/abs filters, code point
 # indexing and slicing with steps, split/replace/strip/indent/count edges
 ("{{ -7 // -1 }} {{ 7 % -2 }} {{ -7 % -2 }} {{ (-1) ** 65 }} {{ 2 ** 62 }} {{ 0 ** 0 }} {{ 2 ** -1 }}"
  " {{ 9223372036854775807 // -1 }} {{ -9223372036854775807 - 1 }} {{ (-9223372036854775807 - 1) % 3 }}"
  " {{ (-9223372036854775807 - 1) // 3 }} {{ -9223372036854775807|abs }} {{ 9 is divisibleby(-1) }}", {}),
 ("{{ 'nan'|int }} {{ 'x'|int(7) }} {{ ' 12 '|int }} {{ '1e3'|int }} {{ -3.9|int }} {{ 'héllo'[1] }}{{ 'héllo'[-4] }}"
  "|{{ 'héllo'[1:4] }}|{{ 'héllo'[::-2] }}|{{ 'héllo'[4:1:-1] }}|{{ [1,2,3][5:1:-2] }}|{{ 'héllo'[9:] }}"
  "|{{ 'é a é'.split('é') }}|{{ 'aé'|replace('', '-') }}|{{ '\u3000x \u3000'.strip() }}|{{ ' x  y '.split(none, 1) }}"
  "|{{ 'ab'|reverse }}|{{ 'a\nb\n\nc'|indent(-2, true) }}|{{ 'a\nb'|indent(3) }}|{{ 'é'|list }}"
  "|{{ 'a ab abab'.count('ab') }}{{ 'xx'.find('') }}{{ 'aXbX'.find('X') }}|{{ 'xyx'.strip('x') }}", {}),
 # a namespace that holds itself prints as {...}, as Python's repr does
 ("{% set ns = namespace(a=1) %}{% set ns.me = ns %}{{ ns }}|{{ [ns] }}|{{ ns.me.me.a }}", {}),
]


def cases():
    for tmpl in sorted(TOKENS):
        if tmpl == "llava_1_5.jinja":
            convs = LLAVA_CONVERSATIONS
        else:
            convs = TEXT_CONVERSATIONS
        for name, msgs in convs.items():
            for agp in (True, False):
                yield tmpl, f"{name}/agp={int(agp)}", {"messages": msgs, "add_generation_prompt": agp}
        if tmpl in ("qwen2_5.jinja", "llama3_1.jinja", "mistral_v0_3.jinja"):
            yield tmpl, "tools", {"messages": [SYS, U1], "tools": [WEATHER_TOOL],
                                  "add_generation_prompt": True}
            yield tmpl, "tool_call_round_trip", {
                "messages": [U1, TOOL_CALL_TURN, TOOL_RESULT], "tools": [WEATHER_TOOL],
                "add_generation_prompt": True}
        if tmpl == "llama3_1.jinja":
            yield tmpl, "date_string_override", {"messages": [U1], "date_string": "01 Jan 2025",
                                                 "add_generation_prompt": True}
            yield tmpl, "tools_in_system", {"messages": [SYS, U1], "tools": [WEATHER_TOOL],
                                            "tools_in_user_message": False,
                                            "add_generation_prompt": True}
            yield tmpl, "builtin_tools", {"messages": [U1], "builtin_tools": ["brave_search", "code_interpreter", "wolfram_alpha"],
                                          "add_generation_prompt": True}


def main():
    env = make_env()
    out = []
    for tmpl, name, ctx in cases():
        with open(os.path.join(FIXTURES, tmpl), encoding="utf-8") as f:
            source = f.read()
        bos, eos = TOKENS[tmpl]
        # What transformers passes: tools/documents are always defined (None if absent).
        full = {"tools": None, "documents": None, "bos_token": bos, "eos_token": eos}
        full.update(ctx)
        case = {"template": tmpl, "name": name, "context": full}
        try:
            case["expected"] = env.from_string(source).render(**full)
        except TemplateRaised as e:
            case["error"] = str(e)
        out.append(case)
    features = []
    for source, ctx in FEATURE_CASES:
        features.append({"template_source": source, "context": ctx,
                         "expected": env.from_string(source).render(**ctx)})
    path = os.path.join(FIXTURES, "expected.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"generator": "tests/gen_chat_template_fixtures.py",
                   "jinja2_version": jinja2.__version__, "cases": out,
                   "features": features},
                  f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(out)} template cases and {len(features)} feature cases to {path}")


if __name__ == "__main__":
    main()
