#!/usr/bin/env python3
"""Second chat-template reference: Python Jinja2 configured as Hugging Face transformers does
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, its tojson filter,
raise_exception and strftime_now). Used by vs_lenml.sh for the templates @lenml/tokenizers cannot
render (qwen3, gemma3), when the jinja2 module is installed. Same JSON-lines output as
engine/reference/render_chat.mjs. A config's "tandem_template_vars" members are passed as
variables too (as tandem-render-chat does).

usage: render_jinja2.py conversations.json NAME tokenizer_config.json [NAME CONFIG]...
"""
import datetime
import json
import sys

from jinja2 import nodes
from jinja2.exceptions import TemplateError
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class AssistantTracker(Extension):
    """transformers' {% generation %} tag: outside return_assistant_tokens_mask it renders its
    body."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        call = self.call_method("_render_assistant", [], [], lineno=lineno)
        return nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _render_assistant(self, caller):
        return caller()


class Raised(Exception):
    pass


def raise_exception(message):
    raise Raised(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def token(cfg, field):
    v = cfg.get(field)
    if isinstance(v, dict):
        v = v.get("content")
    return v if v is not None else ""


def normalise(messages):
    out = []
    for m in messages:
        if isinstance(m.get("content"), list):
            m = dict(m)
            m["content"] = "\n".join(p["text"] for p in m["content"] if p.get("type") == "text")
        out.append(m)
    return out


def main():
    conv = json.load(open(sys.argv[1], encoding="utf-8"))
    now = datetime.datetime.fromtimestamp(conv["now_epoch"], datetime.timezone.utc)
    args = sys.argv[2:]
    for name, cfg_path in zip(args[0::2], args[1::2]):
        cfg = json.load(open(cfg_path, encoding="utf-8"))
        src = cfg.get("chat_template")
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=[loopcontrols, AssistantTracker])
        env.filters["tojson"] = tojson
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = lambda fmt: now.strftime(fmt)
        for c in conv["cases"]:
            out = {"tokenizer": name, "case": c["name"]}
            try:
                if not isinstance(src, str):
                    raise TemplateError("no chat_template")
                text = env.from_string(src).render(
                    messages=normalise(c["messages"]),
                    add_generation_prompt=c.get("add_generation_prompt", False),
                    bos_token=token(cfg, "bos_token"), eos_token=token(cfg, "eos_token"),
                    date_string=conv["date_string"], tools=c.get("tools"),
                    **cfg.get("tandem_template_vars", {}))
                out.update(ok=True, text=text)
            except Raised as e:
                out.update(ok=False, raised=True, error=str(e))
            except Exception as e:  # the reference's own limits: not compared
                out.update(ok=False, raised=False, error=str(e))
            print(json.dumps(out, ensure_ascii=False))


if __name__ == "__main__":
    main()
