package subagentd

import "encoding/json"

// Error codes (subagentd/schema/codes.py; PROTOCOL.md §8). A test checks them against
// clients/openrpc.json.
const (
	CodeParseError                 = -32700
	CodeInvalidRequest             = -32600
	CodeMethodNotFound             = -32601
	CodeInvalidParams              = -32602
	CodeInternalError              = -32603
	CodeNotInitialized             = -32002
	CodeRequestCancelled           = -32800
	CodeUnsupportedProtocolVersion = -32022
	CodeUnauthorized               = 1001
	CodeNotResumable               = 1002
	CodeDraining                   = 1003
	CodeParentUnavailable          = 1004
	CodeActivationClosing          = 1005
	CodeDuplicateChild             = 1006
	CodeDepthExceeded              = 1007
	CodeIdempotencyConflict        = 1008
	CodeUnknownAgent               = 1009
	CodeInvalidState               = 1010
	CodeOverloaded                 = 1011
	CodeStorageFailed              = 1012
	CodeDatabaseLost               = 1013
	CodeLeaseLost                  = 1014
)

// How a turn ended (turns/end reason).
const (
	ReasonCompleted = "completed"
	ReasonAborted   = "aborted"
	ReasonMaxTokens = "max-tokens"
	ReasonRefusal   = "refusal"
	ReasonError     = "error"
)

// --- lifecycle ------------------------------------------------------------------------------

// Implementation names a client or server.
type Implementation struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Title   string `json:"title,omitempty"`
}

// InitializeParams are initialize's params; empty fields get the client's defaults.
type InitializeParams struct {
	ProtocolVersion string          `json:"protocolVersion"`
	ClientInfo      *Implementation `json:"clientInfo,omitempty"`
	Capabilities    map[string]any  `json:"capabilities,omitempty"`
	// StatusEvents asks for agent/status notifications (experimental.subagentd.statusEvents).
	StatusEvents bool `json:"-"`
}

// InitializeResult is initialize's result.
type InitializeResult struct {
	ProtocolVersion string          `json:"protocolVersion"`
	ServerInfo      Implementation  `json:"serverInfo"`
	Capabilities    json.RawMessage `json:"capabilities"`
	Instructions    string          `json:"instructions,omitempty"`
}

// --- host API -------------------------------------------------------------------------------

// OpenParams are agents/open's params.
type OpenParams struct {
	AgentID  string  `json:"agent_id,omitempty"`
	Label    string  `json:"label,omitempty"`
	ParentID string  `json:"parent_id,omitempty"`
	Budget   *Budget `json:"budget,omitempty"`
	// Traceparent is the host's span (W3C trace context) for this agent's turns.
	Traceparent string `json:"traceparent,omitempty"`
}

// OpenResult is agents/open's result.
type OpenResult struct {
	AgentID      string `json:"agent_id"`
	ActivationID string `json:"activation_id"`
}

// ToolFilter narrows a child's tools.
type ToolFilter struct {
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
}

// SpawnParams are agents/spawn's params.
type SpawnParams struct {
	Caller         string      `json:"caller"`
	Activation     string      `json:"activation,omitempty"`
	Label          string      `json:"label"`
	Prompt         string      `json:"prompt"`
	Mode           string      `json:"mode,omitempty"`
	ChildID        string      `json:"child_id,omitempty"`
	AgentProvider  string      `json:"agent_provider,omitempty"`
	AgentModel     string      `json:"agent_model,omitempty"`
	Persona        string      `json:"persona,omitempty"`
	ToolFilter     *ToolFilter `json:"tool_filter,omitempty"`
	Budget         *Budget     `json:"budget,omitempty"`
	OnParentClose  string      `json:"on_parent_close,omitempty"` // "drain" (default) or "finish"
	IdempotencyKey string      `json:"idempotency_key,omitempty"`
	// Traceparent is the host's span (W3C trace context) for the child's turns.
	Traceparent string `json:"traceparent,omitempty"`
}

// SpawnResult is agents/spawn's result.
type SpawnResult struct {
	ChildID      string `json:"child_id"`
	ActivationID string `json:"activation_id"`
	MessageID    string `json:"message_id"`
	Text         string `json:"text"`
}

// FollowupParams are agents/followup's params.
type FollowupParams struct {
	AgentID        string `json:"agent_id"`
	Message        string `json:"message"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

// InterruptResult is agents/interrupt's result.
type InterruptResult struct {
	Accepted       bool   `json:"accepted"`
	PreviousStatus string `json:"previous_status"`
}

// AgentInfo is agents/get's result.
type AgentInfo struct {
	AgentID   string `json:"agent_id"`
	ParentID  string `json:"parent_id,omitempty"`
	Kind      string `json:"kind"`
	Mode      string `json:"mode,omitempty"`
	Label     string `json:"label,omitempty"`
	Status    string `json:"status"`
	Depth     int    `json:"depth"`
	CreatedAt string `json:"created_at"`
	Queued    int    `json:"queued"`
	Parked    int    `json:"parked"`
	// Usage is its own usage; TreeUsage the same summed over its subtree.
	Usage     *Spent      `json:"usage,omitempty"`
	TreeUsage *Spent      `json:"tree_usage,omitempty"`
	Budget    *BudgetInfo `json:"budget,omitempty"`
	Held      *Held       `json:"held,omitempty"`
	// OnParentClose is "finish" when a close of its root lets its open turn end first.
	OnParentClose string `json:"on_parent_close,omitempty"`
}

// --- usage and budgets (PROTOCOL.md §12) ----------------------------------------------------

// Usage is what one turn used (turns/end).
type Usage struct {
	InputTokens  *int64   `json:"input_tokens,omitempty"`
	OutputTokens *int64   `json:"output_tokens,omitempty"`
	Cost         *float64 `json:"cost,omitempty"`
}

// Spent sums turns, spawns, tokens and cost.
type Spent struct {
	Turns        int64   `json:"turns"`
	Spawns       int64   `json:"spawns"`
	InputTokens  int64   `json:"input_tokens"`
	OutputTokens int64   `json:"output_tokens"`
	Cost         float64 `json:"cost"`
	Currency     string  `json:"currency,omitempty"`
}

// Budget holds limits; a nil field sets none at this level.
type Budget struct {
	MaxTurns   *int64   `json:"max_turns,omitempty"`
	MaxSpawns  *int64   `json:"max_spawns,omitempty"`
	MaxTokens  *int64   `json:"max_tokens,omitempty"`
	MaxCost    *float64 `json:"max_cost,omitempty"`
	MaxSeconds *float64 `json:"max_seconds,omitempty"`
}

// BudgetInfo is an agent's own budget as stored.
type BudgetInfo struct {
	MaxTurns  *int64   `json:"max_turns,omitempty"`
	MaxSpawns *int64   `json:"max_spawns,omitempty"`
	MaxTokens *int64   `json:"max_tokens,omitempty"`
	MaxCost   *float64 `json:"max_cost,omitempty"`
	Deadline  string   `json:"deadline,omitempty"`
	Stopped   bool     `json:"stopped,omitempty"`
}

// Held says which budget (whose) keeps an agent's queued input from starting a turn.
type Held struct {
	Budget  string `json:"budget"`
	AgentID string `json:"agent_id"`
}

// BudgetParams are agents/budget's params.
type BudgetParams struct {
	AgentID string   `json:"agent_id"`
	Budget  *Budget  `json:"budget,omitempty"`
	Remove  []string `json:"remove,omitempty"`
}

// BudgetResult is agents/budget's (and agents/resume's) result.
type BudgetResult struct {
	AgentID   string     `json:"agent_id"`
	Budget    BudgetInfo `json:"budget"`
	TreeUsage Spent      `json:"tree_usage"`
	Resumed   []string   `json:"resumed,omitempty"`
}

// StopParams are agents/stop's params; Queues is "park" (default) or "clear".
type StopParams struct {
	AgentID string `json:"agent_id"`
	Queues  string `json:"queues,omitempty"`
}

// StopResult is agents/stop's result.
type StopResult struct {
	AgentID     string   `json:"agent_id"`
	Interrupted []string `json:"interrupted"`
	Cleared     int      `json:"cleared,omitempty"`
}

// TurnBeginParams are turns/begin's params.
type TurnBeginParams struct {
	AgentID  string   `json:"agent_id"`
	Messages []string `json:"messages,omitempty"`
	// Traceparent is the host's span (W3C trace context) for this turn.
	Traceparent string `json:"traceparent,omitempty"`
}

// TurnEndParams are turns/end's params. A nil Output means no closing message.
type TurnEndParams struct {
	AgentID string  `json:"agent_id"`
	TurnID  string  `json:"turn_id"`
	Reason  string  `json:"reason"`
	Output  *string `json:"output,omitempty"`
	Usage   *Usage  `json:"usage,omitempty"`
}

// --- the four tools -------------------------------------------------------------------------

// SendMessageParams are send_message's arguments plus the caller.
type SendMessageParams struct {
	Caller         string `json:"caller"`
	Activation     string `json:"activation,omitempty"`
	SubagentID     string `json:"subagent_id"`
	Message        string `json:"message"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

// SendMessageResult is send_message's result.
type SendMessageResult struct {
	Text      string `json:"text"`
	MessageID string `json:"message_id"`
}

// InterruptAgentParams are interrupt_agent's arguments plus the caller.
type InterruptAgentParams struct {
	Caller     string `json:"caller"`
	Activation string `json:"activation,omitempty"`
	AgentID    string `json:"agent_id"`
}

// InterruptAgentResult is interrupt_agent's result.
type InterruptAgentResult struct {
	Text           string `json:"text"`
	Accepted       bool   `json:"accepted"`
	PreviousStatus string `json:"previous_status,omitempty"`
}

// ListAgentsParams are list_agents' arguments plus the caller. Scope: "children" (default) or
// "descendants".
type ListAgentsParams struct {
	Caller     string `json:"caller"`
	Activation string `json:"activation,omitempty"`
	Scope      string `json:"scope,omitempty"`
}

// WaitIdleResult is agents/wait_idle's result.
type WaitIdleResult struct {
	Idle     bool     `json:"idle"`
	Running  []string `json:"running,omitempty"`
	Runnable []string `json:"runnable,omitempty"`
}

// AgentRow is one list_agents row: Kind "child" (Label, Status, Mode) or "diagnostic" (Reason);
// Parent and Depth with scope "descendants".
type AgentRow struct {
	Kind   string `json:"kind"`
	ID     string `json:"id"`
	Label  string `json:"label,omitempty"`
	Status string `json:"status,omitempty"`
	Parked int    `json:"parked,omitempty"` // parked messages it holds ("[idle, 2 parked]")
	Mode   string `json:"mode,omitempty"`
	Reason string `json:"reason,omitempty"`
	Parent string `json:"parent,omitempty"`
	Depth  *int   `json:"depth,omitempty"`
}

// ListAgentsResult is list_agents' result.
type ListAgentsResult struct {
	Text   string     `json:"text"`
	Agents []AgentRow `json:"agents"`
}

// ReportParams are report's arguments plus the caller.
type ReportParams struct {
	Caller         string `json:"caller"`
	Activation     string `json:"activation,omitempty"`
	Output         string `json:"output"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

// ReportResult is report's result.
type ReportResult struct {
	Text      string `json:"text"`
	MessageID string `json:"message_id"`
}

// ToolsCallParams are tools/call's params (the MCP bridge).
type ToolsCallParams struct {
	Name      string         `json:"name"`
	Arguments any            `json:"arguments,omitempty"`
	Meta      map[string]any `json:"_meta,omitempty"`
}

// CallToolResult is tools/call's result.
type CallToolResult struct {
	Content           []TextBlock     `json:"content"`
	StructuredContent json.RawMessage `json:"structuredContent,omitempty"`
	IsError           bool            `json:"isError"`
}

// --- notifications --------------------------------------------------------------------------

// Message, TextBlock and Source are in messages.go.

// TurnStart is turn/start: run a turn of AgentID on Messages.
type TurnStart struct {
	AgentID      string    `json:"agent_id"`
	ActivationID string    `json:"activation_id"`
	TurnID       string    `json:"turn_id"`
	Messages     []Message `json:"messages"`
	// Resume is the child's descriptor, on the first turn after a cold resume.
	Resume json.RawMessage `json:"resume,omitempty"`
	// Instructions is the report guidance, on every turn of a continuable child.
	Instructions string `json:"instructions,omitempty"`
	// Traceparent is the turn's span (W3C trace context) when subagentd traces.
	Traceparent string `json:"traceparent,omitempty"`
}

// InterruptCause says why a turn is interrupted: Kind "parent" (By the interrupter), "user" or
// "shutdown".
type InterruptCause struct {
	Kind string `json:"kind"`
	By   string `json:"by,omitempty"`
}

// TurnInterrupt is turn/interrupt.
type TurnInterrupt struct {
	AgentID string         `json:"agent_id"`
	TurnID  string         `json:"turn_id"`
	Cause   InterruptCause `json:"cause"`
}

// AgentSettled is agent/settled.
type AgentSettled struct {
	AgentID string `json:"agent_id"`
	Reason  string `json:"reason"`
}

// AgentInject is agent/inject: quiet reports, already in the transcript.
type AgentInject struct {
	AgentID  string    `json:"agent_id"`
	Messages []Message `json:"messages"`
}

// AgentStatus is agent/status.
type AgentStatus struct {
	AgentID string `json:"agent_id"`
	Status  string `json:"status"`
}

// --- operator -------------------------------------------------------------------------------

// DiscoverResult is server/discover's result (MCP 2026-07-28).
type DiscoverResult struct {
	SupportedVersions []string        `json:"supportedVersions"`
	Capabilities      json.RawMessage `json:"capabilities"`
	ServerInfo        Implementation  `json:"serverInfo"`
	Instructions      string          `json:"instructions"`
	ResultType        string          `json:"resultType"`
	TTLMs             int             `json:"ttlMs"`
	CacheScope        string          `json:"cacheScope"`
}

// SessionCounts are sessions by status.
type SessionCounts struct {
	Running int `json:"running"`
	Idle    int `json:"idle"`
	Ready   int `json:"ready"`
}

// CommitLatency is the group-commit latency over this process's recent commits.
type CommitLatency struct {
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
}

// StatsResult is server/stats' result; the pointer fields are absent until they apply.
type StatsResult struct {
	Sessions         SessionCounts  `json:"sessions"`
	LiveAgents       int            `json:"live_agents"`
	LiveHere         *int           `json:"live_here,omitempty"`
	QueuedMessages   int            `json:"queued_messages"`
	ParkedMessages   int            `json:"parked_messages"`
	OldestQueuedAgeS *float64       `json:"oldest_queued_age_s,omitempty"`
	DatabaseBytes    int64          `json:"database_bytes"`
	FreeBytes        int64          `json:"free_bytes"`
	Commits          *int           `json:"commits,omitempty"`
	CommitLatency    *CommitLatency `json:"commit_latency,omitempty"`
}
