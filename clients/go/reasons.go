package subagentd

// How a turn ended (turns/end reason).
const (
	ReasonCompleted = "completed"
	ReasonAborted   = "aborted"
	ReasonMaxTokens = "max-tokens"
	ReasonRefusal   = "refusal"
	ReasonError     = "error"
)
