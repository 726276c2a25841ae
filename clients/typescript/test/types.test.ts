import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { pathToFileURL } from "node:url";

import { OPENRPC_PATH, PACKAGE_ROOT } from "./helpers.js";

test("src/types.ts is what scripts/gen-types.mjs makes of clients/openrpc.json", async () => {
  const script = pathToFileURL(join(PACKAGE_ROOT, "scripts", "gen-types.mjs")).href;
  const { generate } = (await import(script)) as { generate: (doc: unknown) => string };
  const doc = JSON.parse(readFileSync(OPENRPC_PATH, "utf8"));
  const committed = readFileSync(join(PACKAGE_ROOT, "src", "types.ts"), "utf8");
  assert.ok(
    generate(doc) === committed,
    "src/types.ts is stale: run `npm run gen-types` in clients/typescript and commit the result",
  );
});

test("the generator handles the schema shapes it claims to", async () => {
  const script = pathToFileURL(join(PACKAGE_ROOT, "scripts", "gen-types.mjs")).href;
  const { typeOf } = (await import(script)) as { typeOf: (schema: unknown) => string };
  assert.equal(typeOf({ type: "string" }), "string");
  assert.equal(typeOf({ type: "integer" }), "number");
  assert.equal(typeOf({ type: "boolean" }), "boolean");
  assert.equal(typeOf({ enum: ["a", "b"] }), '"a" | "b"');
  assert.equal(typeOf({ anyOf: [{ type: "string" }, { type: "null" }] }), "string | null");
  assert.equal(typeOf({ type: "array", items: { $ref: "#/components/schemas/X" } }), "X[]");
  assert.equal(typeOf({ type: "array", items: { anyOf: [{ $ref: "#/components/schemas/A" }, { $ref: "#/components/schemas/B" }] } }), "Array<A | B>");
  assert.equal(typeOf({ type: "object" }), "{ [key: string]: unknown }");
  assert.equal(typeOf({}), "unknown");
  assert.equal(
    typeOf({ type: "object", properties: { a: { type: "string" }, b: { type: "integer" } }, required: ["a"] }),
    "{\n  a: string;\n  b?: number;\n}",
  );
});
