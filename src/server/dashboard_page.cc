#include "server/dashboard_page.h"

namespace tf::server {
namespace {

// summarize() is pure (tests/e2e/dashboard_test.mjs runs it in node); the rest draws.
constexpr std::string_view kPage = R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>tensorfold</title>
<style>
  body { font: 14px system-ui, sans-serif; margin: 1.5em; background: #111; color: #ddd; }
  h1 { font-size: 1.2em; margin: 0 0 1em; } h1 span { color: #888; font-weight: normal; }
  #cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(13em, 1fr)); gap: .8em; }
  .card { background: #1c1c1c; border: 1px solid #333; border-radius: 6px; padding: .7em .9em; }
  .card b { display: block; font-size: 1.5em; color: #fff; margin-top: .2em; }
  .card small { color: #888; }
  .bar { height: 6px; background: #333; border-radius: 3px; margin-top: .4em; }
  .bar div { height: 6px; background: #4a9; border-radius: 3px; }
  canvas { width: 100%; height: 120px; margin-top: 1em; background: #1c1c1c; border: 1px solid #333; }
  #key { display: none; margin-bottom: 1em; } .bad { color: #e66; }
</style>
</head>
<body>
<h1>tensorfold <span id="model"></span> <span id="status"></span></h1>
<form id="key">API key: <input id="keyInput" type="password" size="40"> <button>use</button></form>
<div id="cards"></div>
<canvas id="chart" width="1200" height="120"></canvas>
<script>
"use strict";

// The figures shown, from two /health snapshots `seconds` apart (prev null: no rates yet).
function summarize(prev, cur, seconds) {
  const rate = (get) => (prev && seconds > 0 ? Math.max(0, (get(cur) - get(prev)) / seconds) : null);
  const spec = cur.speculation || {}, mem = cur.device_memory || {}, streams = cur.streams || {};
  const drafted = spec.drafted_tokens_total || 0;
  return {
    status: cur.status,
    model: cur.model,
    decode_tps: rate((h) => h.completion_tokens_total),
    prefill_tps: rate((h) => h.prompt_tokens_total - h.cached_tokens_total),
    requests_per_min: rate((h) => h.requests_total) === null ? null : 60 * rate((h) => h.requests_total),
    running: cur.requests_running,
    waiting: cur.requests_waiting,
    decoding: streams.decoding || 0,
    prefilling: streams.prefilling || 0,
    streams_max: streams.max || 0,
    pool_used: cur.pool_tokens > 0 ? 1 - cur.pool_free_tokens / cur.pool_tokens : 0,
    pool_tokens: cur.pool_tokens,
    context_length: cur.context_length,
    kept_prompts: cur.kept_prompts,
    chats_continued: cur.chats_continued || 0,
    iteration_ms: 1000 * (cur.iteration_s_mean || 0),
    cached_share: cur.prompt_tokens_total > 0 ? cur.cached_tokens_total / cur.prompt_tokens_total : 0,
    draft_acceptance: drafted > 0 ? (spec.accepted_tokens_total || 0) / drafted : null,
    device_gib: (mem.in_use_bytes || 0) / 2 ** 30,
    loops_closed: (cur.loops || {}).reasoning_closed_total || 0,
  };
}

function fmt(x, digits) {
  if (x === null || x === undefined || Number.isNaN(x)) return "–";
  return x.toLocaleString("en-US", { maximumFractionDigits: digits || 0, minimumFractionDigits: digits || 0 });
}

if (typeof document !== "undefined") {
  const history = [];
  let prev = null, prevTime = 0;
  const key = () => sessionStorage.getItem("tensorfold-key") || "";
  document.getElementById("key").addEventListener("submit", (e) => {
    e.preventDefault();
    sessionStorage.setItem("tensorfold-key", document.getElementById("keyInput").value.trim());
    document.getElementById("key").style.display = "none";
  });

  const card = (title, value, note, fraction) =>
    `<div class="card"><small>${title}</small><b>${value}</b><small>${note || ""}</small>` +
    (fraction === undefined ? "" : `<div class="bar"><div style="width:${Math.min(100, 100 * fraction)}%"></div></div>`) +
    "</div>";

  function draw(s) {
    document.getElementById("model").textContent = s.model;
    const st = document.getElementById("status");
    st.textContent = s.status;
    st.className = s.status === "ok" ? "" : "bad";
    document.getElementById("cards").innerHTML = [
      card("decode", fmt(s.decode_tps, 1) + " tok/s", "tokens generated per second"),
      card("prefill", fmt(s.prefill_tps) + " tok/s", "prompt tokens computed per second"),
      card("requests", `${s.running} running`, `${s.waiting} waiting, ${fmt(s.requests_per_min, 1)} / min`),
      card("streams", `${s.decoding + s.prefilling} / ${s.streams_max}`, `${s.decoding} decoding, ${s.prefilling} prefilling`),
      card("cache pool", fmt(100 * s.pool_used, 1) + " %", `${fmt(s.pool_tokens)} tokens, window ${fmt(s.context_length)}`, s.pool_used),
      card("prompt reuse", fmt(100 * s.cached_share, 1) + " %", `of prompt tokens; ${s.kept_prompts} prompts kept, ${s.chats_continued} chats continued`, s.cached_share),
      card("drafts kept", s.draft_acceptance === null ? "–" : fmt(100 * s.draft_acceptance, 1) + " %", "speculative decoding"),
      card("device memory", fmt(s.device_gib, 1) + " GiB", `${s.loops_closed} looping reasonings closed`),
      card("iteration", fmt(s.iteration_ms, 1) + " ms", "mean of the latest 64 model steps"),
    ].join("");
    const c = document.getElementById("chart"), g = c.getContext("2d");
    g.clearRect(0, 0, c.width, c.height);
    const top = Math.max(1, ...history);
    g.strokeStyle = "#4a9";
    g.beginPath();
    history.forEach((v, i) => {
      const x = (i / 119) * c.width, y = c.height - 4 - (v / top) * (c.height - 24);
      if (i === 0) g.moveTo(x, y); else g.lineTo(x, y);
    });
    g.stroke();
    g.fillStyle = "#888";
    g.fillText(`decode tok/s, last 2 minutes (top ${fmt(top, 1)})`, 8, 14);
  }

  async function poll() {
    try {
      const headers = key() ? { Authorization: "Bearer " + key() } : {};
      const res = await fetch("health", { headers, cache: "no-store" });
      if (res.status === 401) {
        document.getElementById("key").style.display = "block";
        return;
      }
      const cur = await res.json(), now = performance.now();
      const s = summarize(prev, cur, (now - prevTime) / 1000);
      prev = cur;
      prevTime = now;
      if (s.decode_tps !== null) history.push(s.decode_tps);
      if (history.length > 120) history.shift();
      draw(s);
    } catch (e) {
      const st = document.getElementById("status");
      st.textContent = "unreachable";
      st.className = "bad";
    } finally {
      setTimeout(poll, 1000);
    }
  }
  poll();
}
</script>
</body>
</html>
)HTML";

}  // namespace

std::string_view dashboard_html() { return kPage; }

}  // namespace tf::server
