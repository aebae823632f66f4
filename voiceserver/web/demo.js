// The demo page: everything it does goes through the SDK the server serves.
import { VoiceClient } from "/sdk/voiceserver.js";

const $ = (id) => document.getElementById(id);
const ui = {
  text: $("text"), voice: $("voice"), encoding: $("encoding"), simulate: $("simulate"),
  rate: $("rate"), key: $("key"), speak: $("speak"), stop: $("stop"), status: $("status"),
  meter: $("meter"), model: $("model"), words: $("words"),
  ttfa: $("ttfa"), played: $("played"), buffered: $("buffered"), underruns: $("underruns"),
  bytes: $("bytes"), wire: $("wire"),
};

/** State the browser tests read; a person never needs it. */
const demo = { client: null, context: null, contexts: [], errors: [] };
window.demo = demo;

function status(text, isError = false) {
  ui.status.textContent = text;
  ui.status.classList.toggle("error", isError);
  if (isError) demo.errors.push(text);
}

function authHeaders() {
  const key = ui.key.value.trim();
  return key ? { Authorization: `Bearer ${key}` } : {};
}

async function mintToken() {
  const response = await fetch("/v1/auth/tokens", { method: "POST", headers: authHeaders() });
  const body = await response.json();
  if (!response.ok) throw new Error(body.error?.message ?? `token request failed (${response.status})`);
  return body.token;
}

async function loadVoices() {
  try {
    const response = await fetch("/v1/audio/voices", { headers: authHeaders() });
    const body = await response.json();
    if (!response.ok) throw new Error(body.error?.message ?? `HTTP ${response.status}`);
    ui.voice.replaceChildren(
      ...body.data.map((v) => new Option(v.language ? `${v.name} (${v.language})` : v.name, v.name)),
    );
    if (body.default_voice) ui.voice.value = body.default_voice;
    const health = await (await fetch("/health", { headers: authHeaders() })).json();
    ui.model.textContent = health.model ?? "";
  } catch (err) {
    status(`Could not list voices: ${err.message}`, true);
  }
}

async function client() {
  const encoding = ui.encoding.value;
  if (demo.client && demo.client.connected && demo.wanted === encoding) return demo.client;
  if (demo.client) await demo.client.close();
  demo.client = null;
  demo.wanted = encoding;
  demo.client = await VoiceClient.connect({ encoding, token: ui.key.value.trim() ? mintToken : undefined });
  demo.client.on("error", (err) => status(`${err.code}: ${err.message}`, true));
  demo.client.on("reconnecting", () => status("Connection dropped; reconnecting…"));
  demo.client.on("reconnected", () => status("Reconnected."));
  demo.client.on("disconnected", (e) => status(`Disconnected (${e.code}${e.reason ? `: ${e.reason}` : ""}).`, true));
  ui.wire.textContent = `${demo.client.encoding} ${demo.client.player.sampleRate / 1000} kHz`;
  return demo.client;
}

/** A paragraph as an LLM emits it: word pieces with their spaces, a few characters each. */
function tokens(text) {
  const out = [];
  for (const word of text.match(/\s*\S+/g) ?? []) {
    for (let i = 0; i < word.length; i += 6) out.push(word.slice(i, i + 6));
  }
  return out;
}

let feeding = null;

async function speak() {
  const text = ui.text.value;
  if (!text.trim()) return status("Type something first.", true);
  ui.speak.disabled = true;
  try {
    const c = await client();
    await c.player.resume();
    if (demo.context) await demo.context.cancel();
    const ctx = c.context({ voice: ui.voice.value || undefined, timestamps: "word" });
    demo.context = ctx;
    ui.words.replaceChildren();
    const chars = Array.from(text); // the server counts code points
    ctx.on("timestamps", (words) => {
      for (const w of words) {
        const span = document.createElement("span");
        span.textContent = chars.slice(w.char_start, w.char_end).join("");
        span.dataset.start = w.start_ms;
        span.dataset.end = w.end_ms;
        ui.words.append(span, " ");
      }
    });
    demo.contexts.push(ctx);
    ui.stop.disabled = false;
    status("Speaking…");
    ctx.on("audio", ({ ttfaMs }) => (ui.ttfa.textContent = `${Math.round(ttfaMs)} ms`));
    ctx.on("error", (err) => status(`${err.code}: ${err.message}`, true));
    ctx.played.then(() => {
      if (demo.context === ctx) {
        ui.stop.disabled = true;
        status(ctx.stats.audioMs > 0 ? "Done." : "Stopped.");
      }
    });
    if (ui.simulate.checked) {
      const pieces = tokens(text);
      const gap = 1000 / Math.max(1, Number(ui.rate.value) || 40);
      feeding = { ctx, timer: null };
      const feed = feeding;
      let i = 0;
      const next = () => {
        if (feeding !== feed) return;
        if (i < pieces.length) {
          ctx.append(pieces[i++]);
          feed.timer = setTimeout(next, gap);
        } else {
          ctx.end();
          feeding = null;
        }
      };
      next();
    } else {
      ctx.append(text);
      ctx.end();
    }
  } catch (err) {
    status(err.message, true);
  } finally {
    ui.speak.disabled = false;
  }
}

async function stop() {
  if (feeding) {
    clearTimeout(feeding.timer);
    feeding = null;
  }
  const ctx = demo.context;
  if (!ctx) return;
  ui.stop.disabled = true;
  const { playedMs } = await ctx.cancel();
  status(`Stopped after ${(playedMs / 1000).toFixed(1)} s.`);
}

/** The level meter and figures, 20 times a second (cheap: the page must not steal the
 * CPU that speech is made with when the server runs on the same machine). */
function draw() {
  const canvas = ui.meter;
  const g = canvas.getContext("2d");
  const history = new Array(120).fill(0);
  let quiet = 0;
  setInterval(() => {
    const c = demo.client;
    const s = c ? c.player.stats() : null;
    const level = s ? s.level : 0;
    history.push(level);
    history.shift();
    quiet = level > 0 ? 0 : quiet + 1;
    if (quiet <= history.length) {
      g.clearRect(0, 0, canvas.width, canvas.height);
      const w = canvas.width / history.length;
      const mid = canvas.height / 2;
      g.fillStyle = "#4a9";
      history.forEach((v, i) => {
        const h = Math.max(1, Math.min(1, v * 1.5) * mid);
        g.fillRect(i * w, mid - h, Math.max(1, w - 1), 2 * h);
      });
    }
    if (demo.context) {
      const at = demo.context.stats.playedMs;
      for (const span of ui.words.children) {
        span.classList.toggle("said", Number(span.dataset.end) <= at);
        span.classList.toggle("now", Number(span.dataset.start) <= at && at < Number(span.dataset.end));
      }
    }
    if (s) {
      ui.played.textContent = `${(s.playedMs / 1000).toFixed(1)} s`;
      ui.buffered.textContent = `${Math.round(s.bufferedMs)} ms`;
      ui.underruns.textContent = String(s.underruns);
      ui.bytes.textContent = s.bytesReceived.toLocaleString("en");
    }
  }, 50);
}

ui.speak.addEventListener("click", speak);
ui.stop.addEventListener("click", stop);
ui.key.addEventListener("change", loadVoices);
loadVoices();
draw();
