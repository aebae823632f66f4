// Drives headless Chromium (Debian's, through playwright-core) against a running server
// for tests/e2e/test_browser.py: `node driver.mjs SCENARIO '{"server": ..., ...}'`
// prints one JSON object with what the page measured; the Python test asserts on it.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

const FLAGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
  "--autoplay-policy=no-user-gesture-required",
];

async function withBrowser(fn) {
  const profile = mkdtempSync(join(tmpdir(), "voiceserver-chromium-"));
  const browser = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    headless: true,
    args: FLAGS,
  });
  const logs = [];
  try {
    const page = browser.pages()[0] ?? (await browser.newPage());
    page.on("console", (m) => logs.push(`${m.type()}: ${m.text()}`));
    page.on("pageerror", (e) => logs.push(`pageerror: ${e.message}`));
    const frames = [];
    page.on("websocket", (ws) => {
      ws.on("framereceived", (f) => {
        if (typeof f.payload === "string") frames.push(JSON.parse(f.payload));
      });
    });
    const result = await fn(page, frames);
    return { ...result, logs };
  } catch (err) {
    console.error(`page log:\n${logs.join("\n")}`);
    throw err;
  } finally {
    await browser.close();
    rmSync(profile, { recursive: true, force: true });
  }
}

async function openDemo(page, args) {
  await page.goto(`${args.server}/`);
  await page.waitForFunction(() => document.getElementById("voice").options.length > 0);
  await page.selectOption("#encoding", args.encoding);
  await page.fill("#rate", String(args.rate ?? 40));
  if (args.text) await page.fill("#text", args.text);
}

const scenarios = {
  /** The demo page speaks its paragraph, streamed token by token, to the end. */
  async demo(page, frames, args) {
    await openDemo(page, args);
    await page.click("#speak");
    await page.waitForFunction(() => window.demo.context !== null);
    const measured = await page.evaluate(async () => {
      const ctx = window.demo.context;
      const done = await ctx.done;
      const played = await ctx.played;
      await new Promise((r) => setTimeout(r, 100)); // one more status report
      return {
        done,
        played,
        stats: ctx.stats,
        player: window.demo.client.player.stats(),
        encoding: window.demo.client.encoding,
        errors: window.demo.errors,
      };
    });
    await page.waitForTimeout(200); // let the figures repaint
    const words = await page.$$eval("#words span", (spans) =>
      spans.map((s) => ({ text: s.textContent, said: s.classList.contains("said") })),
    );
    if (args.screenshot) await page.screenshot({ path: args.screenshot, fullPage: true });
    const text = await page.inputValue("#text");
    return { ...measured, text, words, figures: await figures(page), serverTypes: frames.map((f) => f.type) };
  },

  /** Stop mid-speech: the sound stops, the server confirms, nothing more plays. */
  async stop(page, frames, args) {
    await openDemo(page, args);
    await page.click("#speak");
    await page.waitForFunction(() => window.demo.client && window.demo.client.player.stats().playedMs > 1500, null, {
      timeout: 30000,
    });
    // What had been played when the click reached the page (Playwright's own click
    // latency is not the SDK's): the worklet's latest report, at most ~11 ms old.
    await page.evaluate(() =>
      document.getElementById("stop").addEventListener(
        "click",
        () => (window.stopAt = window.demo.client.player.stats().playedMs),
        { capture: true },
      ),
    );
    await page.click("#stop");
    const atStop = await page.evaluate(() => window.stopAt);
    await page.waitForFunction(() => document.getElementById("status").textContent.startsWith("Stopped"));
    await page.waitForTimeout(500);
    const after = await page.evaluate(async () => {
      const ctx = window.demo.context;
      return {
        done: await ctx.done,
        cancel: await ctx.cancel(), // the same promise the stop button awaited
        player: window.demo.client.player.stats(),
        status: document.getElementById("status").textContent,
        errors: window.demo.errors,
      };
    });
    return { atStopMs: atStop, ...after, serverFrames: frames };
  },

  /** The README's ten lines, as a page of their own on the server's origin. */
  async readme(page, frames, args) {
    // A real document of the server's origin, its content replaced by the example.
    await page.goto(`${args.server}/health`);
    await page.setContent(args.html);
    await page.click("#say");
    const line = /spoke (\d+) ms, first audio after (\d+) ms/;
    await page.waitForFunction((source) => new RegExp(source).test(document.body.textContent), line.source, {
      timeout: 30000,
    });
    const [, audioMs, ttfaMs] = line.exec(await page.textContent("body"));
    return { result: { audioMs: Number(audioMs), ttfaMs: Number(ttfaMs) }, serverTypes: frames.map((f) => f.type) };
  },

  /** A page on another origin connects with a connect token minted by its backend. */
  async token(page, frames, args) {
    await page.goto(`${args.pageOrigin}/app.html`);
    const outcomes = {};
    for (const [name, token] of Object.entries(args.tokens)) {
      outcomes[name] = await page.evaluate(
        async ({ server, token }) => {
          const { VoiceClient } = await import(`${server}/sdk/voiceserver.js`);
          try {
            const client = await VoiceClient.connect({ url: server, token, encoding: "pcm" });
            const ctx = client.speak("Token accepted.");
            const done = await ctx.done;
            await client.close();
            return { ok: true, audioMs: done.audioMs };
          } catch (err) {
            return { ok: false, code: err.code, message: err.message };
          }
        },
        { server: args.server, token },
      );
    }
    return { outcomes };
  },

  /** The socket drops while idle: the client reconnects and speaks again. */
  async reconnect(page, frames, args) {
    await page.goto(`${args.server}/`);
    return {
      result: await page.evaluate(async () => {
        const { VoiceClient } = await import("/sdk/voiceserver.js");
        const events = [];
        const client = await VoiceClient.connect({ encoding: "pcm", session: { idle_timeout_s: 1 } });
        for (const name of ["reconnecting", "reconnected", "disconnected"]) {
          client.on(name, (e) => events.push({ name, ...e }));
        }
        // Past the server's idle timeout (1 s) the socket closes and is reopened.
        await new Promise((resolve, reject) => {
          client.on("reconnected", resolve);
          setTimeout(() => reject(new Error(`no reconnect: ${JSON.stringify(events)}`)), 10000);
        });
        const after = events.map((e) => e.name);
        // A context in flight when the socket drops fails, and the client does not
        // reconnect: here the server closes the socket (1009) on a message over its limit.
        const ctx = client.context();
        ctx.append("This context is in flight. ");
        client.send({ type: "text.append", context_id: ctx.id, text: "x".repeat(8 << 20) });
        let lost = null;
        try {
          await ctx.done;
        } catch (err) {
          lost = err.code;
        }
        await new Promise((r) => setTimeout(r, 1000));
        await client.close();
        return { afterIdle: after, events, lost, connected: client.connected };
      }),
    };
  },
};

async function figures(page) {
  return page.evaluate(() =>
    Object.fromEntries(
      ["ttfa", "played", "buffered", "underruns", "bytes", "wire"].map((id) => [
        id,
        document.getElementById(id).textContent,
      ]),
    ),
  );
}

const [name, raw] = process.argv.slice(2);
const scenario = scenarios[name];
if (!scenario) {
  console.error(`unknown scenario ${name}; one of ${Object.keys(scenarios).join(", ")}`);
  process.exit(2);
}
const args = JSON.parse(raw ?? "{}");
const result = await withBrowser((page, frames) => scenario(page, frames, args));
process.stdout.write(JSON.stringify(result));
