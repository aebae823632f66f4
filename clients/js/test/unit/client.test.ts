import assert from "node:assert/strict";
import { test } from "node:test";
import { socketUrl } from "../../src/client.js";
import { Emitter } from "../../src/emitter.js";

test("the socket URL defaults to the page's server and carries the token", () => {
  const page = "https://app.example/demo/index.html";
  assert.equal(socketUrl(undefined, page), "wss://app.example/v1/audio/speech/ws");
  assert.equal(socketUrl("http://127.0.0.1:8000", page, "t.k"), "ws://127.0.0.1:8000/v1/audio/speech/ws?token=t.k");
  assert.equal(socketUrl("wss://tts.example/custom/ws?voice=joe", page), "wss://tts.example/custom/ws?voice=joe");
  assert.equal(socketUrl("/v1/audio/speech/ws", "http://localhost:8000/"), "ws://localhost:8000/v1/audio/speech/ws");
  assert.equal(socketUrl(undefined, page, "a b&c"), "wss://app.example/v1/audio/speech/ws?token=a+b%26c");
});

class Events extends Emitter<{ ping: number; pong: string }> {
  failures: unknown[] = [];
  fire<K extends "ping" | "pong">(name: K, value: { ping: number; pong: string }[K]) {
    this.emit(name, value);
  }
  protected listenerFailed(err: unknown): void {
    this.failures.push(err);
  }
}

test("listeners get their event; the returned function unsubscribes", () => {
  const events = new Events();
  const seen: unknown[] = [];
  const off = events.on("ping", (n) => seen.push(n));
  events.on("pong", (s) => seen.push(s));
  events.fire("ping", 1);
  events.fire("pong", "a");
  off();
  events.fire("ping", 2);
  assert.deepEqual(seen, [1, "a"]);
  assert.equal(events.listens("ping"), false);
  assert.equal(events.listens("pong"), true);
});

test("a listener that throws is reported and does not stop the others", () => {
  const events = new Events();
  const seen: number[] = [];
  events.on("ping", () => {
    throw new Error("listener bug");
  });
  events.on("ping", (n) => seen.push(n));
  events.fire("ping", 7);
  assert.deepEqual(seen, [7]);
  assert.deepEqual(events.failures.map(String), ["Error: listener bug"]);
});
