// The README's Usage example is a complete program: extract it, type-check it, run it.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { test } from "node:test";
import { promisify } from "node:util";

import ts from "typescript";

import { PACKAGE_ROOT, subagentdShim } from "./helpers.js";

/** The first ```ts block under "## Usage" in README.md. */
export function usageExample(readme: string): string {
  const section = readme.slice(readme.indexOf("\n## Usage\n"));
  const match = /\n```ts\n([\s\S]*?)\n```\n/.exec(section);
  assert.ok(match, "README.md has no ```ts block under ## Usage");
  return match[1]! + "\n";
}

/** Compile `file` as a module of this package (it imports "@subagentd/client" by name). */
function compile(file: string, outDir: string): void {
  const program = ts.createProgram([file], {
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    lib: ["lib.es2022.d.ts"],
    types: ["node"],
    typeRoots: [join(PACKAGE_ROOT, "node_modules", "@types")],
    strict: true,
    skipLibCheck: true,
    rootDir: join(file, ".."),
    outDir,
  });
  const emitted = program.emit();
  const diagnostics = [...ts.getPreEmitDiagnostics(program), ...emitted.diagnostics];
  const text = ts.formatDiagnostics(diagnostics, {
    getCanonicalFileName: (f) => f,
    getCurrentDirectory: () => PACKAGE_ROOT,
    getNewLine: () => "\n",
  });
  assert.equal(text, "", `the README example does not type-check:\n${text}`);
}

test("the README's Usage example type-checks and runs to completion against a real server", async () => {
  // Inside the package, so "@subagentd/client" resolves to this package (self-reference).
  const src = join(PACKAGE_ROOT, "dist", "readme-example");
  rmSync(src, { recursive: true, force: true });
  mkdirSync(src, { recursive: true });
  const file = join(src, "example.ts");
  writeFileSync(file, usageExample(readFileSync(join(PACKAGE_ROOT, "README.md"), "utf8")));
  compile(file, src);

  const example = usageExample(readFileSync(join(PACKAGE_ROOT, "README.md"), "utf8"));
  assert.ok(
    example.indexOf("client.waitFor(") < example.indexOf("client.agents.spawn("),
    "the example waits for agent/settled only after the spawn that causes it",
  );
  const work = mkdtempSync(join(tmpdir(), "subagentd-readme-"));
  try {
    const bin = subagentdShim(mkdtempSync(join(tmpdir(), "subagentd-bin-")));
    for (let round = 0; round < 2; round++) await runOnce(src, work, bin); // twice in a row
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
});

/** One run of the compiled example in `work`, checked. */
async function runOnce(src: string, work: string, bin: string): Promise<void> {
  const run = await promisify(execFile)(process.execPath, [join(src, "example.js")], {
    cwd: work,
    env: { ...process.env, PATH: `${bin}${delimiter}${process.env.PATH ?? ""}` },
    timeout: 60_000,
  });
  const lines = run.stdout.trimEnd().split("\n");
  const child = /^(\S+) settled: completed$/.exec(lines.find((l) => l.endsWith(" settled: completed")) ?? "");
  assert.ok(child, `no "settled: completed" line in:\n${run.stdout}`);
  const id = child[1]!;
  // "Find X." in its fenced block (renderMessages): header, text and closing fence, 83 characters
  assert.ok(
    lines.includes(`${id}: completed: ${id} read 83 characters (and how to report)`),
    `the researcher's turn is not in:\n${run.stdout}`,
  );
  assert.equal(lines.at(-1), "subagentd exited with 0");
  assert.equal(run.stderr, "", "the example printed errors");
}
