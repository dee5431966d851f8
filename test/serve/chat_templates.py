#!/usr/bin/env python3
"""Chat templates: llmc's Jinja subset (serve/src/jinja.cpp, through llmc_render_template)
against jinja2 configured as transformers configures it for apply_chat_template
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loop controls, a `generation`
block, raise_exception, strftime_now, tojson = json.dumps(ensure_ascii=False)).

Two sets: the real templates scripts/fetch_chat_templates.sh puts in .cache/chat-templates/
(every one, on several conversations, with the generation prompt on and off), and small
templates written here, one per feature. A case passes when both render the same bytes, or
both refuse it (raise_exception, a type error). Exit 1 on any difference, or when fewer than
8 model families' templates were found."""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

import jinja2
import jinja2.ext
import jinja2.sandbox

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
TEMPLATES = os.path.join(ROOT, ".cache", "chat-templates")
NOW = 1767268800  # 2026-01-01 12:00 UTC: strftime_now's time on both sides


class Generation(jinja2.ext.Extension):
    """{% generation %}...{% endgeneration %}: renders its body (transformers marks the
    assistant's tokens with it)."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body, lineno=lineno)


def environment():
    import datetime

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime.fromtimestamp(NOW, datetime.timezone.utc).strftime(fmt)

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                       extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


SYSTEM = {"role": "system", "content": "You are a helpful assistant. Answer briefly."}
CONVERSATIONS = {
    "user": [{"role": "user", "content": "Hello! How are you?"}],
    "system+user": [SYSTEM, {"role": "user", "content": "What is 2 + 2?"}],
    "multi-turn": [SYSTEM, {"role": "user", "content": "Name a colour."},
                   {"role": "assistant", "content": "Blue."},
                   {"role": "user", "content": "Another one, \"quoted\" and\nwith a newline."}],
    "no-system-turns": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there."},
                        {"role": "user", "content": "Café, naïve, 日本語 — and emoji 🙂"}],
    "ends-with-assistant": [{"role": "user", "content": "Say yes."}, {"role": "assistant", "content": "  Yes.  "}],
}
EXTRA = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"}
# OpenAI-style tools whose keys are not in sorted order: templates print them as given.
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "city": {"type": "string", "description": "Where, e.g. \"Zürich\""}},
        "required": ["city"]}}}]

# One feature each: whitespace control, trim/lstrip of blocks, scoping, filters, tests, methods.
FEATURES = {
    "ws-minus": "a  {{- ' b ' -}}  c\n  {%- if true %} d {% endif -%}\n e",
    "trim-lstrip": "x\n    {% if true %}\n  y\n    {% endif %}\nz\n{# c #}\nw",
    "lstrip-inline": "a {% if true %}b{% endif %} c\n  {%+ if true %}d{% endif %}",
    "plus-trim": "{% if true +%}\nkept{% endif %}",
    "key-order": "{{ tools | tojson }}|{% for k in tools[0].function.parameters.properties %}{{ k }},"
                 "{% endfor %}|{{ tools[0].function.parameters.properties.items() | list }}",
    "ensure-ascii": "{{ 'Zürich 🙂 \x7f' | tojson(ensure_ascii=True) }}|{{ 'Zürich 🙂 \x7f' | tojson }}",
    "markup-plus": "{{ '<b>' | safe + 'x\" & <y>' }}|{{ \"a&'\" + '<b>' | safe }}|{{ ('<i>' | safe) ~ '&' }}",
    "iterators-as-lists": "{{ tools | map(attribute='type') | list | tojson }}{{ {'a': 1}.items() | list }}"
                          "{{ [3, 1] | reverse | list }}",
    "iterator-tojson": "{{ tools | map(attribute='type') | tojson }}",
    "loop-vars": "{% for x in [3, 1, 2] %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}"
                 "{{ loop.length }}{{ loop.revindex }}{{ loop.previtem }}|{% endfor %}",
    "loop-filter-else": "{% for x in range(10) if x is odd %}{{ x }}{% else %}none{% endfor %}"
                        "{% for x in [] %}{{ x }}{% else %}empty{% endfor %}",
    "break-continue": "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 5 %}"
                      "{% break %}{% endif %}{{ x }}{% endfor %}",
    "scoping": "{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}"
               "{% set ns = namespace(x=1) %}{% for i in [1] %}{% set ns.x = 3 %}{% endfor %}{{ ns.x }}",
    "set-block": "{% set t %}A{{ 1 + 1 }}B{% endset %}[{{ t }}]",
    "tuple-unpack": "{% for k, v in {'a': 1, 'b': [2, 3]}.items() %}{{ k }}={{ v }};{% endfor %}"
                    "{% set a, b = 1, 'two' %}{{ a }}{{ b }}",
    "arith": "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1 + 2 * 3 }}"
             " {{ 'a' ~ 1 ~ none }} {{ 10 / 4 * 2 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 3.0 }} {{ -0.5 }}",
    "floats": "{{ 100000.0 }} {{ 1.5e10 }} {{ 1e16 }} {{ 0.0001 }} {{ 0.00001 }} {{ 123456789.0 }} {{ -0.0 }}"
              " {{ 2.5e-7 }} {{ 1 / 3 }} {{ 10 / 4 }} {{ 1e15 + 0.5 }} {{ [0.1, 1e100] }} {{ {'x': 1e22} | tojson }}",
    "compare": "{{ 1 < 2 < 3 }} {{ 'a' in 'cat' }} {{ 2 not in [1, 3] }} {{ 'k' in {'k': 1} }} {{ [1, 2] == [1, 2] }}"
               " {{ 1 == 1.0 }} {{ 'b' > 'a' }} {{ none is none }} {{ x is defined }} {{ 3 is divisibleby 3 }}",
    "logic": "{{ 0 or 'x' }} {{ '' and 'y' }} {{ not [] }} {{ 'a' if false else 'b' }} [{{ 'c' if false }}]",
    "strings": "{{ '  hi  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}"
               "|{{ 'Hello'.startswith('He') }}|{{ 'Hello'.endswith(('lo', 'x')) }}|{{ 'ab'.upper() }}"
               "|{{ 'hello world'.title() }}|{{ 'abc'.replace('b', 'B') }}|{{ 'abcb'.find('b') }}"
               "|{{ 'héllo'[1:3] }}|{{ 'héllo'[::-1] }}|{{ 'héllo' | length }}|{{ 'abc'[-1] }}",
    "filters": "{{ [3, 1, 2] | sort | join('-') }}|{{ [1, 2, 3] | first }}{{ [1, 2, 3] | last }}"
               "|{{ 'Abc' | lower }}{{ 'abc' | upper }}{{ 'abc' | capitalize }}|{{ '  x ' | trim }}|"
               "{{ undefined_thing | default('dflt') }}|{{ '' | default('e', true) }}|{{ [1, 1, 2] | unique | list }}"
               "|{{ [1, 2] | reverse | list }}|{{ 'a\nb' | indent(2) }}|{{ 'a\nb' | indent(2, true) }}"
               "|{{ [1, 2, 3] | sum }}{{ [4, 9] | max }}{{ [4, 9] | min }}|{{ '12' | int + 1 }}|{{ 2.5 | round }}",
    "tojson": "{{ {'b': 1, 'a': [1.5, 'é', none, true, '\"q\"\n']} | tojson }}|{{ [1, {'x': 2}] | tojson(indent=2) }}"
              "|{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}|{{ 'x' | tojson }}",
    "select": "{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | join('/') }}|"
              "{{ messages | rejectattr('role', 'equalto', 'user') | list | length }}|"
              "{{ [0, 1, '', 'a'] | select | list }}|{{ messages | map(attribute='role') | unique | list }}",
    "macros": "{% macro m(a, b='B', c=none) %}<{{ a }}{{ b }}{{ c }}>{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m('x', c=3) }}",
    "dict-methods": "{% set d = {'a': 1} %}{{ d.get('a') }}{{ d.get('z', 'no') }}{{ d.get('z') }}{{ d['a'] }}"
                    "{{ d.a }}{{ d.keys() | list }}{{ d.values() | list }}{{ d | length }}{{ d.missing is defined }}",
    "lists": "{{ [1, 2, 3][1:] }}{{ [1, 2, 3][-2:] }}{{ [1, 2, 3][::-1] }}{{ [1, 2] + [3] }}{{ (1, 2) }}{{ [1][5] is defined }}"
             "{{ ['a', 'b'].index('b') }}{{ messages[0].role }}{{ messages[-1]['content'][:5] }}",
    "output-types": "{{ none }} {{ true }} {{ 1.0 }} {{ [1, 'a', none, {'k': 'v'}] }} {{ {'a': \"it's\"} }} {{ 1e-7 }}",
    "raise": "{% if messages | length > 0 %}{{ raise_exception('Conversation roles must alternate') }}{% endif %}",
    "raw": "{% raw %}{{ not rendered }}{% endraw %}!",
    "strftime": "{{ strftime_now('%Y-%m-%d %H:%M %b') }}",
    "generation": "{% for m in messages %}{% generation %}[{{ m.content }}]{% endgeneration %}{% endfor %}",
    "undefined-attr-error": "{{ nothing.at_all }}",
    "type-error": "{{ 1 + 'a' }}",
}


# Templates that must be refused with an error (never a crash, a hang or unbounded memory):
# limits jinja2 does not have (Python's integers are unbounded, its recursion limit is higher).
HOSTILE = {
    "deep-parens": "{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}",
    "long-chain": "{{ " + " + ".join(["1"] * 3000) + " }}",
    "deep-blocks": "{% if true %}" * 500 + "x" + "{% endif %}" * 500,
    "namespace-cycle": "{% set ns = namespace(a=1) %}{% set ns.a = ns %}{{ ns | tojson }}",
    "namespace-cycle-repr": "{% set ns = namespace(a=1) %}{% set ns.a = [ns] %}{{ ns.a }}",
    "int-overflow": "{{ 9223372036854775807 + 1 }}",
    "int-pow": "{{ 3 ** 100 }}",
    "min-div": "{{ (-9223372036854775807 - 1) // -1 }}",
    "string-growth": "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s | length }}",
    "repeat": "{{ 'abc' * 100000000 }}",
    "huge-slice-step": "{{ [1, 2, 3][::9223372036854775807] }}{{ [1, 2, 3][::-9223372036854775807] }}|"
                       "{{ [1, 2, 3][-9223372036854775807:] }}",
    "cpu": "{% for a in range(1000000) %}{% for b in range(1000000) %}{% endfor %}{% endfor %}",
    # Work that one evaluation step hides: quadratic filters and tests, long searches, values
    # built from shared parts (8 MB strings, lists of references to them or to each other).
    "unique-quadratic": "{{ range(300000) | unique | list | length }}",
    "in-list-loop": "{% set l = range(100000) | list %}{% for i in range(100000) %}{% if -1 in l %}"
                    "{% endif %}{% endfor %}",
    "substring-search": "{% set s = 'aaaaaaaa' * 1000000 %}{{ (s ~ 'b') in (s ~ s) }}",
    "count-search": "{% set s = 'aaaaaaaa' * 1000000 %}{{ (s ~ s).count(s ~ 'b') }}",
    "replace-growth": "{% set s = 'aaaaaaaa' * 1000000 %}{{ s.replace('a', 'bbb') | length }}",
    "print-shared": "{% set s = 'aaaaaaaa' * 1000000 %}{{ [s] * 100000 }}",
    "tojson-shared": "{% set s = 'aaaaaaaa' * 1000000 %}{{ [s] * 100000 | tojson }}",
    "join-shared": "{% set s = 'aaaaaaaa' * 1000000 %}{{ [s] * 100000 | join(',') | length }}",
    "compare-nested": "{% set a = [1] * 100000 %}{% set b = [a] * 100000 %}{{ b == b }}",
    "sort-nested": "{% set a = [1] * 1000 %}{% set b = [a] * 100000 %}{{ b | sort | length }}",
    "split-many": "{% set s = 'aaaaaaaa' * 1000000 %}{{ s.split('a') | length }}",
    "indent-wide": "{{ 'a\nb' | indent(2000000000) }}",
    "tojson-indent-wide": "{{ [[1]] | tojson(indent=2000000000) }}",
    "loop-frames": "{% macro m() %}{% for i in range(1000000) %}{{ x }}{% endfor %}{% endmacro %}{{ m() }}",
    "set-attr-on-dict": "{% set d = {} %}{% set d.x = 1 %}",
    # Each key of a dict literal is checked against those before it (quadratic): the tag's limit
    # of 2,048 tokens bounds it before the work budget does.
    "dict-literal-wide": "{{ {" + ", ".join(f"'k{i}': {i}" for i in range(200000)) + "} | length }}",
}
# ... and of those, the ones whose output is defined: (template, text).
HOSTILE_OK = {"huge-slice-step": "[1][3]|[1, 2, 3]"}


def reference(env, template, context):
    try:
        return {"text": env.from_string(template).render(**context)}
    except Exception as e:  # any refusal: the other side must refuse too
        return {"error": f"{type(e).__name__}: {e}"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--render", required=True, help="llmc_render_template")
    parser.add_argument("--templates", default=TEMPLATES)
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args()
    env = environment()

    files = sorted(glob.glob(os.path.join(args.templates, "*.jinja")))
    families = {os.path.basename(f).split("-")[0].lower() for f in files}
    if len(files) < 8 or len(families) < 8:
        print(f"FAIL: {len(files)} templates of {len(families)} families in {args.templates} "
              "(run scripts/setup.sh, which runs scripts/fetch_chat_templates.sh)", file=sys.stderr)
        return 1
    cases = []  # (label, template, context)
    for path in files:
        with open(path, encoding="utf-8") as f:
            template = f.read()
        for name, messages in CONVERSATIONS.items():
            for generation_prompt in (False, True):
                context = dict(EXTRA, messages=messages, add_generation_prompt=generation_prompt)
                cases.append((f"{os.path.basename(path)} / {name} / prompt {'on' if generation_prompt else 'off'}",
                              template, context))
        context = dict(EXTRA, messages=CONVERSATIONS["user"], tools=TOOLS, add_generation_prompt=True)
        cases.append((f"{os.path.basename(path)} / tools / prompt on", template, context))
    for name, template in FEATURES.items():
        cases.append((f"feature {name}", template, dict(EXTRA, messages=CONVERSATIONS["multi-turn"],
                                                         tools=TOOLS, add_generation_prompt=True)))
    # One object of 100,000 keys (reading it was quadratic: 34 s).
    wide = dict({"role": "user", "content": "hi"}, **{f"k{i}": i for i in range(100000)})
    cases.append(("feature wide-object", "{{ messages[0] | length }} {{ messages[0].content }}",
                  dict(EXTRA, messages=[wide])))
    hostile_first = len(cases)
    for name, template in HOSTILE.items():
        cases.append((f"hostile {name}", template, dict(EXTRA, messages=CONVERSATIONS["user"])))

    expected = [reference(env, t, c) for _, t, c in cases[:hostile_first]]
    with tempfile.TemporaryDirectory(prefix="llmc-templates-") as tmp:
        case_file = os.path.join(tmp, "cases.json")
        with open(case_file, "w", encoding="utf-8") as f:
            json.dump([{"template": t, "context": c, "now": NOW} for _, t, c in cases], f, ensure_ascii=False)
        result = subprocess.run([args.render, case_file], capture_output=True, timeout=300)
    if result.returncode != 0:
        print(f"FAIL: {args.render} exited {result.returncode}: {result.stderr.decode(errors='replace')}")
        return 1
    got = json.loads(result.stdout.decode("utf-8"))
    failed_templates = set()
    for (label, _, _), have in zip(cases[hostile_first:], got[hostile_first:]):
        name = label.split(" ", 1)[1]
        want = {"text": HOSTILE_OK[name]} if name in HOSTILE_OK else None
        good = have == want if want else "error" in have
        if not good:
            failed_templates.add(label)
        print(f"{'ok  ' if good else 'FAIL'} {label}: {json.dumps(have)[:160]}")
    got = got[:hostile_first]
    rendered = refused = 0
    for (label, _, _), want, have in zip(cases, expected, got):
        if "error" in want and "error" in have:
            refused += 1
            if args.verbose:
                print(f"ok   {label}: both refuse ({want['error'][:60]} | {have['error'][:60]})")
            continue
        if want == have:
            rendered += 1
            continue
        failed_templates.add(label.split(" / ")[0])
        print(f"FAIL {label}:\n  jinja2: {json.dumps(want, ensure_ascii=False)[:400]}\n"
              f"  llmc:   {json.dumps(have, ensure_ascii=False)[:400]}")
    templates_ok = len(files) - len({t for t in failed_templates if t.endswith(".jinja")})
    print(f"{len(HOSTILE) - len([t for t in failed_templates if t.startswith('hostile')])} of {len(HOSTILE)} "
          "hostile templates refused or bounded; "
          f"{rendered} cases rendered identically, {refused} refused by both; "
          f"{templates_ok} of {len(files)} real templates ({len(families)} families) identical on every case; "
          f"{len(FEATURES) - len({t for t in failed_templates if t.startswith('feature')})} of {len(FEATURES)} feature cases")
    return 1 if failed_templates else 0


if __name__ == "__main__":
    sys.exit(main())
