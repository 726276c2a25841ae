// The official MCP TypeScript SDK's `experimental.tasks` client (2025-11-25 shape) against
// subagentd, one phase per client process (tests/clients/test_tasks_ts_sdk.py runs both):
//   node client.mjs first  <config.json>  spawn A and B as tasks, poll A to its end, stream B
//                                          until it works, then close the client (B still runs)
//   node client.mjs second <config.json>  a new client process: list, collect A's and B's
//                                          results, stream D to its end, cancel C
// config: {sdk: <the SDK package dir>, command, args, env, ids?: {a, b}, bPrompt?: B's prompt
// (default: wait for SIGTERM), aPrompt?: A's prompt (then A is polled twice and left working),
// bFirst?: wait for A's and B's results before listing}; prints one JSON line.

import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [phase, configPath] = process.argv.slice(2);
const config = JSON.parse(readFileSync(configPath, "utf8"));
const load = (path) => import(pathToFileURL(join(config.sdk, "dist", "esm", path)).href);
const { Client } = await load("client/index.js");
const { StdioClientTransport } = await load("client/stdio.js");

const transport = new StdioClientTransport({
  command: config.command,
  args: config.args,
  env: config.env,
  stderr: "inherit",
});
const client = new Client({ name: "subagentd-ts-tasks", version: "0.0.0" }, { capabilities: {} });
const { CallToolResultSchema, TaskStatusNotificationSchema } = await load("types.js");
const statuses = [];
client.setNotificationHandler(
  TaskStatusNotificationSchema,
  (notification) => statuses.push([notification.params.taskId, notification.params.status]),
);
await client.connect(transport);
const tasks = client.experimental.tasks;
const tools = await client.listTools(); // also tells the client which tools take tasks
const out = {
  capabilities: client.getServerCapabilities()?.tasks ?? null,
  execution: Object.fromEntries(tools.tools.map((t) => [t.name, t.execution ?? null])),
};
const texts = (result) => result.content.map((block) => block.text);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function spawnAsTask(childId, prompt) {
  // callToolStream sends params.task (the tool says taskSupport "optional"); its first message
  // is the CreateTaskResult
  const stream = tasks.callToolStream({
    name: "spawn_agent",
    arguments: { label: childId, prompt, child_id: childId },
  }, undefined, { task: { ttl: 600000 } });
  const first = await stream.next();
  if (first.value.type !== "taskCreated") throw new Error(JSON.stringify(first.value));
  return { task: first.value.task, stream };
}

if (phase === "first") {
  const a = await spawnAsTask("a", config.aPrompt ?? "summarize the logs");
  const waitTerm = JSON.stringify({ steps: [{ wait_term: true }] });
  const b = await spawnAsTask("b", config.bPrompt ?? waitTerm);
  out.created = [a.task, b.task];
  // poll A with tasks/get, as its pollInterval says, until it is terminal
  let polled = a.task;
  out.polls = 0;
  while (!["completed", "failed", "cancelled"].includes(polled.status)) {
    if (config.aPrompt && out.polls === 2) break; // A goes on after the close
    await sleep(polled.pollInterval ?? 1000);
    polled = await tasks.getTask(a.task.taskId);
    out.polls += 1;
  }
  out.a = polled;
  if (!config.aPrompt) {
    out.aResult = texts(await tasks.getTaskResult(a.task.taskId, CallToolResultSchema));
  }
  // stream B: its next message is the status the stream polled (working), then we close
  const next = await b.stream.next();
  out.bStreamed = next.value.type === "taskStatus" ? next.value.task.status : next.value;
  out.listed = (await tasks.listTasks()).tasks.map((t) => [t.taskId, t.status]);
  out.ids = { a: a.task.taskId, b: b.task.taskId };
} else {
  const { a, b } = config.ids;
  if (config.bFirst) {
    for (const id of [a, b]) await tasks.getTaskResult(id, CallToolResultSchema); // until settled
  }
  out.listed = (await tasks.listTasks()).tasks.map((t) => [t.taskId, t.status]);
  out.a = await tasks.getTask(a);
  out.aResult = texts(await tasks.getTaskResult(a, CallToolResultSchema));
  out.b = await tasks.getTask(b);
  const bResult = await tasks.getTaskResult(b, CallToolResultSchema);
  out.bResult = { isError: bResult.isError, texts: texts(bResult) };
  // a stream to its end: taskCreated, taskStatus (working, ..., completed), result
  const d = await spawnAsTask("d", "check the disk");
  const seen = ["taskCreated"];
  for await (const message of d.stream) {
    seen.push(message.type === "taskStatus" ? `taskStatus:${message.task.status}` : message.type);
    if (message.type === "result") out.dResult = texts(message.result);
    if (message.type === "error") out.dError = String(message.error);
  }
  out.dStream = [...new Set(seen)];
  // cancel a third task while its child runs
  const c = await spawnAsTask("c", JSON.stringify({ steps: [{ wait_term: true }] }));
  out.cancelled = await tasks.cancelTask(c.task.taskId);
  out.cResult = texts(await tasks.getTaskResult(c.task.taskId, CallToolResultSchema));
  try {
    await tasks.cancelTask(c.task.taskId);
  } catch (error) {
    out.cancelAgain = { code: error.code, message: error.message };
  }
  try {
    await tasks.getTask("no-such-task");
  } catch (error) {
    out.missing = { code: error.code, message: error.message };
  }
}
out.statuses = statuses;
await client.close();
process.stdout.write(JSON.stringify(out) + "\n");
