#!/usr/bin/env python3
"""Regenerates jinja_cases.json: small templates exercising each supported Jinja feature, with
the output Python Jinja2 gives under Hugging Face's configuration (see render_jinja2.py). The
unit test test_jinja.c renders every case with our interpreter and expects the same bytes.

usage: python3 gen_jinja_cases.py > jinja_cases.json   (needs the jinja2 module)
"""
import json
import sys

from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class AssistantTracker(Extension):
    """transformers' {% generation %} tag (chat_template_utils.py): outside
    return_assistant_tokens_mask it renders its body."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        call = self.call_method("_render_assistant", [], [], lineno=lineno)
        return nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _render_assistant(self, caller):
        return caller()

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
    # macros: defaults, keywords, varargs/kwargs, recursion, scope, attributes
    ("macro_defaults_keywords", "{% macro m(a, b=2, c='x') %}[{{ a }}{{ b }}{{ c }}]{% endmacro %}{{ m(1) }}{{ m(1, 3) }}{{ m(1, c='y') }}{{ m(a=5, b=6) }}{{ m(1, c=b) if false else m(c=7, a=8) }}"),
    ("macro_default_uses_param", "{% macro m(a, b=a * 2, c=b ~ '!') %}{{ a }} {{ b }} {{ c }}{% endmacro %}{{ m(4) }}"),
    ("macro_missing_param", "{% macro m(a, b) %}[{{ a }}|{{ b }}|{{ b is defined }}|{{ b|default('dflt') }}]{% endmacro %}{{ m(1) }}{{ m() }}"),
    ("macro_varargs_kwargs", "{% macro m(a) %}{{ a }} {{ varargs }} {{ kwargs }} {{ varargs|length }}{% for k, v in kwargs|dictsort %} {{ k }}={{ v }}{% endfor %}{% endmacro %}{{ m(1, 2, 3, z=4, y='w') }}|{{ m(0) }}"),
    ("macro_varargs_only", "{% macro m() %}{{ varargs|join(',') }}{% endmacro %}{{ m() }}/{{ m(1) }}/{{ m(1, 'b', none) }}"),
    ("macro_kwargs_only", "{% macro m(a=1) %}{{ a }}{{ kwargs|tojson }}{% endmacro %}{{ m() }} {{ m(2, q=[1]) }} {{ m(q=3, a=4) }}"),
    ("macro_recursion", "{% macro tree(node, depth=0) %}{{ '  ' * depth }}{{ node.name }}\n{% for c in node.children or [] %}{{ tree(c, depth + 1) }}{% endfor %}{% endmacro %}{{ tree({'name': 'root', 'children': [{'name': 'a', 'children': [{'name': 'a1'}]}, {'name': 'b'}]}) }}"),
    ("macro_recursion_nested_def", "{% macro outer(x) %}{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(x) }}{% endmacro %}{{ outer(3) }}{% for q in [2] %}{% macro g(n) %}{{ n }}{% if n > 0 %}{{ g(n - 1) }}{% endif %}{% endmacro %}{{ g(q) }}{% endfor %}"),
    ("macro_calls_later_macro", "{% macro a() %}A{{ b() }}{% endmacro %}{% macro b() %}B{% endmacro %}{{ a() }}"),
    ("macro_sees_globals_at_call", "{% set x = 4 %}{% macro a() %}{{ x }}{{ name }}{% endmacro %}{{ a() }}{% set x = 5 %}{{ a() }}"),
    ("macro_closure_loop_var", "{% for i in [1, 2] %}{% macro a() %}<{{ i }}>{% endmacro %}{{ a() }}{% endfor %}{{ a is defined }}"),
    ("macro_local_scope", "{% set v = 'outer' %}{% macro m() %}{% set v = 'inner' %}{{ v }}{% endmacro %}{{ m() }} {{ v }}"),
    ("macro_no_caller_scope", "{% macro inner() %}{{ w is defined }}{% endmacro %}{% macro outer() %}{% set w = 1 %}{{ inner() }}{% endmacro %}{{ outer() }}"),
    ("macro_attributes", "{% macro m(a, b=2) %}{{ kwargs }}{{ varargs }}{{ caller }}{% endmacro %}{% macro p() %}{% endmacro %}{{ m.name }} {{ m.arguments }} {{ m.catch_kwargs }} {{ m.catch_varargs }} {{ m.caller }} {{ p.arguments }} {{ p.caller }} {{ m is callable }}"),
    ("macro_returns_string", "{% macro m(x) %} {{ x }} {% endmacro %}[{{ m(1)|trim }}][{{ m(2)|length }}]{% set s = m(3) %}[{{ s ~ s }}]"),
    ("macro_in_if_defined_after", "{% if true %}{% macro m() %}yes{% endmacro %}{% endif %}{{ m() }}"),
    ("macro_whitespace", "{% macro m(x) %}\n  <{{ x }}>\n{% endmacro %}\n{{ m(1) }}{{ m(2) }}"),
    # call blocks
    ("call_block", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ name }}{% endcall %}"),
    ("call_block_args", "{% macro each(xs) %}{% for x in xs %}{{ caller(x, loop.index) }}{% endfor %}{% endmacro %}{% call(item, i) each(items) %}{{ i }}={{ item }};{% endcall %}"),
    ("call_block_arg_defaults", "{% macro m() %}{{ caller() }}|{{ caller(1) }}|{{ caller(1, y=5) }}|{{ caller(y=6, x=7) }}{% endmacro %}{% call(x, y=2) m() %}{{ x }}-{{ y }}{% endcall %}"),
    ("call_block_sees_call_site", "{% set v = 5 %}{% macro m() %}{% set v = 3 %}{{ caller() }}{% endmacro %}{% for i in [1, 2] %}{% call m() %}{{ v }}{{ i }}{{ loop.index }}{% endcall %}{% endfor %}"),
    ("call_block_scope", "{% macro m() %}{{ caller() }}{{ caller() }}{% endmacro %}{% set ns = namespace(c=0) %}{% call m() %}{% set y = 1 %}{% set ns.c = ns.c + 1 %}{{ ns.c }}{{ y }}{% endcall %}[{{ y }}]"),
    ("call_block_with_macro_args", "{% macro field(name, value='', type='text') %}<input {{ name }} {{ value }} {{ type }}>{{ caller(name|upper) }}{% endmacro %}{% call(n) field('user', type='pw') %}[{{ n }}]{% endcall %}"),
    ("call_block_nested", "{% macro box(t) %}[{{ t }}:{{ caller() }}]{% endmacro %}{% call box('o') %}{% call box('i') %}{{ name }}{% endcall %}{% endcall %}"),
    ("caller_passed_through", "{% macro inner() %}<{{ caller() }}>{% endmacro %}{% macro outer() %}{{ inner(caller=caller) }}{% endmacro %}{% call outer() %}X{% endcall %}"),
    ("caller_defined_tests", "{% macro m() %}{{ caller is defined }}{% if caller is defined %}{{ caller() }}{% endif %}{% endmacro %}{{ m() }} {% call m() %}body{% endcall %}"),
    ("caller_kwargs_varargs", "{% macro m() %}{{ caller(1, 2, k=3) }}{% endmacro %}{% call(a) m() %}{{ a }}{{ varargs }}{{ kwargs }}{% endcall %}"),
    ("call_block_whitespace", "{% macro m() %}\n  [{{ caller() }}]\n{% endmacro %}\n{% call m() %}\n  body\n{% endcall %}\nend"),
    # filter blocks
    ("filter_block", "{% filter upper %}abc {{ name }}{% endfilter %}"),
    ("filter_block_args_chain", "{% filter replace('a', 'b')|upper %}aaa{% endfilter %}|{% filter trim|capitalize %}   hello   {% endfilter %}|{% filter indent(2, true) %}x\ny{% endfilter %}"),
    ("filter_block_scope", "{% set x = 1 %}{% filter upper %}{% set x = 2 %}{{ x }}{% endfilter %}{{ x }}"),
    ("filter_block_nested_loop", "{% for m in msgs %}{% filter trim %}  {{ m.role }}  {% endfilter %};{% endfor %}"),
    ("filter_block_break", "{% for x in items %}{% filter upper %}a{{ x }}{% if x == 1 %}{% break %}{% endif %}b{% endfilter %}{% endfor %}"),
    ("set_block_break", "{% for x in items %}{% set y %}{{ x }}{% if x == 1 %}{% continue %}{% endif %}{% endset %}{{ y }}{% endfor %}"),
    ("filter_block_tojson", "{% filter tojson %}a\"b{% endfilter %}"),
    # Markup strings (safe/escape) and the select family on falsy operands (functionary v3.1)
    ("markup_plus", "{{ 'a<'|safe + '<b>' }}|{{ '<x>' + 'y&'|safe }}|{{ ('<'|e) + '>' }}|{{ '<'|e|e }}|{{ 'a'|safe ~ '<' }}|{{ '\\'q\\''|escape }}|{{ 'x'|safe + name + '\"'|safe }}|{{ ('<'|safe + '>')|length }}"),
    ("markup_functionary", "{% for t in msgs[2].tool_calls %}{{ \"Use '\"|safe + t['name'] + \"'\\n\"|safe + t|tojson() }}{% endfor %}"),
    ("select_family_falsy", "{{ nothing|selectattr('x')|list }} {{ nothing|map('upper')|list }} {{ ''|select|list }} {{ 0|reject|list }} {{ fl|rejectattr('a')|list }} {{ missing|map(attribute='a')|list }}"),
    # with, standalone blocks
    ("with_statement", "{% set a = 5 %}{% with a = 1, b = a %}{{ a }}{{ b }}{% set c = 3 %}{% endwith %}{{ a }}[{{ b }}{{ c }}]{% with %}{% set q = 1 %}{{ q }}{% endwith %}[{{ q }}]"),
    ("block_standalone", "{% set x = 1 %}{% block b %}{{ x }}{% set y = 2 %}{% endblock %}[{{ y }}]{% for i in [1] %}{% block c %}[{{ i }}]{% endblock c %}{% block d scoped %}[{{ i }}]{% endblock %}{% endfor %}"),
    # printf-style formatting
    ("percent_format", "{{ '%s-%d' % ('a', 3) }} {{ '%.2f' % 2.5 }} {{ '%5s|%-5s|' % ('x', 'y') }} {{ 'v=%r' % ('q',) }} {{ '%(a)s/%(b)03d' % {'a': 'k', 'b': 7} }} {{ '%x %X %o %e %g %%' % (255, 255, 8, 12345.678, 0.0001) }} {{ '%s' % none }} {{ '%s' % [1, 2] }} {{ '%d' % 3.9 }} {{ '%+d % d' % (5, 5) }} {{ '%c%c' % (65, 'é') }} {{ '%.2s' % 'héllo' }}"),
    ("format_filter", "{{ '%s, %s'|format('a', 'b') }} {{ '%(x)s!'|format(x=name) }} {{ '%05.1f'|format(3.14159) }}"),
    ("str_format", "{{ '{} and {}'.format('a', 1) }}|{{ '{0}{name}{0}'.format('z', name='n') }}|{{ '{{x}} {}'.format(true) }}|{{ '{:>6}|{:<6}|{:^7}|{:*^7}'.format('ab', 'cd', 'ef', 'gh') }}|{{ '{:05d}|{:+d}|{: d}|{:,}|{:_}'.format(42, 5, 5, 1234567, -1234567) }}|{{ '{:x}|{:#x}|{:#b}|{:o}|{:c}'.format(255, 255, 5, 8, 65) }}"),
    ("str_format_floats", "{{ '{:.2f}|{:10.3f}|{:e}|{:.3g}|{}'.format(3.14159, 2.5, 12345.678, 0.000123456, 1.5) }}|{{ '{:.1%}|{:g}|{:.3}|{:08.2f}|{:-^10.1f}'.format(0.256, 100000000.0, 2.0, -3.14159, 7.25) }}|{{ '{:.2f}'.format(2) }}"),
    ("str_format_fields", "{{ '{0[role]}|{1[1]}|{x!r}|{x!s}|{y!r:>8}'.format(msgs[1], [1, 2], x='q', y='w') }}|{{ '{:.2}|{:5}|{}|{}|{:d}|{:>6}'.format('héllo', 'é', none, [1, 'a'], true, false) }}|{{ '[{:3}][{:>2}]'.format('', '') }}"),
    # string and list methods
    ("string_methods3", "{{ '42'.isdigit() }} {{ 'a1'.isdigit() }} {{ 'ab'.isalpha() }} {{ 'é'.isalpha() }} {{ ' \\t'.isspace() }} {{ ''.isspace() }} {{ 'AB1'.isupper() }} {{ 'ab'.islower() }} {{ '1'.islower() }} {{ 'a1'.isalnum() }} {{ '7'.zfill(3) }} {{ '-7'.zfill(4) }} [{{ 'x'.center(4) }}] [{{ 'ab'.center(5, '*') }}] [{{ 'x'.ljust(3) }}] [{{ 'x'.rjust(3, '.') }}] {{ 'a.b.c'.rfind('.') }} {{ 'a.b'.rfind('z') }} {{ 'abc'.index('c') }} {{ 'abca'.rindex('a') }}"),
    ("string_methods4", "{{ 'a=b=c'.partition('=') }} {{ 'a=b=c'.rpartition('=') }} {{ 'abc'.partition('x') }} {{ 'abc'.rpartition('x') }} {{ 'prefix_x'.removeprefix('prefix_') }} {{ 'x.json'.removesuffix('.json') }} {{ 'x'.removesuffix('y') }} {{ 'aBc Éa'.swapcase() }} {{ 'x,y,z'.rsplit(',', 1) }} {{ '  a b  c '.rsplit(none, 1) }} {{ 'a b c'.rsplit(maxsplit=0) }} {{ 'a\\nb\\r\\nc\\rd'.splitlines() }} {{ 'a\\nb\\n'.splitlines(true) }}"),
    ("list_methods", "{{ [1, 2, 2].index(2) }} {{ [1, 2, 2].count(2) }} {{ ['a', 'b'].count('c') }} {{ msgs|map(attribute='role')|list|count }}"),
    # tests, min/max/sort/dictsort options, round, namespace printing
    ("tests_escaped_filter_test", "{{ name is escaped }} {{ '<'|e is escaped }} {{ 'x'|safe is escaped }} {{ 3 is filter }} {{ 'upper' is filter }} {{ 'nosuch' is filter }} {{ 'odd' is test }} {{ 'upper' is test }}"),
    ("minmax_sort_options", "{{ ['a', 'B']|max }} {{ ['a', 'B']|max(case_sensitive=true) }} {{ ['b', 'A']|min }} {{ msgs|max(attribute='role') }} {{ msgs|min(attribute='content') }} {{ ['b', 'A', 'c']|sort(case_sensitive=true) }} {{ ['b', 'A', 'c']|sort }} {{ {'b': 1, 'a': 2}|dictsort(by='value') }} {{ {'b': 1, 'A': 2}|dictsort(case_sensitive=true) }} {{ {'b': 1, 'A': 2}|dictsort(reverse=true) }}"),
    ("round_methods", "{{ 2.5|round }} {{ 3.5|round }} {{ -2.5|round }} {{ 2.675|round(2) }} {{ 1.25|round(1, 'floor') }} {{ 1.21|round(1, 'ceil') }} {{ 5|round }} {{ 5|round(1, 'ceil') }} {{ 0.125|round(2) }}"),
    ("namespace_print", "{% set ns = namespace(a=1, b=[1, 'x']) %}{{ ns }}"),
    ("filters_text", "{{ 'hello world foo'|truncate(9) }}|{{ 'hello world foo'|truncate(9, true) }}|{{ 'hello world foo'|truncate(11, false, '..', 0) }}|{{ 'short'|truncate(255) }}|{{ 'héllo wörld foo bar'|truncate(12) }}|{{ 'a b  c\\nd_e é'|wordcount }}|{{ 'x'|center(5) }}|{{ 'a <b>c</b>  d<!-- x -->e &amp; f'|striptags }}|{{ '<x>'|forceescape }}|{{ '<x>'|safe|forceescape }}"),
    ("filters_batch_slice", "{{ [1, 2, 3, 4, 5]|batch(2)|list }} {{ [1, 2, 3, 4, 5]|batch(2, 0)|list }} {{ [1, 2, 3, 4, 5]|slice(2)|list }} {{ [1, 2, 3, 4, 5]|slice(3, 'x')|list }} {{ []|batch(3)|list }} {{ items|slice(5)|list }}"),
    ("filter_groupby", "{% for g in msgs|groupby('role') %}{{ g.grouper }}:{{ g.list|length }};{% endfor %}{% for k, v in [{'k': 'B'}, {'k': 'a'}, {'k': 'b'}]|groupby('k') %}{{ k }}{{ v|length }}{% endfor %}{% for k, v in [{'k': 'B'}, {'k': 'b'}]|groupby('k', case_sensitive=true) %}{{ k }}{% endfor %}{{ [{'x': 2}, {}]|groupby('x', default=1)|map(attribute='grouper')|list }}"),
    ("dict_int_keys", "{% set d = {0: 'a', 512: 'b', 'x': 1} %}{{ d[512] }} {{ d.get(0) }} {{ d.get(7, 'n') }} {{ 0 in d }} {{ 1 in d }} {{ d|tojson }} {{ d }} {% for k in d %}{{ k + 1 if k is number else k }},{% endfor %} {{ d.items()|list }} {{ {2: 'b', 1: 'a'}|dictsort }} {{ {1: 2}.keys()|list }} {{ d|length }}"),
    ("generation_block", "{% for m in msgs %}{% if m.role == 'assistant' %}{% generation %}<{{ m.content }}>{% set inner = 1 %}{% endgeneration %}{% else %}{{ m.role }}{% endif %}{% endfor %}\n  {%- generation -%}\n  x {{ inner is defined }}{% set top = 1 %}\n  {%- endgeneration %}{{ top is defined }}"),
    ("cycler_joiner", "{% set c = cycler('a', 'b') %}{{ c.next() }}{{ c.next() }}{{ c.next() }}{{ c.current }}{{ c.reset() }}{{ c.current }}{% for x in items %}{{ c.next() }}{% endfor %}{{ c.items }} {% set j = joiner(' | ') %}{% for x in items %}{{ j() }}{{ x }}{% endfor %}{% set k = joiner() %}[{{ k() }}{{ k() }}{{ k() }}]{% macro m() %}{{ c.next() }}{% endmacro %}{{ m() }}{{ m() }}"),
    # loop helpers
    ("loop_cycle_depth", "{% for x in items %}{{ loop.cycle('odd', 'even') }}{{ loop.depth }}{{ loop.depth0 }} {% endfor %}"),
    ("loop_prev_next_first_last", "{% for m in msgs %}{% if not loop.first %}{{ loop.previtem.role }}>{% endif %}{{ m.role }}{% if loop.nextitem is defined %}>{{ loop.nextitem.role }}{% endif %}{% if loop.last %}!{% endif %} {% endfor %}"),
    ("break_continue_nested", "{% for x in items %}{% for y in items %}{% if y == x %}{% break %}{% endif %}{{ y }}{% endfor %};{% if x == 1 %}{% continue %}{% endif %}{{ x }}|{% endfor %}"),
    ("unicode_case", "{{ 'ÀÉÎõü ÿ straße ĀāĲĳŸ ΑΒΓ αβγ ς ΆΈ ДЖЯ дЖя ЁЂ ёђ µ'|upper }}|{{ 'ÀÉÎõü ÿ ĀāĲĳŸ ΑΒΓ ΆΈ ДЖЯ ЁЂ İ'|lower }}|{{ 'élan vital'|title }}|{{ 'ÉCOLE'|capitalize }}|{{ 'ébène x'.title() }}"),
]

# Templates Jinja2 rejects (at compile or render time): ours must fail too, with a message that
# names the line and column.
ERROR_CASES = [
    ("macro_too_many_args", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}"),
    ("macro_unknown_keyword", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, z=2) }}"),
    ("macro_keyword_for_positional", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, a=2) }}"),
    ("macro_missing_param_used", "{% macro m(a, b) %}{{ b.x }}{% endmacro %}{{ m(1) }}"),
    ("macro_before_definition", "{{ m() }}{% macro m() %}x{% endmacro %}"),
    ("macro_caller_param_no_default", "{% macro m(caller) %}{{ caller }}{% endmacro %}"),
    ("macro_duplicate_param", "{% macro m(a, a) %}{% endmacro %}"),
    ("macro_not_defined_in_loop_scope", "{% for i in [1] %}{% macro a() %}{% endmacro %}{% endfor %}{{ a() }}"),
    ("call_block_macro_without_caller", "{% macro m() %}x{% endmacro %}{% call m() %}body{% endcall %}"),
    ("caller_without_call_block", "{% macro m() %}{{ caller() }}{% endmacro %}{{ m() }}"),
    ("caller_too_many_args", "{% macro m() %}{{ caller(1, 2) }}{% endmacro %}{% call(x) m() %}{{ x }}{% endcall %}"),
    ("call_block_not_a_call", "{% call foo %}x{% endcall %}"),
    ("call_block_unclosed", "{% macro m() %}{{ caller() }}{% endmacro %}{% call m() %}x"),
    ("call_block_undefined_macro", "{% call nosuch() %}x{% endcall %}"),
    ("filter_block_unknown", "{% filter nosuch %}x{% endfilter %}"),
    ("filter_block_unclosed", "{% filter upper %}x"),
    ("filter_block_no_name", "{% filter %}x{% endfilter %}"),
    ("break_outside_loop", "{% break %}"),
    ("continue_in_macro_outside_loop", "{% for x in [1] %}{% macro m() %}{% continue %}{% endmacro %}{% endfor %}"),
    ("break_in_for_else", "{% for x in [] %}{% else %}{% break %}{% endfor %}"),
    ("break_in_generation", "{% for x in [1] %}{% generation %}{% break %}{% endgeneration %}{% endfor %}"),
    ("format_switch_numbering", "{{ '{}{1}'.format(1, 2) }}"),
    ("format_single_brace", "{{ '{'.format(1) }}"),
    ("format_bad_code", "{{ '{:d}'.format('x') }}"),
    ("format_float_as_int", "{{ '{:d}'.format(2.5) }}"),
    ("format_int_as_str", "{{ '{:s}'.format(2) }}"),
    ("format_junk_after_conversion", "{{ '{x!rZ}'.format(x=1) }}"),
    ("cycler_empty", "{{ cycler().next() }}"),
    ("format_missing_arg", "{{ '{} {}'.format(1) }}"),
    ("dict_unhashable_key", "{{ {[1]: 2} }}"),
    ("block_defined_twice", "{% block b %}{% endblock %}{% block b %}{% endblock %}"),
    ("with_bad_target", "{% with 1 = 2 %}{% endwith %}"),
    ("percent_too_few", "{{ '%s %s' % ('a',) }}"),
    ("percent_too_many", "{{ '%s' % ('a', 'b') }}"),
    ("percent_needs_number", "{{ '%d' % 'x' }}"),
    ("index_not_found", "{{ 'abc'.index('z') }}"),
    ("list_index_not_found", "{{ [1].index(2) }}"),
    ("loop_cycle_no_items", "{% for x in [1] %}{{ loop.cycle() }}{% endfor %}"),
]


def main():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols, AssistantTracker])
    env.filters["tojson"] = lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False: json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    env.globals["strftime_now"] = lambda fmt: "26 Jul 2024"
    env.globals["raise_exception"] = lambda msg: (_ for _ in ()).throw(Exception(msg))
    out = {"context": CTX, "now_epoch": 1721952000, "cases": [], "error_cases": []}
    for name, src in CASES:
        text = env.from_string(src).render(**CTX)
        out["cases"].append({"name": name, "template": src, "expected": text})
    for name, src in ERROR_CASES:
        try:
            env.from_string(src).render(**CTX)
        except Exception as e:  # the reference's error: ours must fail too (wording differs)
            out["error_cases"].append({"name": name, "template": src, "error": str(e)})
            continue
        raise SystemExit(f"error case {name} renders")
    json.dump(out, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")

main()
