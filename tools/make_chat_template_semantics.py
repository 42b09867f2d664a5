#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes tests/data/chat_templates/semantics/python_jinja2.json: small templates (expressions,
filters, tests, methods, loops, whitespace control) and what Python's Jinja2 renders from them
in the environment Hugging Face transformers uses (trim_blocks, lstrip_blocks, loopcontrols,
tojson as json.dumps(ensure_ascii=False)), or that it raises. Where @huggingface/jinja differs
from Python (True vs true, tuple printing, ...), edgellm follows Python; "js" records the
JavaScript rendering where it differs, when NODE_PATH holds @huggingface/jinja.

    NODE_PATH=/tmp/chat-npm/node_modules python3 tools/make_chat_template_semantics.py  # needs jinja2
"""
import json
import os
import pathlib
import subprocess

from jinja2.sandbox import ImmutableSandboxedEnvironment

CASES = [
 "{{ [1, 2.5, 'a', none, true, {'k': 'v'}] }}",
 "{{ {'a': 1, 'b': [1,2]} }}",
 "{{ 1e20 }} {{ 1.5e-7 }} {{ 0.1 + 0.2 }} {{ 10 / 4 }} {{ 2 ** -1 }} {{ -0.0 }}",
 "{{ 'abc'[1] }}{{ 'abc'[-1] }}{{ 'abc'[5] }}|{{ [1,2,3][1:-1] }}{{ [1,2,3][::2] }}{{ [1,2,3][5:] }}{{ 'hello'[-3:] }}",
 "{{ 'a,b,,c'.split(',') }} {{ 'a b  c'.split(' ') }} {{ 'a b c'.split(None, 1) }} {{ 'abc'.split('b', 0) }}",
 "{{ '  x  ' | trim }}|{{ 'xyx' | trim('x') }}|{{ '\\u00a0x\\u3000'.strip() }}|",
 "{{ 'hello world foo' | title }} {{ \"o'neil mc-donald\" | title }} {{ 'ABC def' | capitalize }}",
 "{{ 'aaa'.replace('a', 'b', 2) }} {{ 'abc'.replace('', '-') }} {{ 'abc' | replace('b', 'X') }}",
 "{{ [3,1,2] | sort }} {{ [3,1,2] | sort(reverse=true) }} {{ ['b','a'] | sort | join('-') }} {{ [1,2,3] | sum }} {{ [1,5,2] | max }} {{ [1,5,2] | min }}",
 "{{ [1,2,2,3,1] | unique | list }} {{ 'abc' | list }} {{ 'abc' | reverse }} {{ [1,2] | reverse | list }}",
 "{{ {'b': 2, 'a': 1} | dictsort }} {{ {'b': 2, 'a': 1} | items | list }}",
 "{{ 5 | string }}{{ '5' | int + 1 }}{{ 'x' | int }}{{ '2.5' | float }}{{ 3 | float }}{{ 2.7 | int }}",
 "{{ none | default('d') }}{{ '' | default('d') }}{{ '' | default('d', true) }}{{ false | default('d', true) }}",
 "{{ [1,2,3] | first }}{{ [1,2,3] | last }}{{ [] | first }}|{{ 'abc' | first }}",
 "{{ [{'a': 1}, {'a': 2}, {'b': 3}] | selectattr('a') | list }} {{ [{'a': 1}, {'a': 2}, {'b': 3}] | rejectattr('a') | list }}",
 "{{ [{'a': 1}, {'a': 2}] | selectattr('a', 'equalto', 2) | list }} {{ [1,2,3,4] | select('odd') | list }} {{ [1,2,3,4] | reject('divisibleby', 2) | list }}",
 "{{ [{'a': 1}, {'b': 2}] | map(attribute='a') | list }} {{ ['a', 'b'] | map('upper') | join }}",
 "{{ 'line1\\nline2\\n\\nline4' | indent }}|{{ 'l1\\nl2' | indent(2, true) }}|{{ 'l1\\n\\nl2' | indent(2, blank=true) }}",
 "{{ {'a': [1, {'b': none}], 'c': 'é\"\\n'} | tojson }} {{ [] | tojson }} {{ {} | tojson }} {{ 'x' | tojson }} {{ 1.0 | tojson }}",
 "{{ {'a': [1, 2], 'b': {}} | tojson(indent=2) }}",
 "{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}",
 "{% for a, b in [[1, 2], [3, 4]] %}{{ a }}{{ b }}{% endfor %}",
 "{% for x in 'ab' %}{{ loop.index }}{{ x }}{{ loop.revindex0 }}{% endfor %}",
 "{% for x in {'k1': 1, 'k2': 2} %}{{ x }}{% endfor %}",
 "{% for x in [1,2,3] %}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}",
 "{% for i in range(3) %}{% for j in range(2) %}{{ loop.index0 }}{{ i }}{% endfor %}{{ loop.last }}{% endfor %}",
 "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c = (3, 4) %}{{ c }}",
 "{% if 1 %}a{% elif 2 %}b{% else %}c{% endif %}{% if 0 %}a{% elif 2 %}b{% else %}c{% endif %}{% if 0 %}a{% elif 0 %}b{% else %}c{% endif %}",
 "{{ 1 if 0 }}|{{ 'x' if 1 }}|{{ none is none }}{{ 1 is number }}{{ 1.0 is float }}{{ 1 is integer }}{{ true is boolean }}{{ 'a' is string }}{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is sequence }}",
 "{{ 3 is odd }}{{ 4 is even }}{{ 6 is divisibleby 3 }}{{ 6 is divisibleby(4) }}{{ 1 is eq 1 }}{{ 1 is ne 2 }}{{ 1 is lt 2 }}{{ 'a' is in 'abc' }}{{ 'abc' is lower }}{{ 'ABC' is upper }}",
 "{{ true and 'x' }}|{{ false or none }}|{{ not none }}|{{ 1 == 1.0 }}|{{ true == 1 }}|{{ [1] == [1] }}|{{ 'a' < 'b' }}|{{ [1,2] < [1,3] }}",
 "{{ 'a' ~ 'b' ~ 3 ~ 1.5 ~ true }} {{ 'ab' * 3 }} {{ [1] * 3 }} {{ 3 * 'x' }} {{ 7 % -3 }} {{ -7.5 // 2 }} {{ 7.5 % 2 }}",
 "{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith('bc') }}{{ 'abc'.upper() }}{{ 'ABC'.lower() }}{{ 'abcabc'.find('c') }}{{ 'abcabc'.count('bc') }}{{ '-'.join(['a','b']) }}",
 "{{ {'a': 1}.get('a') }}{{ {'a': 1}.get('b') }}{{ {'a': 1}.keys() | list }}{{ {'a': 1}.values() | list }}{{ {'a': 1}.items() | list }}",
 "{% set ns = namespace(x=1, y=[1]) %}{% set ns.x = ns.x + 1 %}{{ ns.x }}{{ ns.y }}",
 "{% macro m(a, b='B') %}[{{ a }}{{ b }}]{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(b=3, a=4) }}",
 "{{ 'x' }}\n  {%- if true %}\n    y\n  {%- endif %}\nz\n   {% if true %}\n   a\n   {% endif %}\n   b {% if true %}c{% endif %}\n{% for x in [1,2] %}\n  {{ x }}\n{% endfor %}\n",
 "{{ \"adjacent\" 'strings' }} {{ '\\x41\\u00e9\\t|' }} {{ \"it's\" }}",
 "{{ none }}|{{ undefined_var }}|{{ true }}|{{ [none, true, 'it\\'s'] }}",
 "{{ messages | length }}{{ messages[0].role }}{{ messages[0]['content'] }}{{ messages[-1].content | upper }}",
 "{{ range(3) | list }}{{ range(1, 7, 2) | list }}{{ range(3, 0, -1) | list }}",
 "{% for m in messages if m.role != 'system' %}{{ loop.index }}:{{ m.role }} {% endfor %}",
 "{% for x in [] %}x{% else %}else{% endfor %}",
 "{{ 'x' is defined }}{{ y is undefined }}{{ y is not defined }}{{ messages[9] is defined }}",
 "{{ -1 | abs }}{{ [1,2] | count }}{{ 'a b c' | wordcount }}{{ 'é' | length }}",
 "{{ '%s' }}{{ '{{' }}{{ '}}' }}",
 "{% set x %}captured {{ 1 }}{% endset %}{{ x | upper }}",
 "{{ dict(a=1, b=2) }} {{ namespace(a=1).a }}",
 "{{ foo.bar }}",
 "{{ 'a' + 1 }}",
 "{{ undefined_x + 'a' }}",
 "{{ undefined_x ~ 'a' }}",
 "{{ [1,2][5] is defined }}",
 "{% for x in undefined_x %}x{% endfor %}ok",
 "{% if undefined_x.y is defined %}a{% endif %}",
 "{{ messages[0].nope.deeper }}",
 "{{ 1 in undefined_x }}",
 "{{ undefined_x | length }}{{ undefined_x | list }}{{ undefined_x | trim }}",
 "{{ undefined_x is none }}{{ none | string }}",
 "{{ undefined_x() }}",
 "{{ 'abc'.nope() }}",
 "{{ messages[0]['role'] == 'system' and messages[1:] | length }}",
 "{{ (messages | selectattr('role', 'equalto', 'user') | list)[0].content }}",
 "{{ messages | map(attribute='role') | join(', ') }}",
 "{% set ns = namespace(found=false) %}{% for m in messages %}{% if m.role == 'user' %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.found }}",
 "{%- for m in messages -%} {{ m.role }} {% endfor -%}  end",
 "{{ 'a' -}}    {{- 'b' }}  {#- c -#}  {{ 'd' }}",
 "{{ 1 + 2 * 3 - 4 / 2 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ not 1 == 2 }} {{ 1 + 2 | string }}",
 "{{ 'x' if false else 'y' if false else 'z' }}",
 "{{ [1, 2, 3,] }} {{ {'a': 1,} }} {{ (1,) }} {{ () }}",
 "{{ messages[0] }}",
 "{{ 10 // 3 * 3 + 10 % 3 }} {{ 1 / 3 }} {{ 2 / 3 }} {{ 1e100 * 10 }} {{ 123456789012345678 }}",
 "{{ '  '.join(['a', 'b']) }} {{ 'a-b-c'.split('-', 1) }} {{ ' a '.rstrip() }}| {{ 'xxhixx'.lstrip('x') }}",
 "{% for m in messages %}{% set last = loop.last %}{% endfor %}{{ last }}",
 "  {% if true %}x{% endif %}",
 "\t {# c #}\n  a",
 "a\n \t{% if true %}\n b\n\t{% endif %}  \nc",
 "x {%- if true %} y {% endif -%}\n\n z",
 "{% if true %}\r\nwin{% endif %}",
 "a {# c #}\nb",
 "{% for i in range(2) %}\n  {{ i }}\n{% endfor %}\n",
 "  {{ 'v' }}\n  {% set x = 1 %}\n  end",
 "{%+ if true %}a{% endif +%}\nb",
 "line\n    {%- if true -%}\n    mid\n    {%- endif -%}\n  after",
 "{{ 'a' }}  \n  {% if true %}b{% endif %}"
]

MESSAGES = [{"role": "system", "content": "S"}, {"role": "user", "content": "hello"}]


def main():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = lambda x, indent=None, separators=None, sort_keys=False: json.dumps(
        x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)
    out = []
    for src in CASES:
        case = {"template": src}
        try:
            case["expected"] = env.from_string(src).render(messages=MESSAGES, add_generation_prompt=False)
        except Exception as e:  # noqa: BLE001 - any Jinja2 failure is the expected outcome
            case["expected_error"] = f"{type(e).__name__}: {e}"
        out.append(case)
    js = os.environ.get("NODE_PATH")
    if js:
        script = ("const {Template}=require('@huggingface/jinja');"
                  "const cs=JSON.parse(require('fs').readFileSync(0));"
                  "console.log(JSON.stringify(cs.map(c=>{try{return new Template(c).render({messages:%s,"
                  "add_generation_prompt:false})}catch(e){return null}})))" % json.dumps(MESSAGES))
        r = subprocess.run(["node", "-e", script], input=json.dumps(CASES), capture_output=True, text=True,
                           check=True)
        for case, rendered in zip(out, json.loads(r.stdout)):
            if rendered is not None and rendered != case.get("expected"):
                case["js"] = rendered
    path = pathlib.Path(__file__).resolve().parent.parent / "tests/data/chat_templates/semantics/python_jinja2.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{len(out)} cases, {sum('expected_error' in c for c in out)} errors, "
          f"{sum('js' in c for c in out)} rendered differently by @huggingface/jinja")


if __name__ == "__main__":
    main()
