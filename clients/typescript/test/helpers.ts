// Shared by the tests: run the subagentd of this checkout.

import { writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { SubagentdClient, type SubagentdClientOptions } from "../src/index.js";

const here = dirname(fileURLToPath(import.meta.url));
/** clients/typescript (tests run from dist/test). */
export const PACKAGE_ROOT = resolve(here, "..", "..");
/** The repository root: two levels above clients/typescript. */
export const REPO_ROOT = resolve(PACKAGE_ROOT, "..", "..");
export const OPENRPC_PATH = join(REPO_ROOT, "clients", "openrpc.json");

/** The Python that runs subagentd: $SUBAGENTD_PYTHON, else python3. */
export const PYTHON = process.env.SUBAGENTD_PYTHON || "python3";

/** Environment that makes `python -m subagentd` import this checkout's package. */
export function checkoutEnv(): NodeJS.ProcessEnv {
  const path = process.env.PYTHONPATH;
  return { ...process.env, PYTHONPATH: path ? `${REPO_ROOT}:${path}` : REPO_ROOT };
}

/** Command, args, cwd and env for `python -m subagentd <args>` from this checkout. */
export function checkoutCommand(args: string[] = []): { command: string; args: string[]; cwd: string; env: NodeJS.ProcessEnv } {
  return { command: PYTHON, args: ["-m", "subagentd", ...args], cwd: REPO_ROOT, env: checkoutEnv() };
}

/** A client of a fresh in-memory subagentd from this checkout. */
export function startServer(options: SubagentdClientOptions & { extraArgs?: string[] } = {}): SubagentdClient {
  const { extraArgs = [], ...rest } = options;
  const { command, args, cwd, env } = checkoutCommand(extraArgs);
  return new SubagentdClient({ command, args, cwd, env, db: ":memory:", requestTimeoutMs: 15_000, ...rest });
}

/** A promise and its resolver. */
export function deferred<T = void>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

/** A directory holding a `subagentd` executable that runs this checkout's server, for PATH. */
export function subagentdShim(dir: string): string {
  const quote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;
  const script = `#!/bin/sh\nPYTHONPATH=${quote(checkoutEnv().PYTHONPATH!)} exec ${quote(PYTHON)} -m subagentd "$@"\n`;
  writeFileSync(join(dir, "subagentd"), script, { mode: 0o755 });
  return dir;
}
