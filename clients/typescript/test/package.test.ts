// The package as published: `npm pack` of a checkout without dist/ (prepack builds it), then the
// tarball installed offline into a fresh project, required (CommonJS) and imported (ESM).

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { promisify } from "node:util";

import { CLIENT_VERSION } from "../src/index.js";
import { PACKAGE_ROOT, checkoutCommand } from "./helpers.js";

const run = promisify(execFile);
const NPM = process.platform === "win32" ? "npm.cmd" : "npm";
let work: string;
let consumer: string;
let packed: string[];

before(async () => {
  work = mkdtempSync(join(tmpdir(), "subagentd-pack-"));
  // A fresh checkout of the package: everything but dist/ and node_modules (linked back in).
  const clone = join(work, "typescript");
  cpSync(PACKAGE_ROOT, clone, {
    recursive: true,
    filter: (path) => !/[/\\](dist|node_modules)$/.test(path),
  });
  symlinkSync(join(PACKAGE_ROOT, "node_modules"), join(clone, "node_modules"), "dir");
  const pack = await run(NPM, ["pack", "--json", "--pack-destination", work], { cwd: clone, timeout: 240_000 });
  const [info] = JSON.parse(pack.stdout.slice(pack.stdout.indexOf("[")));
  packed = info.files.map((f: { path: string }) => f.path);
  consumer = join(work, "consumer");
  mkdirSync(consumer);
  writeFileSync(join(consumer, "package.json"), JSON.stringify({ name: "consumer", private: true }));
  await run(NPM, ["install", "--offline", "--no-audit", "--no-fund", "--no-save", join(work, info.filename)], {
    cwd: consumer,
    timeout: 120_000,
  });
});

after(() => rmSync(work, { recursive: true, force: true }));

test("npm pack of a checkout without dist/ builds it: both builds, types, LICENSE, no tests", () => {
  for (const path of [
    "package.json",
    "LICENSE",
    "README.md",
    "dist/src/index.js",
    "dist/src/index.d.ts",
    "dist/cjs/index.js",
    "dist/cjs/index.d.ts",
    "dist/cjs/package.json",
  ]) {
    assert.ok(packed.includes(path), `${path} is not in the tarball: ${packed.join(", ")}`);
  }
  assert.deepEqual(packed.filter((p) => p.startsWith("dist/test")), []);
});

/** Run `code` in the consumer project (`.cjs` or `.mjs`) against a real server. */
async function consume(name: string, code: string): Promise<string> {
  const { command, args, env } = checkoutCommand();
  writeFileSync(join(consumer, name), code);
  const done = await run(process.execPath, [name], {
    cwd: consumer,
    env: { ...process.env, SUBAGENTD_COMMAND: command, SUBAGENTD_ARGS: JSON.stringify(args), PYTHONPATH: env.PYTHONPATH },
    timeout: 60_000,
  });
  return done.stdout;
}

const PROGRAM = `
const client = new SubagentdClient({ command: process.env.SUBAGENTD_COMMAND, args: JSON.parse(process.env.SUBAGENTD_ARGS), db: ":memory:" });
const init = await client.initialize();
const root = await client.agents.open({ agent_id: "root" });
const listed = await client.listAgents({ caller: root.agent_id });
console.log(JSON.stringify([typeof runAgentHost, ErrorCode.UNAUTHORIZED, init.serverInfo.name, listed.text, await client.close()]));
`;
const EXPECTED = JSON.stringify(["function", 1001, "subagentd", "(no subagents)", 0]) + "\n";

test("require() of the installed tarball works (CommonJS build)", async () => {
  const out = await consume(
    "main.cjs",
    `const { SubagentdClient, runAgentHost, ErrorCode } = require("@subagentd/client");\n(async () => {${PROGRAM}})();\n`,
  );
  assert.equal(out, EXPECTED);
});

test("import of the installed tarball works (ESM build)", async () => {
  const out = await consume("main.mjs", `import { SubagentdClient, runAgentHost, ErrorCode } from "@subagentd/client";\n${PROGRAM}`);
  assert.equal(out, EXPECTED);
});

test("CLIENT_VERSION is the package's version", () => {
  assert.equal(CLIENT_VERSION, JSON.parse(readFileSync(join(PACKAGE_ROOT, "package.json"), "utf8")).version);
});
