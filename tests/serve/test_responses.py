"""doppler serve's /v1/responses (OpenAI's Responses API) through the real openai client: a response holds what the
equivalent /v1/chat/completions request answers (greedy and seeded: the same text, the same prompt and usage),
instructions and input items reach the chat template as the equivalent messages, max_output_tokens makes the
response incomplete; streamed events come in the documented order with increasing sequence numbers and their
deltas join to the whole answer (client.responses.stream too); a function tool round trip (function_call items
out, function_call + function_call_output items back in) renders the prompt chat's tool round trip renders;
text.format json_schema answers JSON the schema accepts; a thinking model's reasoning is a reasoning item; what
the endpoint cannot do is a 400 naming the field."""
import json
import os
import shutil
import subprocess
import tempfile
import time

import jsonschema
import openai

import serverlib
from serverlib import FIXTURES, SLOW, Server, check, done, need_model, post

Q = "Name three colours of the sky."


def client(srv):
    return openai.OpenAI(base_url=srv.base + "/v1", api_key="unused", max_retries=0, timeout=300 * SLOW)


def port_of(c):
    return c.base_url.port


def chat(c, msgs, **kw):
    return c.chat.completions.create(model="x", messages=msgs, **kw)


def same_usage(r, ch, what):
    u, cu = r.usage, ch.usage
    check(u.input_tokens == cu.prompt_tokens and u.output_tokens == cu.completion_tokens and
          u.total_tokens == cu.total_tokens and u.input_tokens_details.cached_tokens is not None and
          u.output_tokens_details.reasoning_tokens == 0, f"{what}: usage {u} vs chat's {cu}")


def t_text(c):
    """Greedy and seeded answers equal chat's for the same messages; instructions are the system message; items
    (developer, assistant output_text, text parts) are the messages they stand for."""
    r = c.responses.create(model="x", input=Q, instructions="Be brief.", max_output_tokens=24, temperature=0)
    ch = chat(c, [{"role": "system", "content": "Be brief."}, {"role": "user", "content": Q}], max_tokens=24,
              temperature=0)
    want = ch.choices[0].message.content
    check(r.object == "response" and r.id.startswith("resp_") and r.output_text == want,
          f"greedy: {r.output_text!r} vs chat's {want!r}")
    msg = r.output[-1]
    check(msg.type == "message" and msg.role == "assistant" and msg.id.startswith("msg_") and
          msg.content[0].type == "output_text" and msg.content[0].annotations == [], f"message item {msg}")
    same_usage(r, ch, "greedy")
    check(r.instructions == "Be brief." and r.max_output_tokens == 24 and r.temperature == 0,
          f"echoed parameters: {r.instructions!r} {r.max_output_tokens} {r.temperature}")
    fin = ch.choices[0].finish_reason
    check((r.status, bool(r.incomplete_details)) == (("incomplete", True) if fin == "length" else ("completed", False)),
          f"status {r.status} {r.incomplete_details} for chat's finish {fin}")

    items = [{"type": "message", "role": "developer", "content": "Answer in French."},
             {"role": "user", "content": [{"type": "input_text", "text": "Hello"}, {"type": "input_text", "text": "!"}]},
             {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Bonjour."}]},
             {"role": "user", "content": Q}]
    msgs = [{"role": "system", "content": "Answer in French."}, {"role": "user", "content": "Hello!"},
            {"role": "assistant", "content": "Bonjour."}, {"role": "user", "content": Q}]
    r = c.responses.create(model="x", input=items, max_output_tokens=16, temperature=0)
    ch = chat(c, msgs, max_tokens=16, temperature=0)
    check(r.output_text == ch.choices[0].message.content, f"items: {r.output_text!r} vs {ch.choices[0].message.content!r}")
    same_usage(r, ch, "items")

    # seeded sampling: the chat endpoint's seed, as an extension
    r = c.responses.create(model="x", input=Q, max_output_tokens=20, temperature=0.9, top_p=0.95,
                           extra_body={"seed": 11})
    ch = chat(c, [{"role": "user", "content": Q}], max_tokens=20, temperature=0.9, top_p=0.95, seed=11)
    check(r.output_text == ch.choices[0].message.content, f"seeded: {r.output_text!r} vs {ch.choices[0].message.content!r}")

    # max_output_tokens: incomplete, the reason given
    r = c.responses.create(model="x", input=Q, max_output_tokens=3, temperature=0)
    check(r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens" and
          r.usage.output_tokens == 3 and r.output[-1].status == "incomplete", f"max_output_tokens 3: {r}")


EVENT_ORDER = ["response.created", "response.in_progress", "response.output_item.added",
               "response.content_part.added", "response.output_text.delta", "response.output_text.done",
               "response.content_part.done", "response.output_item.done"]


def events_of(stream):
    evs = list(stream)
    seq = [e.sequence_number for e in evs]
    check(seq == list(range(len(evs))), f"sequence numbers {seq}")
    return evs


def t_stream(c):
    """Streamed events: documented order, deltas joining to the whole answer, the final response object; the
    SDK's responses.stream() helper builds the same response."""
    for n in (3, 40):
        whole = c.responses.create(model="x", input=Q, max_output_tokens=n, temperature=0)
        evs = events_of(c.responses.create(model="x", input=Q, max_output_tokens=n, temperature=0, stream=True))
        types = [e.type for e in evs]
        squeezed = [t for i, t in enumerate(types) if i == 0 or t != types[i - 1]]
        end = "response.incomplete" if whole.status == "incomplete" else "response.completed"
        check(squeezed == EVENT_ORDER + [end], f"event order {squeezed}")
        text = "".join(e.delta for e in evs if e.type == "response.output_text.delta")
        check(text == whole.output_text, f"deltas {text!r} vs whole {whole.output_text!r}")
        final = evs[-1].response
        check(final.output_text == whole.output_text and final.status == whole.status and
              final.usage.output_tokens == whole.usage.output_tokens and
              final.usage.input_tokens == whole.usage.input_tokens, f"final response {final} vs {whole}")
        check(evs[0].response.status == "in_progress" and evs[0].response.id == final.id,
              f"created: {evs[0].response}")
        done_ev = [e for e in evs if e.type == "response.output_text.done"][0]
        check(done_ev.text == text, f"output_text.done {done_ev.text!r}")
    # raw SSE: event lines name their data's type; no [DONE]
    import http.client
    h = http.client.HTTPConnection("127.0.0.1", port_of(c), timeout=120 * SLOW)
    h.request("POST", "/v1/responses", body=json.dumps({"input": Q, "max_output_tokens": 4, "stream": True}),
              headers={"Content-Type": "application/json"})
    body = h.getresponse().read().decode()
    h.close()
    blocks = [b for b in body.split("\n\n") if b.strip()]
    ok = all(b.startswith("event: ") and json.loads(b.split("\ndata: ", 1)[1])["type"] == b[7:b.index("\n")]
             for b in blocks)
    check(ok and "[DONE]" not in body, f"raw SSE: {body[:400]!r}")


def json_format(c):
    """text.format json_schema (flat) and json_object: constrained JSON, the same as chat's response_format."""
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10},
                                               "age": {"enum": [7, 30, 64]}},
              "required": ["name", "age"], "additionalProperties": False}
    r = c.responses.create(model="x", input="A person as JSON.", max_output_tokens=120, temperature=0,
                           text={"format": {"type": "json_schema", "name": "person", "schema": schema, "strict": True}})
    ch = chat(c, [{"role": "user", "content": "A person as JSON."}], max_tokens=120, temperature=0,
              response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": schema,
                                                                      "strict": True}})
    try:
        ok = jsonschema.Draft202012Validator(schema).is_valid(json.loads(r.output_text))
    except ValueError:
        ok = False
    check(ok and r.status == "completed", f"json_schema: {r.output_text!r} {r.status}")
    check(r.output_text == ch.choices[0].message.content, f"json_schema vs chat: {r.output_text!r}")
    check(r.text.format.type == "json_schema", f"echoed text.format {r.text}")
    # the SDK's stream helper wants response.completed: the constrained answer ends by itself
    fmt = {"format": {"type": "json_schema", "name": "person", "schema": schema}}
    with c.responses.stream(model="x", input="A person as JSON.", max_output_tokens=120, temperature=0,
                            text=fmt) as s:
        deltas = "".join(e.delta for e in s if e.type == "response.output_text.delta")
        final = s.get_final_response()
    check(final.output_text == deltas == r.output_text and final.status == "completed",
          f"responses.stream: {final.output_text!r} vs {r.output_text!r}")
    r = c.responses.create(model="x", input="Some JSON.", max_output_tokens=60, temperature=0,
                           text={"format": {"type": "json_object"}})
    check(r.output_text.lstrip().startswith("{"), f"json_object: {r.output_text!r}")


def bad(port, body, param, want=None):
    status, j = post(port, "/v1/responses", body)
    err = j.get("error", {}) if isinstance(j, dict) else {}
    check(status == 400 and err.get("param") == param and (want is None or want in err.get("message", "")),
          f"{body} -> {status} {j}, want 400 naming {param}")


def t_errors(c):
    p = port_of(c)
    bad(p, {"model": "x"}, "input", "required")
    bad(p, {"input": 5}, "input")
    bad(p, {"input": []}, "input")
    bad(p, {"input": [{"type": "item_reference", "id": "x"}]}, "input")
    bad(p, {"input": [{"role": "wizard", "content": "x"}]}, "input")
    bad(p, {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input")
    bad(p, {"input": [{"type": "function_call", "name": "f"}]}, "input")
    bad(p, {"input": [{"type": "function_call_output", "output": "x"}]}, "input")
    bad(p, {"input": "x", "instructions": 3}, "instructions")
    bad(p, {"input": "x", "previous_response_id": "resp_1"}, "previous_response_id")
    bad(p, {"input": "x", "conversation": "c"}, "conversation")
    bad(p, {"input": "x", "background": True}, "background")
    bad(p, {"input": "x", "truncation": "auto"}, "truncation")
    bad(p, {"input": "x", "include": ["message.output_text.logprobs"]}, "include")
    bad(p, {"input": "x", "include": "x"}, "include")
    bad(p, {"input": "x", "tools": [{"type": "web_search"}]}, "tools", "web_search")
    bad(p, {"input": "x", "tools": [{"type": "function", "function": {"name": "f"}}]}, "tools")
    bad(p, {"input": "x", "tools": {}}, "tools")
    bad(p, {"input": "x", "tool_choice": {"type": "web_search"}}, "tool_choice")
    bad(p, {"input": "x", "tool_choice": "required"}, "tool_choice")
    bad(p, {"input": "x", "max_output_tokens": 0}, "max_output_tokens")
    bad(p, {"input": "x", "max_output_tokens": "8"}, "max_output_tokens")
    bad(p, {"input": "x", "max_output_tokens": 5000}, "max_output_tokens")  # beyond the context
    bad(p, {"input": "x", "temperature": "hot"}, "temperature")
    bad(p, {"input": "x", "top_p": 2}, "top_p")
    bad(p, {"input": "x", "stream": "yes"}, "stream")
    bad(p, {"input": "x", "text": {"format": {"type": "xml"}}}, "text")
    bad(p, {"input": "x", "text": {"format": {"type": "json_schema", "schema": {"type": "bogus"}}}}, "text")
    bad(p, {"input": "x", "text": 1}, "text")
    bad(p, {"input": "x", "reasoning": "high"}, "reasoning")
    bad(p, {"input": "x", "metadata": []}, "metadata")
    bad(p, {"input": "x", "top_logprobs": 2}, "top_logprobs")
    bad(p, {"input": "x", "model": 3}, "model")
    # accepted and without effect: store, metadata, user, reasoning, include of what has no answer here, unknown
    status, j = post(p, "/v1/responses", {"input": "x", "max_output_tokens": 2, "store": True, "metadata": {"a": "b"},
                                          "user": "u", "reasoning": {"effort": "low"}, "truncation": "disabled",
                                          "include": ["reasoning.encrypted_content"], "unknown_field": 1})
    check(status == 200 and j["status"] == "incomplete" and j["metadata"] == {"a": "b"} and j["store"] is False,
          f"accepted fields: {status} {j}")
    try:
        c.responses.create(model="x", input="x", previous_response_id="resp_x")
        check(False, "previous_response_id accepted")
    except openai.BadRequestError as e:
        check("previous_response_id" in str(e), f"previous_response_id: {e}")


TOOLS_CHAT = serverlib.TOOLS
TOOLS = [dict(type="function", **t["function"]) for t in TOOLS_CHAT]  # the Responses API's flat form


def t_tools():
    """Function tools on a synthetic Qwen3 with Qwen3's template: tool_choice required / a named function makes a
    function_call item (the call chat's request makes, seeded); streamed, its arguments' deltas join to it; sent
    back as function_call + function_call_output items, the prompt has chat's tool round trip's tokens."""
    tiny = os.path.join(tempfile.mkdtemp(), "qwen3-synth.gguf")
    subprocess.run([serverlib.BIN, "synth", "--arch", "qwen3", "--preset", "tiny", "--type", "q8_0", "--seed", "3",
                    "-o", tiny], check=True, capture_output=True, timeout=120)
    tmpl = os.path.join(FIXTURES, "..", "jinja", "templates", "Qwen-Qwen3.jinja")
    q = "Weather in Paris?"
    kw = dict(temperature=1.0, extra_body={"seed": 4, "chat_template_kwargs": {"enable_thinking": False}})
    with Server("--ctx", "4096", "--parallel", "2", "--chat-template", tmpl, model=tiny) as srv:
        c = client(srv)
        for choice, chat_choice in (("required", "required"),
                                    ({"type": "function", "name": "get_weather"},
                                     {"type": "function", "function": {"name": "get_weather"}})):
            r = c.responses.create(model="x", input=q, tools=TOOLS, tool_choice=choice, max_output_tokens=200,
                                   parallel_tool_calls=False, **kw)
            ch = chat(c, [{"role": "user", "content": q}], tools=TOOLS_CHAT, tool_choice=chat_choice, max_tokens=200,
                      parallel_tool_calls=False, **kw)
            calls = [o for o in r.output if o.type == "function_call"]
            want = ch.choices[0].message.tool_calls or []
            check(len(calls) == 1 and len(want) == 1 and calls[0].name == want[0].function.name and
                  calls[0].arguments == want[0].function.arguments and calls[0].call_id.startswith("call_") and
                  calls[0].id.startswith("fc_") and r.status == "completed", f"{choice}: {r.output} vs {want}")
            same_usage(r, ch, f"tools {choice}")
            if isinstance(choice, dict):
                check(calls and calls[0].name == "get_weather", f"named function: {calls}")
            # streamed: the call item's events, arguments' deltas joining to the call
            evs = events_of(c.responses.create(model="x", input=q, tools=TOOLS, tool_choice=choice,
                                               max_output_tokens=200, parallel_tool_calls=False, stream=True, **kw))
            args = "".join(e.delta for e in evs if e.type == "response.function_call_arguments.delta")
            added = [e.item for e in evs if e.type == "response.output_item.added" and e.item.type == "function_call"]
            fin = [e.item for e in evs if e.type == "response.output_item.done" and e.item.type == "function_call"]
            check(added and added[0].name == calls[0].name and added[0].call_id == fin[0].call_id and
                  added[0].id == fin[0].id and added[0].arguments == "", f"call item added: {added}")
            check(calls and args == calls[0].arguments and len(added) == 1 and fin and
                  fin[0].arguments == args and fin[0].name == calls[0].name and
                  evs[-1].type == "response.completed", f"streamed call {[e.type for e in evs]} {args!r}")
        # the round trip: the call and its output back as items, against chat's equivalent messages
        call = calls[0]
        items = [{"role": "user", "content": q},
                 {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
                 {"type": "function_call_output", "call_id": call.call_id, "output": "{\"temp\": 21}"}]
        msgs = [{"role": "user", "content": q},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": call.call_id, "type": "function",
                     "function": {"name": call.name, "arguments": call.arguments}}]},
                {"role": "tool", "tool_call_id": call.call_id, "content": "{\"temp\": 21}"}]
        r = c.responses.create(model="x", input=items, tools=TOOLS, max_output_tokens=8, temperature=0)
        ch = chat(c, msgs, tools=TOOLS_CHAT, max_tokens=8, temperature=0)
        check(r.usage.input_tokens == ch.usage.prompt_tokens and r.usage.input_tokens > 100,
              f"round trip prompt: {r.usage.input_tokens} tokens, chat's {ch.usage.prompt_tokens}")
        check(r.output_text == (ch.choices[0].message.content or ""), f"round trip answer: {r.output_text!r}")
        # an assistant message's text and its calls are one chat message
        items.insert(1, {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hm."}]})
        msgs[1]["content"] = "Hm."
        r = c.responses.create(model="x", input=items, tools=TOOLS, max_output_tokens=4, temperature=0)
        ch = chat(c, msgs, tools=TOOLS_CHAT, max_tokens=4, temperature=0)
        check(r.usage.input_tokens == ch.usage.prompt_tokens, f"text + call: {r.usage.input_tokens} vs "
              f"{ch.usage.prompt_tokens}")
        check(r.tools[0].name == "get_weather", f"echoed tools {r.tools}")
        bad(port_of(c), {"input": q, "tools": TOOLS, "tool_choice": {"type": "function", "name": "nowhere"}},
            "tool_choice", "not among the tools")
        srv.stop()
    shutil.rmtree(os.path.dirname(tiny))


def t_reasoning():
    """A thinking model's split <think> block is a reasoning item before the message, as chat's reasoning_content;
    streamed as reasoning_text events."""
    tiny = os.path.join(FIXTURES, "qwen3-tiny.gguf")
    tmpl = os.path.join(FIXTURES, "..", "jinja", "templates", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja")
    q = "What is 2+2?"
    with Server("--ctx", "256", "--parallel", "2", "--chat-template", tmpl, model=tiny) as srv:
        c = client(srv)
        ch = chat(c, [{"role": "user", "content": q}], max_tokens=24, temperature=0).choices[0].message
        want_r = (ch.model_extra or {}).get("reasoning_content", "")
        r = c.responses.create(model="x", input=q, max_output_tokens=24, temperature=0)
        rs = [o for o in r.output if o.type == "reasoning"]
        check(want_r and len(rs) == 1 and r.output[0].type == "reasoning" and rs[0].content[0].text == want_r and
              rs[0].id.startswith("rs_") and r.output_text == (ch.content or ""),
              f"reasoning item {r.output} vs chat's {want_r!r} / {ch.content!r}")
        check(r.usage.output_tokens_details.reasoning_tokens > 0, f"reasoning_tokens {r.usage}")
        evs = events_of(c.responses.create(model="x", input=q, max_output_tokens=24, temperature=0, stream=True))
        got_r = "".join(e.delta for e in evs if e.type == "response.reasoning_text.delta")
        got_c = "".join(e.delta for e in evs if e.type == "response.output_text.delta")
        final = evs[-1].response
        check(got_r == want_r and got_c == r.output_text and [o.type for o in final.output] ==
              [o.type for o in r.output], f"streamed reasoning {got_r!r} {got_c!r} {final.output}")
        srv.stop()


def main():
    need_model()
    with Server("--parallel", "4", "--ctx", "1024") as srv:
        c = client(srv)
        for t in (t_text, t_stream, json_format, t_errors):
            t0 = time.time()
            t(c)
            print(f"  {t.__name__}: {time.time() - t0:.1f} s", flush=True)
        srv.stop()
    t_tools()
    t_reasoning()
    done("serve responses")


if __name__ == "__main__":
    main()
