#include "server/chat_page.h"

namespace tf::server {
namespace {

// parseSse(), applyChunk() and requestBody() are pure (tests/e2e/serve_chat_page_test.mjs runs
// them in node against a real stream); main() wires the page and runs only with a document.
constexpr std::string_view kPage = R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>tensorfold chat</title>
<style>
  body { font: 15px system-ui, sans-serif; margin: 0; background: #111; color: #ddd; display: flex;
         flex-direction: column; height: 100vh; }
  header { padding: .6em 1em; border-bottom: 1px solid #333; display: flex; gap: 1em; align-items: center;
           flex-wrap: wrap; }
  header b { color: #fff; } header a { color: #8ab; } header label { color: #999; font-size: .9em; }
  input, select, textarea, button { background: #1c1c1c; color: #ddd; border: 1px solid #444;
                                    border-radius: 4px; font: inherit; }
  #log { flex: 1; overflow-y: auto; padding: 1em; }
  .msg { max-width: 52em; margin: 0 auto 1em; white-space: pre-wrap; word-wrap: break-word; }
  .user { color: #9cf; } .user::before { content: "you: "; color: #678; }
  details { color: #888; font-size: .92em; margin-bottom: .4em; } summary { cursor: pointer; }
  .meta { color: #666; font-size: .8em; margin-top: .3em; } .bad { color: #e66; }
  form#send { display: flex; gap: .5em; padding: .8em 1em; border-top: 1px solid #333; }
  #text { flex: 1; min-height: 3em; resize: vertical; padding: .4em; }
  #key { display: none; padding: .5em 1em; }
</style>
</head>
<body>
<header>
  <b>tensorfold</b> <span id="model"></span>
  <label>reasoning <select id="effort"><option>max</option><option>high</option><option>low</option>
    <option>none</option></select></label>
  <label>temperature <input id="temperature" type="number" min="0" max="2" step="0.1" value="1" size="4"></label>
  <label>max tokens <input id="maxTokens" type="number" min="1" value="4096" size="7"></label>
  <button id="clear" type="button">new chat</button> <a href="/dashboard">dashboard</a>
</header>
<form id="key">API key: <input id="keyInput" type="password" size="40"> <button>use</button></form>
<div id="log"></div>
<form id="send"><textarea id="text" placeholder="Message (Enter sends, Shift+Enter breaks the line)"></textarea>
  <button id="go">send</button><button id="stop" type="button" disabled>stop</button></form>
<script>
"use strict";

// Splits SSE text into the JSON payloads of its complete `data:` events; `rest` is the
// unfinished tail to prepend to the next piece. done: the [DONE] event was seen.
function parseSse(text) {
  const events = [];
  let done = false;
  const blocks = text.replace(/\r\n/g, "\n").split("\n\n");
  const rest = blocks.pop();
  for (const block of blocks) {
    const data = block.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart()).join("\n");
    if (!data) continue;  // a comment (keep-alive) or an event without data
    if (data === "[DONE]") { done = true; continue; }
    try { events.push(JSON.parse(data)); } catch (e) { events.push({ error: { message: "bad event: " + data } }); }
  }
  return { events, rest, done };
}

// Folds one chat.completion.chunk into the reply so far ({reasoning, content, toolCalls,
// finish, usage, error}).
function applyChunk(reply, chunk) {
  if (chunk.error) { reply.error = chunk.error.message || String(chunk.error); return reply; }
  if (chunk.usage) reply.usage = chunk.usage;
  for (const choice of chunk.choices || []) {
    if (choice.index !== 0) continue;
    const d = choice.delta || {};
    if (d.reasoning_content) reply.reasoning += d.reasoning_content;
    if (d.content) reply.content += d.content;
    for (const t of d.tool_calls || []) {
      const call = reply.toolCalls[t.index] || (reply.toolCalls[t.index] = { name: "", arguments: "" });
      if (t.function && t.function.name) call.name += t.function.name;
      if (t.function && t.function.arguments) call.arguments += t.function.arguments;
    }
    if (choice.finish_reason) reply.finish = choice.finish_reason;
  }
  return reply;
}

function emptyReply() { return { reasoning: "", content: "", toolCalls: [], finish: null, usage: null, error: null }; }

// The request for the conversation so far (earlier replies with their reasoning, as the
// template renders them).
function requestBody(model, history, settings) {
  const messages = history.map((m) => (m.role === "assistant"
    ? { role: "assistant", content: m.content, reasoning_content: m.reasoning || undefined }
    : { role: m.role, content: m.content }));
  return {
    model, messages, stream: true, stream_options: { include_usage: true },
    reasoning_effort: settings.effort, temperature: settings.temperature, max_tokens: settings.maxTokens,
  };
}

function main() {
  const $ = (id) => document.getElementById(id);
  let key = sessionStorage.getItem("tensorfold-key") || "";
  let model = "";
  const history = [];
  let abort = null;
  const headers = () => Object.assign({ "Content-Type": "application/json" },
                                      key ? { Authorization: "Bearer " + key } : {});
  const add = (cls) => { const d = document.createElement("div"); d.className = "msg " + cls; $("log").appendChild(d); return d; };
  const askKey = () => { $("key").style.display = "block"; $("keyInput").focus(); };
  async function loadModel() {
    const r = await fetch("/v1/models", { headers: headers() });
    if (r.status === 401) { askKey(); return; }
    const j = await r.json();
    model = j.data[0].id;
    $("model").textContent = model;
  }
  $("key").onsubmit = (e) => {
    e.preventDefault();
    key = $("keyInput").value.trim();
    sessionStorage.setItem("tensorfold-key", key);
    $("key").style.display = "none";
    loadModel();
  };
  $("clear").onclick = () => { history.length = 0; $("log").textContent = ""; };
  $("stop").onclick = () => { if (abort) abort.abort(); };
  $("text").onkeydown = (e) => { if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("send").requestSubmit(); } };
  $("send").onsubmit = async (e) => {
    e.preventDefault();
    const text = $("text").value;
    if (!text.trim() || abort) return;
    $("text").value = "";
    history.push({ role: "user", content: text });
    add("user").textContent = text;
    const box = add("assistant");
    const think = document.createElement("details");
    const summary = document.createElement("summary");
    summary.textContent = "reasoning";
    const thought = document.createElement("div");
    think.append(summary, thought);
    const answer = document.createElement("div");
    const meta = document.createElement("div");
    meta.className = "meta";
    box.append(think, answer, meta);
    think.style.display = "none";
    const reply = emptyReply();
    const settings = { effort: $("effort").value, temperature: Number($("temperature").value),
                       maxTokens: Number($("maxTokens").value) };
    abort = new AbortController();
    $("go").disabled = true; $("stop").disabled = false;
    const t0 = performance.now();
    try {
      const r = await fetch("/v1/chat/completions", { method: "POST", headers: headers(), signal: abort.signal,
                                                      body: JSON.stringify(requestBody(model, history, settings)) });
      if (r.status === 401) askKey();
      if (!r.ok) {
        const j = await r.json().catch(() => ({}));
        throw new Error((j.error && j.error.message) || "HTTP " + r.status);
      }
      const reader = r.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        const parsed = parseSse(buffer + decoder.decode(value, { stream: true }));
        buffer = parsed.rest;
        for (const ev of parsed.events) applyChunk(reply, ev);
        if (reply.reasoning) { think.style.display = ""; thought.textContent = reply.reasoning; }
        answer.textContent = reply.content +
          reply.toolCalls.map((c) => "\n[tool call] " + c.name + " " + c.arguments).join("");
        $("log").scrollTop = $("log").scrollHeight;
      }
      if (reply.error) throw new Error(reply.error);
    } catch (err) {
      if (err.name !== "AbortError") { const b = document.createElement("div"); b.className = "bad"; b.textContent = String(err.message || err); box.appendChild(b); }
    }
    const secs = (performance.now() - t0) / 1000;
    const n = reply.usage ? reply.usage.completion_tokens : 0;
    meta.textContent = (reply.finish || "stopped") + (n ? " · " + n + " tokens · " + (n / secs).toFixed(1) + " tok/s" : "");
    // A reply that wrote nothing leaves the conversation as it was (its message too).
    if (reply.content || reply.reasoning) history.push({ role: "assistant", content: reply.content, reasoning: reply.reasoning });
    else history.pop();
    abort = null;
    $("go").disabled = false; $("stop").disabled = true;
  };
  loadModel();
}

if (typeof document !== "undefined") main();
</script>
</body>
</html>
)HTML";

}  // namespace

std::string_view chat_page_html() { return kPage; }

}  // namespace tf::server
