// BLOOM Runtime dashboard: what htmx does not do by itself. No inline scripts (the page's
// Content-Security-Policy forbids them): everything is wired here, from data attributes.
"use strict";

(function () {
  const flash = () => document.getElementById("flash");

  function notify(text, kind) {
    const box = flash();
    if (!box) return;
    const note = document.createElement("div");
    note.className = "notice " + (kind || "ok");
    note.setAttribute("role", kind === "error" ? "alert" : "status");
    note.textContent = text;
    box.appendChild(note);
    setTimeout(() => note.remove(), kind === "error" ? 12000 : 5000);
  }

  // A refusal is shown as the API words it: {"error": "..."} or a validation error's messages.
  function refusal(xhr) {
    const text = xhr.responseText || "";
    try {
      const body = JSON.parse(text);
      const error = body && body.error;
      if (typeof error === "string") return error;
      if (error && typeof error === "object") {
        const parts = [].concat(error.formErrors || []);
        for (const [field, messages] of Object.entries(error.fieldErrors || {})) {
          parts.push(field + ": " + [].concat(messages).join(", "));
        }
        if (parts.length) return parts.join("; ");
      }
    } catch (e) { /* not JSON: the text itself */ }
    return text.replace(/<[^>]*>/g, " ").trim() || ("HTTP " + xhr.status);
  }

  document.addEventListener("htmx:responseError", (event) => {
    const xhr = event.detail.xhr;
    notify(xhr.status + ": " + refusal(xhr), "error");
  });
  document.addEventListener("htmx:sendError", () => {
    notify("The runtime did not answer: it may be down or restarting. Retrying on the next refresh.", "error");
  });

  // Relative times ("3 min ago"), kept fresh; the absolute time stays in the title.
  const UNITS = [[86400000, "d"], [3600000, "h"], [60000, "min"], [1000, "s"]];
  function relative(ms) {
    const delta = Date.now() - ms;
    const span = Math.abs(delta);
    if (span < 1000) return "just now";
    const parts = [];
    let rest = span;
    for (const [size, unit] of UNITS) {
      const count = Math.floor(rest / size);
      rest -= count * size;
      if (count || parts.length) parts.push(count + " " + unit);
      if (parts.length === 2) break;
    }
    const text = parts.filter((p) => !p.startsWith("0 ")).join(" ") || "0 s";
    return delta > 0 ? text + " ago" : "in " + text;
  }
  function refreshTimes(root) {
    for (const el of (root || document).querySelectorAll("time[data-rel]")) {
      const at = Date.parse(el.getAttribute("datetime"));
      if (!Number.isNaN(at)) el.textContent = relative(at);
    }
  }
  setInterval(refreshTimes, 10000);
  document.addEventListener("htmx:afterSwap", (event) => refreshTimes(event.target));

  // Copy buttons: data-copy names the element whose text is copied.
  document.addEventListener("click", (event) => {
    const button = event.target.closest("[data-copy]");
    if (!button) return;
    const source = document.getElementById(button.getAttribute("data-copy"));
    if (source && navigator.clipboard) {
      navigator.clipboard.writeText(source.textContent.trim()).then(
        () => notify("Copied.", "ok"),
        () => notify("Could not copy: select the text instead.", "warn"),
      );
    }
  });

  // Live output of a task: its Server-Sent Events, resumed after the last id on reconnect.
  function line(out, text, css) {
    const span = document.createElement("span");
    if (css) span.className = css;
    span.textContent = text.endsWith("\n") ? text : text + "\n";
    const atBottom = out.scrollTop + out.clientHeight >= out.scrollHeight - 8;
    out.appendChild(span);
    if (atBottom) out.scrollTop = out.scrollHeight;
  }
  function claude(out, message) {
    if (message.type === "assistant") {
      const blocks = (message.message && message.message.content) || [];
      for (const block of Array.isArray(blocks) ? blocks : []) {
        if (block.type === "text" && String(block.text || "").trim()) line(out, String(block.text));
        else if (block.type === "tool_use") line(out, "→ tool " + (block.name || "?"), "dim");
      }
    } else if (message.type === "system" && message.subtype === "api_retry") {
      line(out, "↻ API retry " + message.attempt + "/" + message.max_retries, "dim");
    } else if (message.type === "result" && message.is_error) {
      line(out, "error: " + (message.result || message.subtype || "?"), "bad");
    }
  }
  function finished(out, data) {
    const parts = [];
    if (typeof data.duration_ms === "number") parts.push((data.duration_ms / 1000).toFixed(1) + "s");
    if (typeof data.cost_usd === "number") parts.push("$" + data.cost_usd.toFixed(4));
    if (data.tokens_used) parts.push(data.tokens_used + " tokens");
    const ok = data.status === "success" || data.status === "completed";
    line(out, "run finished: " + data.status + (parts.length ? " (" + parts.join(", ") + ")" : ""), ok ? "good" : "bad");
    if (data.error) line(out, "  " + (data.error_code ? data.error_code + ": " : "") + data.error, "bad");
  }
  function follow(out) {
    const waiting = out.querySelector(".waiting");
    const source = new EventSource(out.getAttribute("data-events"));
    const first = () => { if (waiting) waiting.remove(); };
    const on = (type, handle) => source.addEventListener(type, (event) => {
      first();
      let payload = {};
      try { payload = JSON.parse(event.data); } catch (e) { return; }
      handle(payload.data || {}, payload);
    });
    on("started", (data) => line(out, "started on " + (data.worker_id || "?") + ", attempt " + data.attempt +
      (data.resumed_session ? ", resuming this context's session" : ""), "note"));
    on("claude", (data) => claude(out, data));
    on("stderr", (data) => line(out, String(data.line || ""), "dim"));
    on("finished", (data) => finished(out, data));
    source.addEventListener("end", (event) => {
      source.close();
      let status = "";
      try { status = JSON.parse(event.data).status; } catch (e) { /* no status */ }
      if (waiting && !out.querySelector("span")) waiting.textContent = "No output was recorded.";
      else line(out, "— task " + status + " —", "dim");
      document.body.dispatchEvent(new CustomEvent("bloom:changed"));
    });
    source.onerror = () => { if (source.readyState === EventSource.CLOSED) line(out, "(stream closed)", "dim"); };
  }
  function start(root) {
    for (const out of (root || document).querySelectorAll("pre[data-events]:not([data-following])")) {
      out.setAttribute("data-following", "1");
      follow(out);
    }
  }
  document.addEventListener("DOMContentLoaded", () => { refreshTimes(); start(); });
  document.addEventListener("htmx:afterSwap", (event) => start(event.target));
})();
