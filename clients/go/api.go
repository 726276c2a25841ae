package subagentd

import "context"

// Typed wrappers of the host API (PROTOCOL.md §4) and the four tools as direct methods (§5).

// OpenAgent makes an ordinary session live (agents/open).
func (c *Client) OpenAgent(ctx context.Context, params OpenParams) (OpenResult, error) {
	var r OpenResult
	return r, c.Call(ctx, "agents/open", params, &r)
}

// CloseAgent closes an ordinary session and waits for everything live below it (agents/close).
func (c *Client) CloseAgent(ctx context.Context, agentID string) error {
	return c.Call(ctx, "agents/close", map[string]string{"agent_id": agentID}, nil)
}

// GetAgent describes one agent (agents/get).
func (c *Client) GetAgent(ctx context.Context, agentID string) (AgentInfo, error) {
	var r AgentInfo
	return r, c.Call(ctx, "agents/get", map[string]string{"agent_id": agentID}, &r)
}

// WaitIdle waits until no agent of agentID's tree runs a turn or has input to run, at most
// timeoutMs milliseconds (0 to 600000); on timeout Idle is false and Running and Runnable name
// the busy agents (agents/wait_idle). ctx bounds the request as well.
func (c *Client) WaitIdle(ctx context.Context, agentID string, timeoutMs int) (WaitIdleResult, error) {
	var r WaitIdleResult
	params := map[string]any{"agent_id": agentID, "timeout_ms": timeoutMs}
	return r, c.Call(ctx, "agents/wait_idle", params, &r)
}

// Spawn starts a subagent of params.Caller (agents/spawn).
func (c *Client) Spawn(ctx context.Context, params SpawnParams) (SpawnResult, error) {
	var r SpawnResult
	return r, c.Call(ctx, "agents/spawn", params, &r)
}

// Followup queues a host-authority message (agents/followup) and returns its message id.
func (c *Client) Followup(ctx context.Context, params FollowupParams) (string, error) {
	var r struct {
		MessageID string `json:"message_id"`
	}
	return r.MessageID, c.Call(ctx, "agents/followup", params, &r)
}

// Interrupt interrupts any live agent with host authority (agents/interrupt).
func (c *Client) Interrupt(ctx context.Context, agentID string) (InterruptResult, error) {
	var r InterruptResult
	return r, c.Call(ctx, "agents/interrupt", map[string]string{"agent_id": agentID}, &r)
}

// BeginTurn starts a turn of a live agent (turns/begin) and returns its turn id.
func (c *Client) BeginTurn(ctx context.Context, params TurnBeginParams) (string, error) {
	var r struct {
		TurnID string `json:"turn_id"`
	}
	return r.TurnID, c.Call(ctx, "turns/begin", params, &r)
}

// EndTurn ends an open turn (turns/end).
func (c *Client) EndTurn(ctx context.Context, params TurnEndParams) error {
	return c.Call(ctx, "turns/end", params, nil)
}

// SendMessage is the send_message tool; a refusal is an *RPCError.
func (c *Client) SendMessage(ctx context.Context, params SendMessageParams) (SendMessageResult, error) {
	var r SendMessageResult
	return r, c.Call(ctx, "send_message", params, &r)
}

// InterruptAgent is the interrupt_agent tool.
func (c *Client) InterruptAgent(ctx context.Context, params InterruptAgentParams) (InterruptAgentResult, error) {
	var r InterruptAgentResult
	return r, c.Call(ctx, "interrupt_agent", params, &r)
}

// ListAgents is the list_agents tool.
func (c *Client) ListAgents(ctx context.Context, params ListAgentsParams) (ListAgentsResult, error) {
	var r ListAgentsResult
	return r, c.Call(ctx, "list_agents", params, &r)
}

// Report is the report tool.
func (c *Client) Report(ctx context.Context, params ReportParams) (ReportResult, error) {
	var r ReportResult
	return r, c.Call(ctx, "report", params, &r)
}

// CallTool is tools/call, the MCP bridge: tool failures are results with IsError.
func (c *Client) CallTool(ctx context.Context, params ToolsCallParams) (CallToolResult, error) {
	var r CallToolResult
	return r, c.Call(ctx, "tools/call", params, &r)
}

// Discover asks what the server supports without a handshake (server/discover).
func (c *Client) Discover(ctx context.Context) (DiscoverResult, error) {
	var r DiscoverResult
	return r, c.Call(ctx, "server/discover", map[string]any{}, &r)
}

// Stats returns the server's counts and commit figures (server/stats).
func (c *Client) Stats(ctx context.Context) (StatsResult, error) {
	var r StatsResult
	return r, c.Call(ctx, "server/stats", map[string]any{}, &r)
}
