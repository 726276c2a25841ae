export {
  SubagentdClient,
  RpcError,
  RpcTimeoutError,
  ConnectionClosedError,
  CannotStartError,
  cannotStartLine,
  CLIENT_NAME,
  CLIENT_VERSION,
  DEFAULT_MCP_PROTOCOL_VERSION,
} from "./client.js";
export type { SubagentdClientOptions, RequestOptions, SubagentdClientEvents } from "./client.js";
export { runAgentHost, reportTurnError, TurnInterruptedError } from "./host.js";
export type { AgentHost, AgentHostOptions, TurnOutcome, TurnReason } from "./host.js";
export { renderMessages, fenceToken, RENDER_GUIDE } from "./render.js";
export type { RenderableMessage } from "./render.js";
export * from "./types.js";
