package subagentd

import "context"

// Typed wrappers of the host API (PROTOCOL.md §4) and the four tools as direct methods (§5).

// callTyped is Call with its result decoded into a new R.
func callTyped[R any](ctx context.Context, c *Client, method string, params any) (R, error) {
	var r R
	err := c.Call(ctx, method, params, &r)
	return r, err
}

// OpenAgent makes an ordinary session live (agents/open).
func (c *Client) OpenAgent(ctx context.Context, params OpenParams) (OpenResult, error) {
	return callTyped[OpenResult](ctx, c, "agents/open", params)
}

// CloseAgent closes an ordinary session and waits for everything live below it (agents/close).
func (c *Client) CloseAgent(ctx context.Context, agentID string) error {
	return c.Call(ctx, "agents/close", map[string]string{"agent_id": agentID}, nil)
}

// GetAgent describes one agent (agents/get).
func (c *Client) GetAgent(ctx context.Context, agentID string) (AgentInfo, error) {
	return callTyped[AgentInfo](ctx, c, "agents/get", map[string]string{"agent_id": agentID})
}

// WaitIdle waits until no agent of agentID's tree runs a turn or has input to run, at most
// timeoutMs milliseconds (0 to 600000); on timeout Idle is false and Running and Runnable name
// the busy agents (agents/wait_idle). ctx bounds the request as well.
func (c *Client) WaitIdle(ctx context.Context, agentID string, timeoutMs int) (WaitIdleResult, error) {
	params := map[string]any{"agent_id": agentID, "timeout_ms": timeoutMs}
	return callTyped[WaitIdleResult](ctx, c, "agents/wait_idle", params)
}

// Spawn starts a subagent of params.Caller (agents/spawn).
func (c *Client) Spawn(ctx context.Context, params SpawnParams) (SpawnResult, error) {
	return callTyped[SpawnResult](ctx, c, "agents/spawn", params)
}

// Followup queues a host-authority message (agents/followup) and returns its message id.
func (c *Client) Followup(ctx context.Context, params FollowupParams) (string, error) {
	var r struct {
		MessageID string `json:"message_id"`
	}
	err := c.Call(ctx, "agents/followup", params, &r) // first: the spec leaves a field read beside a call unordered
	return r.MessageID, err
}

// Budget sets (or, with Remove, drops) limits of an agent's own budget (agents/budget); agents
// it held then run their queued input.
func (c *Client) Budget(ctx context.Context, params BudgetParams) (BudgetResult, error) {
	return callTyped[BudgetResult](ctx, c, "agents/budget", params)
}

// Stop stops a whole subtree (agents/stop): every open turn below it interrupted, queues parked
// or cleared, no new turn until Resume.
func (c *Client) Stop(ctx context.Context, params StopParams) (StopResult, error) {
	return callTyped[StopResult](ctx, c, "agents/stop", params)
}

// Resume resumes a stopped subtree (agents/resume).
func (c *Client) Resume(ctx context.Context, agentID string) (BudgetResult, error) {
	return callTyped[BudgetResult](ctx, c, "agents/resume", map[string]string{"agent_id": agentID})
}

// Interrupt interrupts any live agent with host authority (agents/interrupt).
func (c *Client) Interrupt(ctx context.Context, agentID string) (InterruptResult, error) {
	return callTyped[InterruptResult](ctx, c, "agents/interrupt", map[string]string{"agent_id": agentID})
}

// BeginTurn starts a turn of a live agent (turns/begin) and returns its turn id.
func (c *Client) BeginTurn(ctx context.Context, params TurnBeginParams) (string, error) {
	var r struct {
		TurnID string `json:"turn_id"`
	}
	err := c.Call(ctx, "turns/begin", params, &r) // first: the spec leaves a field read beside a call unordered
	return r.TurnID, err
}

// EndTurn ends an open turn (turns/end).
func (c *Client) EndTurn(ctx context.Context, params TurnEndParams) error {
	return c.Call(ctx, "turns/end", params, nil)
}

// SendMessage is the send_message tool; a refusal is an *RPCError.
func (c *Client) SendMessage(ctx context.Context, params SendMessageParams) (SendMessageResult, error) {
	return callTyped[SendMessageResult](ctx, c, "send_message", params)
}

// InterruptAgent is the interrupt_agent tool.
func (c *Client) InterruptAgent(ctx context.Context, params InterruptAgentParams) (InterruptAgentResult, error) {
	return callTyped[InterruptAgentResult](ctx, c, "interrupt_agent", params)
}

// ListAgents is the list_agents tool.
func (c *Client) ListAgents(ctx context.Context, params ListAgentsParams) (ListAgentsResult, error) {
	return callTyped[ListAgentsResult](ctx, c, "list_agents", params)
}

// Report is the report tool.
func (c *Client) Report(ctx context.Context, params ReportParams) (ReportResult, error) {
	return callTyped[ReportResult](ctx, c, "report", params)
}

// CallTool is tools/call, the MCP bridge: tool failures are results with IsError.
func (c *Client) CallTool(ctx context.Context, params ToolsCallParams) (CallToolResult, error) {
	return callTyped[CallToolResult](ctx, c, "tools/call", params)
}

// Discover asks what the server supports without a handshake (server/discover).
func (c *Client) Discover(ctx context.Context) (DiscoverResult, error) {
	return callTyped[DiscoverResult](ctx, c, "server/discover", map[string]any{})
}

// AdvanceClock moves a `--clock manual` subagentd's clock forward by seconds (tests): the timers
// due on the way run (clock/advance). It returns the seconds advanced since start.
func (c *Client) AdvanceClock(ctx context.Context, seconds float64) (float64, error) {
	var r struct {
		Advanced float64 `json:"advanced"`
	}
	err := c.Call(ctx, "clock/advance", map[string]any{"seconds": seconds}, &r)
	return r.Advanced, err
}

// Stats returns the server's counts and commit figures (server/stats).
func (c *Client) Stats(ctx context.Context) (StatsResult, error) {
	return callTyped[StatsResult](ctx, c, "server/stats", map[string]any{})
}
