#!/usr/bin/env python3
"""Regenerates jinja_cases.json: small templates exercising each supported Jinja feature, with
the output Python Jinja2 gives under Hugging Face's configuration (see render_jinja2.py). The
unit test test_jinja.c renders every case with our interpreter and expects the same bytes.

usage: python3 gen_jinja_cases.py > jinja_cases.json   (needs the jinja2 module)
"""
import json
import sys

from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

CTX = {
    "name": "World", "n": 7, "f": 2.5, "t": True, "fl": False, "nothing": None,
    "items": [3, 1, 2], "words": ["b", "A", "c"], "empty": [], "s": "  Hello, World!  ",
    "u": "héllo wörld 你好", "d": {"b": 2, "a": 1, "c": 3},
    "msgs": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"},
             {"role": "assistant", "content": "yo", "tool_calls": [{"name": "f", "arguments": {"x": 1}}]}],
    "obj": {"k": [1, {"z": "deep"}], "q": "a\"b\\c\nd\u00e9\u0001"},
}

CASES = [
    ("text", "plain text"),
    ("var", "Hello {{ name }}!"),
    ("undefined_prints_empty", "[{{ missing }}]"),
    ("comment", "a{# comment #}b"),
    ("ws_minus", "a  {{- name -}}  b"),
    ("ws_block_minus", "x\n  {%- if t -%}\n  y\n  {%- endif -%}\n  z"),
    ("trim_blocks", "{% if t %}\nyes\n{% endif %}\nend"),
    ("lstrip_blocks", "line\n    {% if t %}\n    indented\n    {% endif %}\nend"),
    ("lstrip_not_vars", "line\n    {{ n }}\nend"),
    ("plus_disables_lstrip", "a\n    {%+ if t %}x{% endif %}"),
    ("comment_trim", "a\n  {# c #}\nb"),
    ("trailing_newline_dropped", "abc\n"),
    ("raw", "{% raw %}{{ not }}{% endraw %}"),
    ("if_elif_else", "{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %} {% endfor %}"),
    ("for_loop_vars", "{% for x in items %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }};{% endfor %}"),
    ("for_else", "{% for x in empty %}x{% else %}none{% endfor %}"),
    ("for_dict_items", "{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}"),
    ("for_dict_keys", "{% for k in d %}{{ k }}{% endfor %}"),
    ("for_filter", "{% for x in items if x > 1 %}{{ x }}{{ loop.length }}{% endfor %}"),
    ("for_string", "{% for c in 'héllo' %}[{{ c }}]{% endfor %}"),
    ("loop_prev_next", "{% for x in items %}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}"),
    ("break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
    ("set_scope", "{% set a = 1 %}{% for x in items %}{% set a = x %}{% endfor %}{{ a }}"),
    ("namespace", "{% set ns = namespace(total=0, found=false) %}{% for x in items %}{% set ns.total = ns.total + x %}{% endfor %}{{ ns.total }} {{ ns.found }}"),
    ("set_tuple", "{% set a, b = 1, 'two' %}{{ a }}{{ b }}"),
    ("set_block", "{% set block %}inner {{ n }}{% endset %}[{{ block }}]"),
    ("macro", "{% macro greet(who, punct='!') %}Hi {{ who }}{{ punct }}{% endmacro %}{{ greet('a') }} {{ greet('b', '?') }} {{ greet(who='c', punct='.') }}"),
    ("arith", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 4 / 2 }}"),
    ("float_print", "{{ 2.5 }} {{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 3.0 * 2 }} {{ 1 / 3 }} {{ 1e-7 }}"),
    ("concat_tilde", "{{ 'a' ~ 1 ~ none ~ true ~ [1, 'x'] }}"),
    ("string_plus", "{{ 'a' + 'b' }}{{ [1] + [2] }}{{ 'ab' * 3 }}"),
    ("comparisons", "{{ 1 < 2 }} {{ 2 <= 1 }} {{ 'a' < 'b' }} {{ 1 == 1.0 }} {{ 1 != 2 }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }}"),
    ("logic", "{{ t and 'yes' }} {{ fl or 'fallback' }} {{ not t }} {{ nothing or 0 }} {{ 0 and 1 }}"),
    ("in_ops", "{{ 'ell' in 'hello' }} {{ 2 in items }} {{ 'a' in d }} {{ 9 not in items }}"),
    ("ternary", "{{ 'y' if t else 'n' }}{{ 'y' if fl else 'n' }}[{{ 'y' if fl }}]"),
    ("literals", "{{ [1, 'two', none, true, false, 1.5] }} {{ {'a': 1, 'b': [2]} }} {{ (1, 2) }} {{ True }} {{ None }}"),
    ("string_escapes", "{{ 'tab\\there' }}|{{ \"q\\\"uote\" }}|{{ 'nl\\n' }}|{{ '\\u00e9\\x41' }}|{{ 'a' 'b' }}"),
    ("subscripts", "{{ items[0] }} {{ items[-1] }} {{ msgs[1]['role'] }} {{ msgs[1].content }} {{ obj.k[1].z }} {{ items[10] }}|"),
    ("slices", "{{ items[1:] }} {{ items[:-1] }} {{ items[::-1] }} {{ 'héllo'[1:3] }} {{ 'abc'[::-1] }} {{ items[::2] }} {{ msgs[1:]|length }}"),
    ("str_index", "{{ 'héllo'[1] }}{{ 'abc'[-1] }}"),
    ("filters_case", "{{ 'hello world'|upper }} {{ 'HeLLo'|lower }} {{ 'hello world-foo'|title }} {{ 'hELLO'|capitalize }}"),
    ("filter_trim", "[{{ s|trim }}] [{{ 'xxhixx'|trim('x') }}] [{{ ' \\u3000 wide\\u00a0'|trim }}]"),
    ("filter_length", "{{ items|length }} {{ 'héllo'|length }} {{ d|length }} {{ items|count }} {{ missing|length }}"),
    ("filter_default", "{{ missing|default('dflt') }} {{ name|d('x') }} {{ ''|default('e', true) }} {{ nothing|default('n') }} [{{ missing|default }}]"),
    ("filter_join", "{{ items|join(', ') }} {{ words|join }} {{ msgs|join('/', attribute='role') }}"),
    ("filter_tojson", "{{ obj|tojson }} {{ items|tojson }} {{ 'é'|tojson }} {{ nothing|tojson }} {{ 2.0|tojson }} {{ d|tojson(indent=2) }} {{ empty|tojson(indent=2) }}"),
    ("filter_tojson_nested_indent", "{{ msgs[2]|tojson(indent=4) }}"),
    ("filter_conversions", "{{ '42'|int + 1 }} {{ 3.9|int }} {{ 'x'|int }} {{ '2.5'|float }} {{ 3|float }} {{ 42|string ~ '!' }} {{ 'abc'|list }} {{ -3|abs }}"),
    ("filter_first_last", "{{ items|first }} {{ items|last }} {{ 'abc'|first }} {{ items|reverse|list }} {{ 'abc'|reverse }}"),
    ("filter_sort", "{{ items|sort }} {{ words|sort }} {{ items|sort(reverse=true) }} {{ msgs|sort(attribute='role')|map(attribute='role')|list }}"),
    ("filter_items_dictsort", "{{ d|items|list }} {{ d|dictsort }}"),
    ("filter_select", "{{ msgs|selectattr('role', 'equalto', 'user')|list|length }} {{ msgs|rejectattr('role', 'eq', 'user')|map(attribute='content')|join(',') }} {{ items|select('odd')|list }} {{ msgs|selectattr('tool_calls')|list|length }} {{ msgs|selectattr('tool_calls', 'defined')|map(attribute='role')|first }}"),
    ("filter_map", "{{ words|map('upper')|join }} {{ msgs|map(attribute='missing', default='-')|join }}"),
    ("filter_replace", "{{ 'aaa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 'abc'.replace('b', '') }}"),
    ("filter_misc", "{{ [3, 1, 3]|unique|list }} {{ items|min }} {{ items|max }} {{ items|sum }} {{ 2.567|round(1) }} {{ '<a>'|e }} {{ '<a>'|safe }}"),
    ("filter_indent", "{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}"),
    ("tests", "{{ n is defined }} {{ missing is undefined }} {{ nothing is none }} {{ name is string }} {{ n is number }} {{ d is mapping }} {{ items is iterable }} {{ items is sequence }} {{ t is true }} {{ fl is false }} {{ n is odd }} {{ n is even }} {{ 9 is divisibleby 3 }} {{ n is integer }} {{ f is float }} {{ t is boolean }}"),
    ("tests_negated", "{{ n is not defined }} {{ missing is not none }} {{ 'x' is not string }} {{ 1 is in [1] }} {{ 'a' is equalto 'a' }} {{ 2 is eq(3) }} {{ 3 is gt 2 }}"),
    ("test_precedence", "{{ not missing is defined }} {{ 'x' if missing is defined else 'y' }}"),
    ("string_methods", "{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ 'xxhixx'.strip('x') }}|{{ 'Hello'.startswith('He') }} {{ 'Hello'.endswith(('x', 'lo')) }}"),
    ("string_split", "{{ 'a,b,,c'.split(',') }} {{ '  a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'x</think>y'.split('</think>')[-1] }}"),
    ("string_methods2", "{{ 'ab'.upper() }} {{ 'AB'.lower() }} {{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }} {{ 'banana'.find('n') }} {{ 'banana'.count('a') }} {{ '-'.join(['a', 'b']) }}"),
    ("dict_methods", "{{ d.get('a') }} {{ d.get('zz', 'dflt') }} {{ d.get('zz') }} {{ d.keys()|list }} {{ d.values()|list }} {{ d['b'] }}"),
    ("range_fn", "{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(5, 0, -2)|list }}"),
    ("unicode_passthrough", "{{ u }} {{ u|length }} {{ u[::-1] }}"),
    ("qwen_like_reverse", "{%- set ns = namespace(idx=msgs|length - 1) %}{%- for m in msgs[::-1] %}{%- set index = (msgs|length - 1) - loop.index0 %}{%- if m.role == 'user' %}{%- set ns.idx = index %}{%- endif %}{%- endfor %}{{ ns.idx }}"),
    ("nested_loops", "{% for m in msgs %}{% for tc in m.tool_calls or [] %}{{ loop.index }}{{ tc.name }}{{ tc.arguments|tojson }}{% endfor %}{% endfor %}"),
    ("print_containers", "{{ d }} {{ msgs[0] }} {{ ['it\\'s', 'q\"'] }}"),
    ("dict_literal_in_tag", "{{ {'a': {'b': 1}}['a']['b'] }}"),
    ("whitespace_mix", "{%- for x in items -%}\n  {{ x }}\n{%- endfor %}\n"),
    ("if_blocks_lines", "<s>\n{% for m in msgs %}\n  {% if m.role == 'user' %}\n    U: {{ m.content }}\n  {% else %}\n    O: {{ m.content }}\n  {% endif %}\n{% endfor %}\n</s>"),
    ("strftime_pinned", "{{ strftime_now('%d %b %Y') }}"),
    ("globals_defined", "{{ raise_exception is defined }} {{ range is callable }} {{ strftime_now is defined }} {{ nosuch is defined }}"),
    ("numeric_edges", "{{ -2 ** 2 }} {{ 7.0 // 2 }} {{ 7 % 2.5 }} {{ 2 ** -1 }} {{ true + 1 }} {{ 1 == true }} {{ -n }} {{ +f }} {{ 3 * 'ab' }} {{ 10 is divisibleby(5) }}"),
    ("chained_ternary", "{{ 1 if 0 else 2 if 1 else 3 }} [{{ 'a' if false }}] {{ none is none }} {{ none == none }} {{ [] is sequence }}"),
    ("unpack_lists", "{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %} {{ (1, 2)|list }} {{ [1, 2][5] is defined }}"),
    ("ws_strip_both", "{%- if true -%}  {{ 'x' }}  {%- endif -%}  !"),
    ("unicode_compare", "{{ 'é' > 'z' }} {{ ['b', 'a'] < ['b', 'b'] }} {{ 'Ä'|lower }}"),
    ("unicode_case", "{{ 'ÀÉÎõü ÿ straße ĀāĲĳŸ ΑΒΓ αβγ ς ΆΈ ДЖЯ дЖя ЁЂ ёђ µ'|upper }}|{{ 'ÀÉÎõü ÿ ĀāĲĳŸ ΑΒΓ ΆΈ ДЖЯ ЁЂ İ'|lower }}|{{ 'élan vital'|title }}|{{ 'ÉCOLE'|capitalize }}|{{ 'ébène x'.title() }}"),
]

def main():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False: json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    env.globals["strftime_now"] = lambda fmt: "26 Jul 2024"
    env.globals["raise_exception"] = lambda msg: (_ for _ in ()).throw(Exception(msg))
    out = {"context": CTX, "now_epoch": 1721952000, "cases": []}
    for name, src in CASES:
        text = env.from_string(src).render(**CTX)
        out["cases"].append({"name": name, "template": src, "expected": text})
    json.dump(out, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")

main()
