// Replays a scripted transcript (tests/scripts/*.jsonl; the format is docs/scripts.md)
// against a running subagentd. One JSON object per line, each with exactly one key:
//   {"send": <value>}        serialize it as one line ("${name}" strings substituted)
//   {"send_raw": "<text>"}   write text + "\n" verbatim (never substituted)
//   {"expect": <value>}      the next frame (response, notification or batch, in arrival
//                            order) must equal it structurally and exactly; a whole string
//                            "${name}" records the actual value the first time and must equal
//                            it afterwards; "${_}" matches any value (the key must be present)
//   {"comment": "..."}       ignored
//   {"version": 1}           the format's version (first line only; docs/scripts.md)
// After the last line: ping with id "script-end", read until its reply and a little longer;
// any other frame is "unexpected"; then close stdin and require exit code 0.

import { isDeepStrictEqual } from "node:util";

import type { SubagentdClient } from "../src/index.js";

export type Step =
  | { send: unknown }
  | { send_raw: string }
  | { expect: unknown }
  | { comment: unknown }
  | { version: 1 };

const WHOLE = /^\$\{([A-Za-z0-9_]+)\}$/;
const STEP_KEYS = ["send", "send_raw", "expect", "comment", "version"];
export const END_ID = "script-end";

export function parseScript(text: string): Step[] {
  const steps: Step[] = [];
  text.split("\n").forEach((line, index) => {
    if (line.trim() === "") return;
    let step: unknown;
    try {
      step = JSON.parse(line);
    } catch (error) {
      throw new Error(`line ${index + 1}: not JSON: ${(error as Error).message}`);
    }
    if (typeof step !== "object" || step === null || Array.isArray(step)) {
      throw new Error(`line ${index + 1}: a step must be an object`);
    }
    const keys = Object.keys(step);
    if (keys.length !== 1 || !STEP_KEYS.includes(keys[0]!)) {
      throw new Error(`line ${index + 1}: a step has exactly one of ${STEP_KEYS.join(", ")}: ${line}`);
    }
    if ("send_raw" in step && typeof (step as { send_raw: unknown }).send_raw !== "string") {
      throw new Error(`line ${index + 1}: send_raw takes a string`);
    }
    if ("version" in step && (steps.length > 0 || (step as { version: unknown }).version !== 1)) {
      throw new Error(`line ${index + 1}: version 1 is the first step only: ${line}`);
    }
    steps.push(step as Step);
  });
  return steps;
}

/** Captured values and the matching rules. */
export class Bindings {
  readonly values = new Map<string, unknown>();

  /** `actual` matches `expected`; captures along the way. Returns a path to the first mismatch, or null. */
  match(expected: unknown, actual: unknown, path = "$"): string | null {
    if (typeof expected === "string") {
      const whole = WHOLE.exec(expected);
      if (whole) {
        const name = whole[1]!;
        if (name === "_") return null;
        if (!this.values.has(name)) {
          if (actual === undefined) return `${path}: missing (to capture \${${name}})`;
          this.values.set(name, actual);
          return null;
        }
        return isDeepStrictEqual(this.values.get(name), actual)
          ? null
          : `${path}: expected \${${name}} = ${JSON.stringify(this.values.get(name))}, got ${JSON.stringify(actual)}`;
      }
      return expected === actual ? null : `${path}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(actual)}`;
    }
    if (Array.isArray(expected)) {
      if (!Array.isArray(actual)) return `${path}: expected an array, got ${JSON.stringify(actual)}`;
      if (expected.length !== actual.length) {
        return `${path}: expected ${expected.length} items, got ${actual.length}: ${JSON.stringify(actual)}`;
      }
      for (let i = 0; i < expected.length; i++) {
        const problem = this.match(expected[i], actual[i], `${path}[${i}]`);
        if (problem) return problem;
      }
      return null;
    }
    if (typeof expected === "object" && expected !== null) {
      if (typeof actual !== "object" || actual === null || Array.isArray(actual)) {
        return `${path}: expected an object, got ${JSON.stringify(actual)}`;
      }
      const e = expected as Record<string, unknown>;
      const a = actual as Record<string, unknown>;
      const extra = Object.keys(a).filter((k) => !(k in e));
      if (extra.length) return `${path}: unexpected ${extra.map((k) => JSON.stringify(k)).join(", ")} in ${JSON.stringify(actual)}`;
      for (const key of Object.keys(e)) {
        if (!(key in a)) return `${path}: missing ${JSON.stringify(key)} in ${JSON.stringify(actual)}`;
        const problem = this.match(e[key], a[key], `${path}.${key}`);
        if (problem) return problem;
      }
      return null;
    }
    return expected === actual ? null : `${path}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(actual)}`;
  }

  /** Replace whole "${name}" strings (anywhere but in keys) by their recorded values. */
  substitute(value: unknown): unknown {
    if (typeof value === "string") {
      const whole = WHOLE.exec(value);
      return whole ? this.lookup(whole[1]!) : value;
    }
    if (Array.isArray(value)) return value.map((v) => this.substitute(v));
    if (typeof value === "object" && value !== null) {
      return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, this.substitute(v)]));
    }
    return value;
  }

  private lookup(name: string): unknown {
    if (!this.values.has(name) || name === "_") throw new Error(`\${${name}} is used before it was recorded`);
    return this.values.get(name);
  }
}

/** Frames from the server, in arrival order. */
export class FrameQueue {
  private readonly frames: unknown[] = [];
  private waiter: (() => void) | undefined;
  private problem: string | undefined;

  constructor(client: SubagentdClient) {
    client.on("frame", (frame) => {
      this.frames.push(frame);
      this.wake();
    });
    client.on("protocolError", (error, line) => {
      this.problem = `the server wrote a line that is not a JSON frame (${error.message}): ${line}`;
      this.wake();
    });
    client.on("exit", (code) => {
      this.problem ??= `the server exited (code ${code})`;
      this.wake();
    });
  }

  private wake(): void {
    const waiter = this.waiter;
    this.waiter = undefined;
    waiter?.();
  }

  async next(timeoutMs: number): Promise<unknown> {
    const deadline = Date.now() + timeoutMs;
    while (this.frames.length === 0) {
      if (this.problem) throw new Error(this.problem);
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no frame within ${timeoutMs} ms`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.waiter = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
    return this.frames.shift();
  }
}

/** Run the steps; throws an Error naming the failing line on the first mismatch. */
export async function replay(
  client: SubagentdClient,
  steps: Step[],
  timeoutMs = 10_000,
  quietMs = 300,
): Promise<Bindings> {
  const bindings = new Bindings();
  const queue = new FrameQueue(client);
  for (const [index, step] of steps.entries()) {
    const where = `step ${index + 1}`;
    if ("send" in step) {
      client.sendFrame(bindings.substitute(step.send));
    } else if ("send_raw" in step) {
      client.sendRaw(step.send_raw);
    } else if ("expect" in step) {
      let frame: unknown;
      try {
        frame = await queue.next(timeoutMs);
      } catch (error) {
        throw new Error(`${where}: expected ${JSON.stringify(step.expect)}, but ${(error as Error).message}`);
      }
      const problem = bindings.match(step.expect, frame);
      if (problem) throw new Error(`${where}: ${problem}\n  expected: ${JSON.stringify(step.expect)}\n  actual:   ${JSON.stringify(frame)}`);
    }
  }
  // The end: everything the server sent must have been expected.
  client.sendFrame({ jsonrpc: "2.0", id: END_ID, method: "ping" });
  const endReply = { jsonrpc: "2.0", result: {}, id: END_ID };
  for (;;) {
    const frame = await queue.next(timeoutMs).catch((error: Error) => {
      throw new Error(`after the last step: no reply to the closing ping (${error.message})`);
    });
    if (isDeepStrictEqual(frame, endReply)) break;
    throw new Error(`after the last step: unexpected frame ${JSON.stringify(frame)}`);
  }
  const late = await queue.next(quietMs).then(
    (frame) => frame,
    () => undefined,
  );
  if (late !== undefined) throw new Error(`after the last step: unexpected frame ${JSON.stringify(late)}`);
  return bindings;
}
