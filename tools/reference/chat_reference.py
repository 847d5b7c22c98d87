#!/usr/bin/env python3
"""Golden chat prompts (tests/fixtures/chat/golden.json) from transformers'
apply_chat_template, for the templates doppler implements in src/chat.c.

    python tools/reference/chat_reference.py [--models DIR] [--shared DIR]

venv: as tools/reference/tokenizer_reference.py (transformers, jinja2, gguf).
Templates rendered:
  gemma        tests/fixtures/jinja/templates/google-gemma-3-it.jinja: the
               chat_template of Google's Gemma 3 instruction-tuned
               tokenizer_config.json (the Gemma 3 270M GGUF has none),
               bos_token "<bos>"
  smollm2      tokenizer.chat_template of SmolLM2-135M-Instruct.Q4_1.gguf (chatml
               with a default system prompt)
  qwen         tokenizer.chat_template of the shared qwen2-tokenizer-tiny.gguf
               (Qwen3's chatml, no default system prompt); also with the
               template variable enable_thinking (false / true), as
               apply_chat_template(..., enable_thinking=False) passes it;
               and with tools and tool calls (OpenAI's message form)
  llama31      tests/fixtures/jinja/templates/meta-llama-Llama-3.1-8B-Instruct.jinja
               as Jinja source on llama3-tokenizer-tiny.gguf: the tool conversations
  llama3       tokenizer.chat_template of the shared llama3-tokenizer-tiny.gguf,
               bos_token "<|begin_of_text|>"
"""
import argparse
import json
import os

from jinja_reference import TOOLS

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "..", "tests", "fixtures", "chat", "golden.json")
GEMMA3 = os.path.join(HERE, "..", "..", "tests", "fixtures", "jinja", "templates", "google-gemma-3-it.jinja")
LLAMA31 = os.path.join(HERE, "..", "..", "tests", "fixtures", "jinja", "templates", "meta-llama-Llama-3.1-8B-Instruct.jinja")

CONVS = [
    ([{"role": "user", "content": "Hello!"}], True),
    ([{"role": "user", "content": "Hello!"}], False),
    ([{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"}], True),
    ([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
      {"role": "user", "content": "Tell me a joke."}], True),
    ([{"role": "user", "content": "  padded both sides \n"}, {"role": "assistant", "content": "\tan answer\n\n"},
      {"role": "user", "content": "\u3000next\u00a0"}], True),
    ([{"role": "user", "content": "日本語で答えて 😀\nline two\n\nline four"}], True),
    ([{"role": "system", "content": "Rules:\n1. be kind\n2. be brief"}, {"role": "user", "content": "a"},
      {"role": "assistant", "content": "b"}, {"role": "user", "content": "c <b>bold</b>"}], True),
    ([{"role": "user", "content": "first"}, {"role": "assistant", "content": "second"}], False),
    ([{"role": "user", "content": "q1"}, {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nA1"},
      {"role": "user", "content": "q2"}], True),
    ([{"role": "user", "content": "q1"}, {"role": "assistant", "content": "<think>\nlet me see\n\n</think>\n\n\nA1\n"}],
     False),
]


def gguf_template(path):
    import gguf
    r = gguf.GGUFReader(path)
    return r.fields["tokenizer.chat_template"].contents()


# template variables (apply_chat_template's keyword arguments) of the templates that read them
KWARGS = {"qwen": [{"enable_thinking": False}, {"enable_thinking": True}]}

# jinja_reference's tools, and conversations that call one (arguments as a dict, as transformers documents them;
# doppler's test also passes them as the JSON string OpenAI clients send)
TOOL_CALL = {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}}
TOOL_CONVS = [
    ([{"role": "user", "content": "Weather in Paris?"}], True),
    ([{"role": "system", "content": "Use tools."}, {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]},
      {"role": "tool", "content": "18C, sunny", "tool_call_id": "call_1"}], True),
    ([{"role": "user", "content": "Weather in Paris and Rome?"},
      {"role": "assistant", "content": "Checking both.", "tool_calls": [TOOL_CALL, dict(TOOL_CALL, id="call_2", function={
          "name": "get_weather", "arguments": {"city": "Rome"}})]},
      {"role": "tool", "content": "18C", "tool_call_id": "call_1"},
      {"role": "tool", "content": "25C", "tool_call_id": "call_2"}], True),
    # the reasoning of a call made after the last user turn, given back as reasoning_content (Qwen3 renders it)
    ([{"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": "", "reasoning_content": "The user wants Paris.", "tool_calls": [TOOL_CALL]},
      {"role": "tool", "content": "18C", "tool_call_id": "call_1"}], True),
]


def render(template, messages, gen, bos, kwargs=None, tools=None):
    from transformers.utils.chat_template_utils import render_jinja_template
    out, _ = render_jinja_template(conversations=[messages], chat_template=template, add_generation_prompt=gen,
                                   bos_token=bos, eos_token="", tools=tools, documents=None, **(kwargs or {}))
    return out[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=os.path.expanduser("~/.cache/doppler/models"))
    ap.add_argument("--shared", default=os.environ.get("DOPPLER_SHARED_FIXTURES") or
                    os.path.join(HERE, "..", "..", "..", "shared", "fixtures"))
    a = ap.parse_args()
    templates = [
        ("gemma", "gemma-3-270m-q4_k_m.gguf", open(GEMMA3, encoding="utf-8").read(), "<bos>"),
        ("smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
         gguf_template(os.path.join(a.models, "SmolLM2-135M-Instruct.Q4_1.gguf")), "<|im_start|>"),
        ("qwen", "qwen2-tokenizer-tiny.gguf", gguf_template(os.path.join(a.shared, "qwen2-tokenizer-tiny.gguf")), ""),
        ("llama3", "llama3-tokenizer-tiny.gguf",
         gguf_template(os.path.join(a.shared, "llama3-tokenizer-tiny.gguf")), "<|begin_of_text|>"),
        # Llama 3.1's template (tools in its JSON format), given as source: the tool conversations only
        ("llama31", "llama3-tokenizer-tiny.gguf", open(LLAMA31, encoding="utf-8").read(), "<|begin_of_text|>"),
    ]
    cases = []
    for name, model, tmpl, bos in templates:
        runs = [(msgs, gen, None, None) for msgs, gen in CONVS] if name != "llama31" else []
        runs += [(msgs, gen, kw, None) for kw in KWARGS.get(name, []) for msgs, gen in CONVS]
        if name in ("qwen", "llama31"):
            runs += [(msgs, gen, None, TOOLS) for msgs, gen in TOOL_CONVS]
            runs += [(msgs, gen, None, None) for msgs, gen in TOOL_CONVS[1:]]
        for msgs, gen, kw, tools in runs:
            if name == "llama3" and not gen:
                continue  # this template always appends the assistant header
            try:
                text = render(tmpl, msgs, gen, bos, kw, tools)
            except Exception as e:  # e.g. gemma's role-alternation error
                text = None
                err = str(e)
            case = {"template": name, "model": model, "messages": msgs, "add_generation_prompt": gen,
                    "rendered": text}
            if kw is not None:
                case["kwargs"] = kw
            if tools is not None:
                case["tools"] = tools
            if text is None:
                case["error"] = err
            cases.append(case)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump({"description": "generated by tools/reference/chat_reference.py", "cases": cases}, f,
                  ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(cases)} cases")


if __name__ == "__main__":
    main()
