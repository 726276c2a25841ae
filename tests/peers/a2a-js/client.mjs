// @a2a-js/sdk's client drives `subagentd a2a` (tests/clients/test_a2a_js_client.py): a send, a
// follow-up in the same task, a stream, a cancel of a slow task, and the list. Prints one JSON
// line of what it saw; the Python test asserts on it.
//
// node client.mjs CONFIG.json   (CONFIG: {"sdk": the package's directory, "url": the face's URL,
//                                "slow": the text of a slow turn, "streamed": a reporting turn})

import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { randomUUID } from "node:crypto";

const config = JSON.parse(readFileSync(process.argv[2], "utf8"));
const { ClientFactory } = await import(pathToFileURL(join(config.sdk, "dist", "client", "index.js")).href);
const { Role, TaskState } = await import(pathToFileURL(join(config.sdk, "dist", "index.js")).href);

const client = await new ClientFactory().createFromUrl(config.url);
const stateName = (state) => TaskState[state];
const text = (message) => (message?.parts ?? []).map((p) => p.content?.value).join("\n");
const message = (words, taskId = "") => ({
  messageId: randomUUID(),
  contextId: "",
  taskId,
  role: Role.ROLE_USER,
  parts: [{ content: { $case: "text", value: words }, metadata: undefined }],
  metadata: undefined,
  extensions: [],
  referenceTaskIds: [],
});
const request = (sent, returnImmediately = false) => ({
  tenant: "",
  message: sent,
  configuration: { acceptedOutputModes: [], returnImmediately },
  metadata: undefined,
});

const seen = {};
const first = await client.sendMessage(request(message("hello")));
const task = first.payload?.value ?? first;
seen.first = { id: task.id, state: stateName(task.status.state), text: text(task.status.message) };
const again = await client.sendMessage(request(message("again", task.id)));
const followed = again.payload?.value ?? again;
seen.again = { id: followed.id, state: stateName(followed.status.state), text: text(followed.status.message) };

seen.stream = [];
for await (const event of client.sendMessageStream(request(message(config.streamed)))) {
  const payload = event.payload;
  if (payload?.$case === "task") seen.stream.push(["task", stateName(payload.value.status.state)]);
  else if (payload?.$case === "statusUpdate")
    seen.stream.push(["status", stateName(payload.value.status.state), text(payload.value.status.message)]);
  else seen.stream.push([payload?.$case]);
}

const slowSent = await client.sendMessage(request(message(config.slow), true));
const slow = slowSent.payload?.value ?? slowSent;
const cancelled = await client.cancelTask({ tenant: "", id: slow.id, metadata: undefined });
seen.cancelled = { id: slow.id, state: stateName(cancelled.status.state) };

const listed = await client.listTasks({ tenant: "", contextId: "", pageSize: 10, pageToken: "", historyLength: 0, includeArtifacts: false });
seen.listed = listed.tasks.map((t) => [t.id, stateName(t.status.state)]).sort();
console.log(JSON.stringify(seen));
